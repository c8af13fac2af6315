// Fuzz target: the record-shard header decoder, the shard reader and the manifest parser
// (data/record_shards.h).
//
// The first byte picks a mode ('0'..'2', any byte - '0' mod 3), the rest is the input:
//   0  raw header bytes        DecodeRecordShardHeader on the bytes as they are (mostly fails at
//                              the magic or the header CRC)
//   1  CRC-fixed header        the first 124 bytes (zero-padded) get the magic, version 2 and a
//                              correct header CRC, so the field checks (dtype, ndim, shape,
//                              record size, count: the signed overflow of issue #17) are reached;
//                              OK -> encode/decode round-trips, record size = prod(shape) * dtype
//                              size; then the bytes plus the rest of the input as payload are
//                              written to a file and opened (size, payload CRC) and read
//   2  manifest text           ParseRecordShardManifest; OK -> encoding parses back equal
// Every error must be a non-OK, non-INTERNAL Status with a message; nothing may crash or trip a
// sanitizer. Seeds: tests/fuzz/corpus/record_shard_header/ (make_data_seeds.py).
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "meshflow/base/checksum.h"
#include "meshflow/data/mapped_file.h"
#include "meshflow/data/record_shards.h"
#include "meshflow/tests/fuzz/fuzz_input.h"

namespace meshflow::fuzz {
namespace {

void CheckError(const Status& s, const char* what) {
  if (!s.ok()) {
    FUZZ_CHECK(!s.message().empty(), what << ": error without a message");
    FUZZ_CHECK(s.code() != StatusCode::kInternal, what << ": internal error " << s);
  }
}

const std::string& ScratchDir() {
  static const std::string* dir = [] {
    const char* base = std::getenv("TEST_TMPDIR");
    auto* d = new std::string((std::filesystem::path(base != nullptr ? base : "/tmp") /
                               ("mf_fuzz_shard_" + std::to_string(::getpid())))
                                  .string());
    std::filesystem::create_directories(*d);
    return d;
  }();
  return *dir;
}

void CheckDecoded(const RecordShardHeader& h) {
  int64_t elems = DTypeSize(h.dtype);
  for (int64_t d : h.sample_shape) {
    FUZZ_CHECK(d >= 0, "negative shape entry accepted");
    elems = d == 0 ? 0 : elems;  // a zero dim: empty record
  }
  if (elems != 0) {
    int64_t n = DTypeSize(h.dtype);
    for (int64_t d : h.sample_shape) {
      FUZZ_CHECK(!__builtin_mul_overflow(n, d, &n), "record size overflows");
    }
    FUZZ_CHECK(n == h.record_size, "record size " << h.record_size << " != prod(shape) " << n);
  } else {
    FUZZ_CHECK(h.record_size == 0, "zero-size record with record size " << h.record_size);
  }
  FUZZ_CHECK(h.record_count >= 0 && h.record_count <= kRecordShardMaxRecords, "bad count " << h.record_count);
  auto again = DecodeRecordShardHeader(EncodeRecordShardHeader(h), "again");
  FUZZ_CHECK(again.ok(), "re-encoded header does not decode: " << again.status());
  FUZZ_CHECK(again->dtype == h.dtype && again->sample_shape == h.sample_shape && again->record_size == h.record_size &&
                 again->record_count == h.record_count && again->payload_crc == h.payload_crc,
             "header round trip differs");
}

void RawHeader(const uint8_t* data, size_t size) {
  auto h = DecodeRecordShardHeader(std::as_bytes(std::span<const uint8_t>(data, size)), "fuzz.mfrec");
  CheckError(h.status(), "DecodeRecordShardHeader");
  if (h.ok()) CheckDecoded(*h);
}

void FixedHeader(const uint8_t* data, size_t size) {
  std::vector<std::byte> file(kRecordShardHeaderSize, std::byte{0});
  const size_t head = std::min<size_t>(size, 124);
  std::memcpy(file.data(), data, head);
  std::memcpy(file.data(), kRecordShardMagic, 8);
  const uint32_t version = kRecordShardVersion;
  std::memcpy(file.data() + 8, &version, 4);
  const uint32_t crc = Crc32c(std::span<const std::byte>(file.data(), 124));
  std::memcpy(file.data() + 124, &crc, 4);
  auto h = DecodeRecordShardHeader(file, "fuzz.mfrec");
  CheckError(h.status(), "DecodeRecordShardHeader");
  if (!h.ok()) return;
  CheckDecoded(*h);
  // The rest of the input is the payload; open it as a file (size and CRC checks) and read.
  if (size > head) file.insert(file.end(), reinterpret_cast<const std::byte*>(data + head),
                               reinterpret_cast<const std::byte*>(data + size));
  const std::string path = ScratchDir() + "/s.mfrec";
  const std::span<const std::byte> parts[] = {file};
  if (!WriteFileParts(path, parts).ok()) return;
  for (bool verify : {true, false}) {
    auto ds = RecordShardDataset::OpenFiles({path}, {.verify_checksums = verify, .require_manifest = false});
    CheckError(ds.status(), "RecordShardDataset::OpenFiles");
    if (!ds.ok()) continue;
    FUZZ_CHECK((*ds)->size() == h->record_count, "size " << (*ds)->size() << " != count " << h->record_count);
    // A shard of 0 records may declare records of up to kRecordShardMaxRecordBytes (1 TiB): no
    // buffer for a record that is not there (regress_empty_shard_of_1tib_records).
    if ((*ds)->size() == 0) continue;
    std::vector<std::byte> buf(static_cast<size_t>((*ds)->sample_bytes()));
    for (int64_t i : {int64_t{0}, (*ds)->size() - 1}) {
      if (i < 0 || i >= (*ds)->size()) continue;
      const Status s = (*ds)->Read(i, buf);
      FUZZ_CHECK(s.ok(), "read of record " << i << " failed: " << s);
    }
  }
}

void Manifest(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto m = ParseRecordShardManifest(text, "fuzz manifest");
  CheckError(m.status(), "ParseRecordShardManifest");
  if (!m.ok()) return;
  auto again = ParseRecordShardManifest(EncodeRecordShardManifest(*m), "again");
  FUZZ_CHECK(again.ok() && *again == *m, "manifest round trip: " << again.status());
}

}  // namespace
}  // namespace meshflow::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // '0'..'2' select the modes, so text seeds start with a digit.
  const int mode = static_cast<uint8_t>(data[0] - '0') % 3;
  ++data;
  --size;
  if (mode == 0) {
    meshflow::fuzz::RawHeader(data, size);
  } else if (mode == 1) {
    meshflow::fuzz::FixedHeader(data, size);
  } else {
    meshflow::fuzz::Manifest(data, size);
  }
  return 0;
}
