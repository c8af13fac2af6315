#include "meshflow/data/dataset.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "meshflow/data/record_shards.h"
#include "meshflow/data/test_util.h"
#include "meshflow/data/token_file.h"

namespace meshflow {
namespace {

using testing::FreshTempDir;
using testing::ReadAll;
using testing::WriteAll;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::vector<int64_t> ReadI64(const Dataset& ds, int64_t i) {
  std::vector<int64_t> v(static_cast<size_t>(ds.sample_elements()));
  const Status s = ds.Read(i, std::as_writable_bytes(std::span<int64_t>(v)));
  EXPECT_TRUE(s.ok()) << s;
  return v;
}

std::vector<int32_t> ReadI32(const Dataset& ds, int64_t i) {
  std::vector<int32_t> v(static_cast<size_t>(ds.sample_elements()));
  const Status s = ds.Read(i, std::as_writable_bytes(std::span<int32_t>(v)));
  EXPECT_TRUE(s.ok()) << s;
  return v;
}

std::shared_ptr<InMemoryDataset> Iota(int64_t n, int64_t width) {
  return *InMemoryDataset::FromTensor(Tensor::Iota(DType::kI64, {n, width}));
}

TEST(InMemoryDataset, ReadsRows) {
  auto ds = Iota(10, 3);
  EXPECT_EQ(ds->size(), 10);
  EXPECT_EQ(ds->sample_shape(), (std::vector<int64_t>{3}));
  EXPECT_EQ(ds->sample_bytes(), 24);
  EXPECT_EQ(ReadI64(*ds, 7), (std::vector<int64_t>{21, 22, 23}));
}

TEST(InMemoryDataset, Errors) {
  auto ds = Iota(10, 3);
  std::vector<std::byte> buf(24);
  Status s = ds->Read(10, buf);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(Contains(s.message(), "sample index 10 out of range [0, 10)")) << s;
  EXPECT_EQ(ds->Read(-1, buf).code(), StatusCode::kOutOfRange);
  std::vector<std::byte> small(8);
  EXPECT_EQ(ds->Read(0, small).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(InMemoryDataset::FromTensor(Tensor()).ok());  // rank 0
  EXPECT_FALSE(InMemoryDataset::Create(DType::kF32, {3}, std::vector<std::byte>(13)).ok());
  EXPECT_FALSE(InMemoryDataset::Create(DType::kF32, {-1}, {}).ok());
}

TEST(RecordShards, RoundTrip) {
  const std::string dir = FreshTempDir();
  auto src = Iota(25, 3);
  ASSERT_TRUE(WriteRecordShards(dir, *src, 10).ok());
  auto ds = RecordShardDataset::Open(dir);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->num_shards(), 3);
  EXPECT_EQ((*ds)->size(), 25);
  EXPECT_EQ((*ds)->dtype(), DType::kI64);
  EXPECT_EQ((*ds)->sample_shape(), (std::vector<int64_t>{3}));
  for (int64_t i = 0; i < 25; ++i) EXPECT_EQ(ReadI64(**ds, i), ReadI64(*src, i)) << i;
  std::vector<std::byte> buf(24);
  const Status s = (*ds)->Read(25, buf);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(Contains(s.message(), "25") && Contains(s.message(), dir)) << s;
}

TEST(RecordShards, EmptyShardsAndExplicitFiles) {
  const std::string dir = FreshTempDir();
  const std::vector<int64_t> shape = {2};
  std::vector<int32_t> a = {1, 2, 3, 4}, b = {5, 6};
  ASSERT_TRUE(WriteRecordShard(dir + "/a.mfrec", DType::kI32, shape, std::as_bytes(std::span<int32_t>(a))).ok());
  ASSERT_TRUE(WriteRecordShard(dir + "/b.mfrec", DType::kI32, shape, {}).ok());
  ASSERT_TRUE(WriteRecordShard(dir + "/c.mfrec", DType::kI32, shape, std::as_bytes(std::span<int32_t>(b))).ok());
  auto ds = RecordShardDataset::Open(dir);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->size(), 3);
  EXPECT_EQ(ReadI32(**ds, 2), (std::vector<int32_t>{5, 6}));
  auto rev = RecordShardDataset::OpenFiles({dir + "/c.mfrec", dir + "/a.mfrec"});
  ASSERT_TRUE(rev.ok()) << rev.status();
  EXPECT_EQ(ReadI32(**rev, 0), (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(ReadI32(**rev, 2), (std::vector<int32_t>{3, 4}));
}

// One valid shard file of 4 records of i32[2]; returns its path.
std::string WriteOneShard(const std::string& dir) {
  std::vector<int32_t> v(8);
  std::iota(v.begin(), v.end(), 0);
  const std::string path = dir + "/s.mfrec";
  EXPECT_TRUE(WriteRecordShard(path, DType::kI32, {2}, std::as_bytes(std::span<int32_t>(v))).ok());
  return path;
}

void ExpectOpenError(const std::string& dir, StatusCode code, const std::string& needle,
                     RecordShardOptions options = {}) {
  auto ds = RecordShardDataset::Open(dir, options);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), code) << ds.status();
  EXPECT_TRUE(Contains(ds.status().message(), needle)) << ds.status();
  EXPECT_TRUE(Contains(ds.status().message(), "s.mfrec")) << "error must name the file: " << ds.status();
}

TEST(RecordShards, CorruptedHeader) {
  const std::string dir = FreshTempDir();
  const std::string path = WriteOneShard(dir);
  std::vector<char> bytes = ReadAll(path);
  bytes[32] ^= 0x01;  // record count
  WriteAll(path, bytes);
  ExpectOpenError(dir, StatusCode::kDataLoss, "corrupted header: header CRC-32C");
}

TEST(RecordShards, BadMagic) {
  const std::string dir = FreshTempDir();
  const std::string path = WriteOneShard(dir);
  std::vector<char> bytes = ReadAll(path);
  bytes[0] = 'X';
  WriteAll(path, bytes);
  ExpectOpenError(dir, StatusCode::kDataLoss, "bad magic");
}

TEST(RecordShards, BadPayloadChecksum) {
  const std::string dir = FreshTempDir();
  const std::string path = WriteOneShard(dir);
  std::vector<char> bytes = ReadAll(path);
  bytes[kRecordShardHeaderSize + 5] ^= 0x40;
  WriteAll(path, bytes);
  ExpectOpenError(dir, StatusCode::kDataLoss, "payload checksum mismatch");
  // Opening without verification succeeds (and reads the corrupted bytes).
  EXPECT_TRUE(RecordShardDataset::Open(dir, {.verify_checksums = false}).ok());
}

TEST(RecordShards, TruncatedPayload) {
  const std::string dir = FreshTempDir();
  const std::string path = WriteOneShard(dir);
  std::vector<char> bytes = ReadAll(path);
  bytes.resize(bytes.size() - 5);
  WriteAll(path, bytes);
  ExpectOpenError(dir, StatusCode::kDataLoss, "truncated: header promises 4 records of 8 bytes");
}

TEST(RecordShards, TruncatedHeader) {
  const std::string dir = FreshTempDir();
  const std::string path = WriteOneShard(dir);
  std::vector<char> bytes = ReadAll(path);
  bytes.resize(50);
  WriteAll(path, bytes);
  ExpectOpenError(dir, StatusCode::kDataLoss, "truncated header: file has 50 bytes");
}

TEST(RecordShards, TrailingBytes) {
  const std::string dir = FreshTempDir();
  const std::string path = WriteOneShard(dir);
  std::vector<char> bytes = ReadAll(path);
  bytes.push_back(0);
  WriteAll(path, bytes);
  ExpectOpenError(dir, StatusCode::kDataLoss, "1 trailing bytes");
}

TEST(RecordShards, UnsupportedVersion) {
  const std::string dir = FreshTempDir();
  const std::string path = WriteOneShard(dir);
  std::vector<char> bytes = ReadAll(path);
  auto h = DecodeRecordShardHeader(std::as_bytes(std::span<const char>(bytes)), path);
  ASSERT_TRUE(h.ok()) << h.status();
  RecordShardHeader v2 = *h;  // a newer version than this reader knows
  v2.version = kRecordShardVersion + 1;
  const std::vector<std::byte> header = EncodeRecordShardHeader(v2);
  std::memcpy(bytes.data(), header.data(), header.size());
  WriteAll(path, bytes);
  ExpectOpenError(dir, StatusCode::kUnimplemented, "unsupported format version " + std::to_string(kRecordShardVersion + 1));
}

// A version-1 file (header checksummed with CRC-32, not CRC-32C) is reported as an older version,
// not as a corrupted header.
TEST(RecordShards, OldVersionIsUnsupportedNotCorrupt) {
  const std::string dir = FreshTempDir();
  const std::string path = WriteOneShard(dir);
  std::vector<char> bytes = ReadAll(path);
  const uint32_t v1 = 1;  // little-endian u32 at offset 8, header CRC left stale
  std::memcpy(bytes.data() + 8, &v1, sizeof(v1));
  WriteAll(path, bytes);
  ExpectOpenError(dir, StatusCode::kUnimplemented, "unsupported format version 1 (this reader reads 2)");
}

TEST(RecordShards, MismatchedShards) {
  const std::string dir = FreshTempDir();
  std::vector<int32_t> v(6);
  ASSERT_TRUE(WriteRecordShard(dir + "/a.mfrec", DType::kI32, {2}, std::as_bytes(std::span<int32_t>(v))).ok());
  ASSERT_TRUE(WriteRecordShard(dir + "/b.mfrec", DType::kI32, {3}, std::as_bytes(std::span<int32_t>(v))).ok());
  auto ds = RecordShardDataset::Open(dir);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(ds.status().message(), "b.mfrec' holds i32[3] samples")) << ds.status();
}

