#include "meshflow/checkpoint/format.h"

#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "meshflow/base/checksum.h"

namespace meshflow {
namespace {

// A 2-tensor checkpoint over two data files: "w" f32[4,3] in two row chunks (16-byte checksum
// blocks), "s" a scalar i64 (an 8-byte block: each chunk has its own block size).
CheckpointMetadata Sample() {
  CheckpointMetadata md;
  md.checksum_block_bytes = 16;
  md.file_sizes = {24 + 8, 24};
  md.extra_state = std::string("loader\0state", 12);
  TensorRecord w{.name = "w", .dtype = DType::kF32, .shape = {4, 3}, .saved_layout = "S(0) on mesh(2) shape [4,3]"};
  w.chunks.push_back({.box = {{0, 0}, {2, 3}}, .file = 0, .byte_offset = 0, .byte_length = 24, .block_bytes = 16, .block_crcs = {1, 2}});
  w.chunks.push_back({.box = {{2, 0}, {2, 3}}, .file = 1, .byte_offset = 0, .byte_length = 24, .block_bytes = 16, .block_crcs = {3, 4}});
  TensorRecord s{.name = "s", .dtype = DType::kI64, .shape = {}, .saved_layout = "R"};
  s.chunks.push_back({.box = {{}, {}}, .file = 0, .byte_offset = 24, .byte_length = 8, .block_bytes = 8, .block_crcs = {5}});
  md.tensors = {w, s};
  return md;
}

// Rewrites the trailing CRC so that a deliberately edited body passes the checksum.
void Reseal(std::string& bytes) {
  const uint32_t crc = Crc32c(std::as_bytes(std::span<const char>(bytes.data(), bytes.size() - 4)));
  std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
}

TEST(FormatTest, RoundTrip) {
  const CheckpointMetadata md = Sample();
  auto back = DecodeMetadata(EncodeMetadata(md), "m");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, md);  // the whole record, so no field is silently dropped
  EXPECT_NE(back->Find("s"), nullptr);
  EXPECT_EQ(back->Find("nope"), nullptr);
}

TEST(FormatTest, HeaderIsLittleEndianAndVersioned) {
  const std::string b = EncodeMetadata(Sample());
  EXPECT_EQ(b.substr(0, 8), std::string(kCheckpointMagic));
  EXPECT_EQ(static_cast<uint8_t>(b[8]), kCheckpointFormatVersion);
  EXPECT_EQ(b[9], 0);
}

TEST(FormatTest, UnknownVersionIsRejectedClearly) {
  for (char v : {char{0}, char{3}}) {
    std::string b = EncodeMetadata(Sample());
    b[8] = v;
    Reseal(b);
    auto r = DecodeMetadata(b, "ck/metadata.mfck");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(r.status().message().find("has format version " + std::to_string(v) + "; this build reads versions 1 to 2"),
              std::string::npos)
        << r.status();
    EXPECT_NE(r.status().message().find("ck/metadata.mfck"), std::string::npos) << r.status();
  }
}

// Version 1 (one checksum block size for every chunk) still decodes, to the same records.
TEST(FormatTest, VersionOneStillDecodes) {
  CheckpointMetadata md = Sample();
  md.tensors[1].chunks[0].block_bytes = 16;  // version 1: every chunk has md.checksum_block_bytes
  StatusOr<std::string> v1 = EncodeMetadataVersion(md, 1);
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_EQ(static_cast<uint8_t>((*v1)[8]), 1);
  EXPECT_LT(v1->size(), EncodeMetadata(md).size());  // no per-chunk block sizes
  auto back = DecodeMetadata(*v1, "m");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, md);
  EXPECT_EQ(EncodeMetadata(*back), EncodeMetadata(md));  // re-encodes as version 2
}

