// Fuzz target: the ".mftok" token-file header and TokenFileDataset::Open / Read
// (data/token_file.h).
//
// Input: byte 0 = options (bit 0: output i64, bit 1: verify the checksum, bits 2-3: width
// none / u16 / u32 / none, bit 4: fix the header CRC), byte 1 = seq_len (1..256), the rest is the
// file. With bit 4 the first 60 bytes (zero-padded) get the magic, version 1 and a correct header
// CRC, so the field and size checks are reached (otherwise most inputs are raw files, which
// need an explicit width). Checks: DecodeTokenFileHeader OK -> encode/decode round-trips; Open
// OK -> size() = (tokens - 1) / seq_len and Read of the first and last sample either succeeds or
// fails with DATA_LOSS (a token outside the vocabulary or i32); no error is INTERNAL or empty;
// nothing crashes. Seeds: tests/fuzz/corpus/token_file_header/ (make_data_seeds.py).
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "meshflow/base/checksum.h"
#include "meshflow/data/mapped_file.h"
#include "meshflow/data/token_file.h"
#include "meshflow/tests/fuzz/fuzz_input.h"

namespace meshflow::fuzz {
namespace {

void CheckError(const Status& s, const char* what) {
  if (!s.ok()) {
    FUZZ_CHECK(!s.message().empty(), what << ": error without a message");
    FUZZ_CHECK(s.code() != StatusCode::kInternal, what << ": internal error " << s);
  }
}

const std::string& ScratchFile() {
  static const std::string* path = [] {
    const char* base = std::getenv("TEST_TMPDIR");
    return new std::string((std::filesystem::path(base != nullptr ? base : "/tmp") /
                            ("mf_fuzz_tokens_" + std::to_string(::getpid()) + ".mftok"))
                               .string());
  }();
  return *path;
}

void Run(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  const uint8_t flags = in.Byte();
  const int64_t seq_len = 1 + in.Byte();
  const std::string_view rest = in.Rest();
  std::vector<std::byte> file(reinterpret_cast<const std::byte*>(rest.data()),
                              reinterpret_cast<const std::byte*>(rest.data() + rest.size()));
  if (flags & 16) {
    if (file.size() < static_cast<size_t>(kTokenFileHeaderSize)) file.resize(kTokenFileHeaderSize, std::byte{0});
    std::memcpy(file.data(), kTokenFileMagic, 8);
    const uint32_t version = kTokenFileVersion;
    std::memcpy(file.data() + 8, &version, 4);
    const uint32_t crc = Crc32c(std::span<const std::byte>(file.data(), 60));
    std::memcpy(file.data() + 60, &crc, 4);
  }
  auto h = DecodeTokenFileHeader(file, "fuzz.mftok");
  CheckError(h.status(), "DecodeTokenFileHeader");
  if (h.ok()) {
    auto again = DecodeTokenFileHeader(EncodeTokenFileHeader(*h), "again");
    FUZZ_CHECK(again.ok() && *again == *h, "header round trip: " << again.status());
  }
  const std::span<const std::byte> parts[] = {file};
  if (!WriteFileParts(ScratchFile(), parts).ok()) return;
  TokenFileOptions options{.seq_len = seq_len,
                           .dtype = (flags & 1) ? DType::kI64 : DType::kI32,
                           .verify_checksum = (flags & 2) != 0};
  const int width = (flags >> 2) & 3;
  if (width == 1) options.width = TokenWidth::kU16;
  if (width == 2) options.width = TokenWidth::kU32;
  auto ds = TokenFileDataset::Open(ScratchFile(), options);
  CheckError(ds.status(), "TokenFileDataset::Open");
  if (!ds.ok()) return;
  FUZZ_CHECK((*ds)->size() == ((*ds)->num_tokens() - 1) / seq_len, "bad sample count");
  FUZZ_CHECK((*ds)->size() >= 1, "opened without a sample");
  std::vector<std::byte> buf(static_cast<size_t>((*ds)->sample_bytes()));
  for (int64_t i : {int64_t{0}, (*ds)->size() - 1}) {
    const Status s = (*ds)->Read(i, buf);
    FUZZ_CHECK(s.ok() || s.code() == StatusCode::kDataLoss, "read of sample " << i << ": " << s);
    CheckError(s, "TokenFileDataset::Read");
  }
}

}  // namespace
}  // namespace meshflow::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  meshflow::fuzz::Run(data, size);
  return 0;
}