TEST(RecordShards, MissingOrEmptyDirectory) {
  const std::string dir = FreshTempDir();
  auto empty = RecordShardDataset::Open(dir);
  EXPECT_EQ(empty.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(empty.status().message(), dir)) << empty.status();
  EXPECT_EQ(RecordShardDataset::Open(dir + "/nope").status().code(), StatusCode::kNotFound);
  std::vector<int32_t> v(3);
  EXPECT_EQ(WriteRecordShard(dir + "/x.mfrec", DType::kI32, {2}, std::as_bytes(std::span<int32_t>(v))).code(),
            StatusCode::kInvalidArgument);  // 12 bytes is not whole 8-byte records
}

std::vector<uint32_t> IotaTokens(int64_t n) {
  std::vector<uint32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), 0u);
  return t;
}

TEST(TokenFile, Samples) {
  const std::string dir = FreshTempDir();
  const std::string path = dir + "/t.bin";
  ASSERT_TRUE(WriteTokenFile(path, IotaTokens(105), TokenWidth::kU16).ok());
  EXPECT_EQ(std::filesystem::file_size(path), 210u);
  auto ds = TokenFileDataset::Open(path, {.seq_len = 10});
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->num_tokens(), 105);
  EXPECT_EQ((*ds)->size(), 10);  // (105 - 1) / 10
  EXPECT_EQ((*ds)->sample_shape(), (std::vector<int64_t>{11}));
  EXPECT_EQ((*ds)->dtype(), DType::kI32);
  std::vector<int32_t> want(11);
  std::iota(want.begin(), want.end(), 30);
  EXPECT_EQ(ReadI32(**ds, 3), want);  // tokens 30..40: input 30..39, target 31..40
  std::iota(want.begin(), want.end(), 90);
  EXPECT_EQ(ReadI32(**ds, 9), want);
  std::vector<std::byte> buf(44);
  const Status s = (*ds)->Read(10, buf);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(Contains(s.message(), "sample index 10 out of range [0, 10) in token file") && Contains(s.message(), path))
      << s;
}