TEST(FormatTest, EncodeVersionErrors) {
  EXPECT_EQ(EncodeMetadataVersion(Sample(), 3).status().message(), "EncodeMetadataVersion: version 3 is not in [1, 2]");
  EXPECT_EQ(EncodeMetadataVersion(Sample(), 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeMetadataVersion(Sample(), 1).status().message(),
            "EncodeMetadataVersion: version 1 has one checksum block size (16), tensor 's' has a chunk with 8");
}

TEST(FormatTest, ChunkBlockBytes) {
  const int64_t mib = int64_t{1} << 20;
  EXPECT_EQ(ChunkBlockBytes(0, mib), 4096);
  EXPECT_EQ(ChunkBlockBytes(100, mib), 4096);
  EXPECT_EQ(ChunkBlockBytes(16 * mib, mib), 4096);        // 4096 blocks
  EXPECT_EQ(ChunkBlockBytes(16 * mib + 1, mib), 8192);    // would be 4097: the next power of two
  EXPECT_EQ(ChunkBlockBytes(1024 * mib, mib), 256 << 10);
  EXPECT_EQ(ChunkBlockBytes(64 * 1024 * mib, mib), mib);  // the cap
  EXPECT_EQ(ChunkBlockBytes(100, 32), 32);                // a cap under the minimum
  EXPECT_EQ(ChunkBlockBytes(1 << 30, 6000), 6000);
}

TEST(FormatTest, EveryTruncationAndEveryFlippedByteIsDataLossOrVersion) {
  const std::string good = EncodeMetadata(Sample());
  for (size_t n = 0; n < good.size(); ++n) {
    auto r = DecodeMetadata(good.substr(0, n), "m");
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << n << " " << r.status();
  }
  for (size_t i = 0; i < good.size(); ++i) {
    std::string b = good;
    b[i] = static_cast<char>(b[i] ^ 0x10);
    auto r = DecodeMetadata(b, "m");
    ASSERT_FALSE(r.ok()) << i;
    const StatusCode want = (i >= 8 && i < 12) ? StatusCode::kUnimplemented : StatusCode::kDataLoss;
    EXPECT_EQ(r.status().code(), want) << i << " " << r.status();
  }
}

TEST(FormatTest, InvariantViolationsAreDataLossEvenWithAValidCrc) {
  auto expect_bad = [](CheckpointMetadata md, const std::string& needle) {
    auto r = DecodeMetadata(EncodeMetadata(md), "m");
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status();
  };
  CheckpointMetadata md = Sample();
  md.tensors[0].chunks[1].box.offset[0] = 1;  // overlaps chunk 0
  expect_bad(md, "overlaps");
  md = Sample();
  md.tensors[0].chunks.pop_back();
  expect_bad(md, "cover 6 of its 12");
  md = Sample();
  md.tensors[0].chunks[1].byte_offset = 8;
  expect_bad(md, "past the end");
  md = Sample();
  md.tensors[0].chunks[1].file = 5;
  expect_bad(md, "data file 5");
  md = Sample();
  md.tensors[0].chunks[0].block_crcs.pop_back();
  expect_bad(md, "checksums");
  md = Sample();
  md.tensors[1].name = "w";
  expect_bad(md, "duplicate");
  md = Sample();
  md.tensors[0].chunks[0].box.shape[1] = 4;
  expect_bad(md, "outside the shape");
  md = Sample();
  md.tensors[1].chunks[0].block_bytes = 32;  // above md.checksum_block_bytes
  expect_bad(md, "chunk 0 checksum block size 32 is not in [1, 16]");
  md = Sample();
  md.tensors[1].chunks[0].block_bytes = 0;
  md.tensors[1].chunks[0].block_crcs = {};
  expect_bad(md, "checksum block size 0");
  md = Sample();
  md.tensors[0].dtype = static_cast<DType>(7);  // no such dtype: written as code 255
  expect_bad(md, "tensor 'w': unknown dtype code 255");
}

TEST(FormatTest, Names) {
  EXPECT_EQ(DataFileName(3), "data-00003.bin");
  EXPECT_EQ(NumChecksumBlocks(0, 16), 0);
  EXPECT_EQ(NumChecksumBlocks(16, 16), 1);
  EXPECT_EQ(NumChecksumBlocks(17, 16), 2);
}

}  // namespace
}  // namespace meshflow
