// Fuzz target: the checkpoint metadata decoder (DecodeMetadata, checkpoint/format.h).
//
// The first byte picks how the rest is fed to the decoder:
//   even  the rest as is (magic, version, length and CRC checks; almost every mutation stops at
//         the trailer CRC)
//   odd   the rest with its body length and trailer CRC resealed when it is long enough to hold
//         a header and a trailer, so mutations reach the record checks (counts, shapes, chunk
//         boxes, byte ranges, checksum counts, overlap and coverage, names)
// Checks: every error is DATA_LOSS or UNIMPLEMENTED (never INTERNAL) with a non-empty message
// naming the path; an accepted file satisfies the documented invariants (chunks non-empty,
// inside the shape, inside their data file, byte length = elements * dtype size, one CRC per
// checksum block, covering the tensor exactly, names unique) and re-encodes to metadata that
// decodes to the same records. Nothing may crash, hang or trip a sanitizer. Seeds:
// tests/fuzz/corpus/checkpoint_metadata/ (written by make_checkpoint_seeds.py).
#include <cstdint>
#include <cstring>
#include <set>
#include <span>
#include <string>
#include <string_view>

#include "meshflow/base/checksum.h"
#include "meshflow/checkpoint/format.h"
#include "meshflow/dtensor/box.h"
#include "meshflow/tests/fuzz/fuzz_input.h"

namespace meshflow::fuzz {
namespace {

constexpr std::string_view kPath = "fuzz/metadata.mfck";
constexpr size_t kHeaderBytes = 24;  // magic, version, reserved, body length
constexpr size_t kTrailerBytes = 4;

void Reseal(std::string& bytes) {
  if (bytes.size() < kHeaderBytes + kTrailerBytes) return;
  const uint64_t body = bytes.size() - kHeaderBytes - kTrailerBytes;
  std::memcpy(bytes.data() + 16, &body, 8);
  const uint32_t crc = Crc32c(std::as_bytes(std::span<const char>(bytes.data(), bytes.size() - 4)));
  std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
}

void CheckInvariants(const CheckpointMetadata& md) {
  FUZZ_CHECK(md.checksum_block_bytes > 0, "block size " << md.checksum_block_bytes);
  std::set<std::string> names;
  for (const TensorRecord& t : md.tensors) {
    FUZZ_CHECK(names.insert(t.name).second, "duplicate name " << t.name);
    FUZZ_CHECK(t.shape.size() <= 64, "rank " << t.shape.size());
    int64_t total = 1;
    for (int64_t s : t.shape) {
      FUZZ_CHECK(s >= 0, "negative size " << s);
      total *= s;
    }
    int64_t covered = 0;
    for (size_t i = 0; i < t.chunks.size(); ++i) {
      const ChunkRecord& c = t.chunks[i];
      FUZZ_CHECK(c.box.rank() == static_cast<int>(t.shape.size()), "chunk rank");
      FUZZ_CHECK(!c.box.empty(), "empty chunk " << c.box.ToString());
      for (size_t d = 0; d < t.shape.size(); ++d) {
        FUZZ_CHECK(c.box.offset[d] >= 0 && c.box.offset[d] + c.box.shape[d] <= t.shape[d],
                   "chunk " << c.box.ToString() << " outside the shape");
      }
      FUZZ_CHECK(c.file >= 0 && static_cast<size_t>(c.file) < md.file_sizes.size(), "file " << c.file);
      FUZZ_CHECK(c.byte_length == c.box.NumElements() * DTypeSize(t.dtype), "byte length " << c.byte_length);
      FUZZ_CHECK(c.byte_offset >= 0 && c.byte_offset + c.byte_length <= md.file_sizes[static_cast<size_t>(c.file)],
                 "chunk bytes past the end of its file");
      FUZZ_CHECK(c.block_bytes > 0 && c.block_bytes <= md.checksum_block_bytes, "chunk block size " << c.block_bytes);
      FUZZ_CHECK(static_cast<int64_t>(c.block_crcs.size()) == NumChecksumBlocks(c.byte_length, c.block_bytes),
                 "checksum count " << c.block_crcs.size());
      for (size_t j = 0; j < i; ++j) FUZZ_CHECK(Intersect(t.chunks[j].box, c.box).empty(), "overlapping chunks");
      covered += c.box.NumElements();
    }
    FUZZ_CHECK(covered == total, "chunks cover " << covered << " of " << total);
  }
}

}  // namespace
}  // namespace meshflow::fuzz

namespace meshflow::fuzz {
namespace {

void FuzzOne(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  const bool reseal = (in.Byte() & 1) != 0;
  std::string bytes(in.Rest());
  if (reseal) Reseal(bytes);
  StatusOr<CheckpointMetadata> md = DecodeMetadata(bytes, kPath);
  if (!md.ok()) {
    const Status& s = md.status();
    FUZZ_CHECK(s.code() == StatusCode::kDataLoss || s.code() == StatusCode::kUnimplemented, "unexpected code " << s);
    FUZZ_CHECK(s.message().find(kPath) != std::string::npos, "error does not name the path: " << s);
    return;
  }
  CheckInvariants(*md);
  const std::string again = EncodeMetadata(*md);
  StatusOr<CheckpointMetadata> back = DecodeMetadata(again, kPath);
  FUZZ_CHECK(back.ok(), "re-encoded metadata does not decode: " << back.status());
  FUZZ_CHECK(*back == *md, "re-encoded metadata decodes to other records");
}

}  // namespace
}  // namespace meshflow::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  meshflow::fuzz::FuzzOne(data, size);
  return 0;
}