TEST(TokenFile, Uint32ToI64AndI32Overflow) {
  const std::string dir = FreshTempDir();
  const std::string path = dir + "/t.bin";
  std::vector<uint32_t> tokens = IotaTokens(9);
  tokens[5] = 0xF0000000u;
  ASSERT_TRUE(WriteTokenFile(path, tokens, TokenWidth::kU32).ok());
  auto wide = TokenFileDataset::Open(path, {.seq_len = 4, .width = TokenWidth::kU32, .dtype = DType::kI64});
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_EQ(ReadI64(**wide, 1), (std::vector<int64_t>{4, 0xF0000000ll, 6, 7, 8}));
  auto narrow = TokenFileDataset::Open(path, {.seq_len = 4, .width = TokenWidth::kU32, .dtype = DType::kI32});
  ASSERT_TRUE(narrow.ok());
  std::vector<std::byte> buf(20);
  EXPECT_TRUE((*narrow)->Read(0, buf).ok());  // tokens 0..4
  const Status s = (*narrow)->Read(1, buf);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(s.message(), "at position 5")) << s;
  EXPECT_FALSE(WriteTokenFile(dir + "/u.bin", tokens, TokenWidth::kU16).ok());  // does not fit uint16
}

TEST(TokenFile, Errors) {
  const std::string dir = FreshTempDir();
  const std::string path = dir + "/t.bin";
  ASSERT_TRUE(WriteTokenFile(path, IotaTokens(10), TokenWidth::kU16).ok());  // 20 bytes
  // 22 bytes: not a whole number of 4-byte uint32 tokens.
  std::vector<char> bytes = ReadAll(path);
  bytes.resize(22);
  WriteAll(path, bytes);
  auto wrong = TokenFileDataset::Open(path, {.seq_len = 2, .width = TokenWidth::kU32});
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(wrong.status().message(), "wrong size") && Contains(wrong.status().message(), path))
      << wrong.status();
  bytes.resize(21);
  WriteAll(path, bytes);
  EXPECT_EQ(TokenFileDataset::Open(path, {.seq_len = 2}).status().code(), StatusCode::kDataLoss);  // odd size
  bytes.resize(20);
  WriteAll(path, bytes);
  auto short_file = TokenFileDataset::Open(path, {.seq_len = 10});  // 10 tokens < 11
  EXPECT_EQ(short_file.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(short_file.status().message(), "fewer than one sample")) << short_file.status();
  EXPECT_TRUE(TokenFileDataset::Open(path, {.seq_len = 9}).ok());  // exactly one sample
  EXPECT_EQ(TokenFileDataset::Open(path, {.seq_len = 0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(TokenFileDataset::Open(path, {.seq_len = 2, .dtype = DType::kF32}).status().code(),
            StatusCode::kInvalidArgument);
  auto missing = TokenFileDataset::Open(dir + "/missing.bin", {.seq_len = 2});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(missing.status().message(), "missing.bin")) << missing.status();
}

}  // namespace
}  // namespace meshflow
