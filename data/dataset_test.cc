#include "meshflow/data/dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
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
  EXPECT_EQ(RecordShardDataset::Open(dir).status().code(), StatusCode::kFailedPrecondition);  // no manifest
  ASSERT_TRUE(RecordShardDataset::Open(dir, {.require_manifest = false}).ok());
  ASSERT_TRUE(WriteRecordShardManifest(dir).ok());
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
  EXPECT_TRUE(WriteRecordShardManifest(dir).ok());
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
  auto ds = RecordShardDataset::Open(dir, {.require_manifest = false});
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
  EXPECT_EQ(std::filesystem::file_size(path), 64u + 210u);
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
  // The same tokens as a raw file opened with the explicit width.
  ASSERT_TRUE(WriteRawTokenFile(dir + "/raw.bin", tokens, TokenWidth::kU32).ok());
  auto raw = TokenFileDataset::Open(dir + "/raw.bin", {.seq_len = 4, .width = TokenWidth::kU32, .dtype = DType::kI64});
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(ReadI64(**raw, 1), (std::vector<int64_t>{4, 0xF0000000ll, 6, 7, 8}));
  EXPECT_FALSE((*raw)->header().has_value());
}

// Samples longer than the widening chunk (512 tokens), every width x output dtype: the values,
// and a bad token past the first chunk named at its position.
TEST(TokenFile, LongSamplesEveryWidthAndDtype) {
  const std::string dir = FreshTempDir();
  std::vector<uint32_t> tokens(4 * 1300 + 1);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>((i * 7919) % 65000);
  for (TokenWidth width : {TokenWidth::kU16, TokenWidth::kU32}) {
    const std::string path = dir + "/t" + std::to_string(static_cast<int>(width)) + ".mftok";
    ASSERT_TRUE(WriteTokenFile(path, tokens, width).ok());
    for (DType dtype : {DType::kI32, DType::kI64}) {
      auto ds = TokenFileDataset::Open(path, {.seq_len = 1300, .dtype = dtype});
      ASSERT_TRUE(ds.ok()) << ds.status();
      for (int64_t i = 0; i < (*ds)->size(); ++i) {
        const std::vector<uint32_t> want(tokens.begin() + i * 1300, tokens.begin() + i * 1300 + 1301);
        if (dtype == DType::kI32) {
          const std::vector<int32_t> got = ReadI32(**ds, i);
          EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin(), want.end())) << "sample " << i;
        } else {
          const std::vector<int64_t> got = ReadI64(**ds, i);
          EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin(), want.end())) << "sample " << i;
        }
      }
    }
  }
  std::vector<uint32_t> bad = tokens;
  bad[1300 + 700] = 0x90000000u;  // sample 1, token 700 (second chunk)
  ASSERT_TRUE(WriteRawTokenFile(dir + "/bad.bin", bad, TokenWidth::kU32).ok());
  auto ds = TokenFileDataset::Open(dir + "/bad.bin", {.seq_len = 1300, .width = TokenWidth::kU32});
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::vector<std::byte> buf(static_cast<size_t>((*ds)->sample_bytes()));
  EXPECT_TRUE((*ds)->Read(0, buf).ok());
  const Status s = (*ds)->Read(1, buf);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(s.message(), "token 2415919104 at position 2000 does not fit the i32 output dtype")) << s;
}

// ReadRun of consecutive samples equals per-sample Reads, for every width x output dtype, sample
// lengths around the 64-token widening blocks, runs of 1, several, and past one ~1 MiB read
// piece (L = 1300, u32: 201 samples per piece); a bad token inside a run is named at its position;
// the range and buffer checks.
TEST(TokenFile, ReadRunEqualsPerSampleReads) {
  const std::string dir = FreshTempDir();
  std::vector<uint32_t> tokens(260 * 1300 + 1);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>((i * 7919) % 65000);
  for (TokenWidth width : {TokenWidth::kU16, TokenWidth::kU32}) {
    const std::string path = dir + "/t" + std::to_string(static_cast<int>(width)) + ".mftok";
    ASSERT_TRUE(WriteTokenFile(path, tokens, width).ok());
    for (DType dtype : {DType::kI32, DType::kI64}) {
      for (int64_t len : {1, 8, 63, 64, 65, 1300}) {
        auto ds = TokenFileDataset::Open(path, {.seq_len = len, .width = width, .dtype = dtype});
        ASSERT_TRUE(ds.ok()) << ds.status();
        const int64_t sb = (*ds)->sample_bytes();
        for (const auto& [first, count] : std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {3, 5}, {0, 250}, {7, 1}}) {
          if (first + count > (*ds)->size()) continue;
          std::vector<std::byte> run(static_cast<size_t>(count * sb)), one(static_cast<size_t>(sb));
          ASSERT_TRUE((*ds)->ReadRun(first, count, run).ok());
          for (int64_t j = 0; j < count; ++j) {
            ASSERT_TRUE((*ds)->Read(first + j, one).ok());
            ASSERT_EQ(std::memcmp(one.data(), run.data() + j * sb, static_cast<size_t>(sb)), 0)
                << "width " << static_cast<int>(width) << " dtype " << DTypeName(dtype) << " L " << len << " sample "
                << first + j;
          }
        }
      }
    }
  }
  auto ds = TokenFileDataset::Open(dir + "/t2.mftok", {.seq_len = 10});
  ASSERT_TRUE(ds.ok());
  std::vector<std::byte> buf(static_cast<size_t>(3 * (*ds)->sample_bytes()));
  EXPECT_EQ((*ds)->ReadRun((*ds)->size() - 2, 3, buf).code(), StatusCode::kOutOfRange);
  EXPECT_EQ((*ds)->ReadRun(0, 0, {}).code(), StatusCode::kOutOfRange);
  EXPECT_EQ((*ds)->ReadRun(0, 2, buf).code(), StatusCode::kInvalidArgument);
  // A token over the i32 range in the third sample of a run.
  std::vector<uint32_t> bad = IotaTokens(101);
  bad[25] = 0x90000000u;
  ASSERT_TRUE(WriteRawTokenFile(dir + "/bad.bin", bad, TokenWidth::kU32).ok());
  auto b = TokenFileDataset::Open(dir + "/bad.bin", {.seq_len = 10, .width = TokenWidth::kU32});
  ASSERT_TRUE(b.ok());
  std::vector<std::byte> four(static_cast<size_t>(4 * (*b)->sample_bytes()));
  const Status s = (*b)->ReadRun(0, 4, four);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(s.message(), "at position 25 does not fit the i32 output dtype")) << s;
}

TEST(TokenFile, RawFileErrors) {
  const std::string dir = FreshTempDir();
  const std::string path = dir + "/t.bin";
  ASSERT_TRUE(WriteRawTokenFile(path, IotaTokens(10), TokenWidth::kU16).ok());  // 20 bytes
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
  EXPECT_EQ(TokenFileDataset::Open(path, {.seq_len = 2, .width = TokenWidth::kU16}).status().code(),
            StatusCode::kDataLoss);  // odd size
  bytes.resize(20);
  WriteAll(path, bytes);
  auto short_file = TokenFileDataset::Open(path, {.seq_len = 10, .width = TokenWidth::kU16});  // 10 tokens < 11
  EXPECT_EQ(short_file.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(short_file.status().message(), "fewer than one sample")) << short_file.status();
  EXPECT_TRUE(TokenFileDataset::Open(path, {.seq_len = 9, .width = TokenWidth::kU16}).ok());  // exactly one sample
  // A raw file needs an explicit width: a uint32 file opened with a guessed u16 gave garbage.
  auto no_width = TokenFileDataset::Open(path, {.seq_len = 2});
  EXPECT_EQ(no_width.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(no_width.status().message(), "has no header (a legacy raw token file)")) << no_width.status();
  EXPECT_EQ(TokenFileDataset::Open(path, {.seq_len = 0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(TokenFileDataset::Open(path, {.seq_len = 2, .dtype = DType::kF32}).status().code(),
            StatusCode::kInvalidArgument);
  auto missing = TokenFileDataset::Open(dir + "/missing.bin", {.seq_len = 2});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(missing.status().message(), "missing.bin")) << missing.status();
}

// seq_len = INT64_MAX used to overflow (seq_len + 1) in the open error message.
TEST(TokenFile, HugeSeqLen) {
  const std::string dir = FreshTempDir();
  ASSERT_TRUE(WriteTokenFile(dir + "/t.mftok", IotaTokens(10), TokenWidth::kU16).ok());
  for (int64_t seq_len : {INT64_MAX, int64_t{1} << 41, int64_t{-5}}) {
    auto ds = TokenFileDataset::Open(dir + "/t.mftok", {.seq_len = seq_len});
    EXPECT_EQ(ds.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(ds.status().message(), "seq_len must be in [1, 2^40], got " + std::to_string(seq_len)))
        << ds.status();
  }
}

TEST(TokenFile, HeaderFormat) {
  const std::string dir = FreshTempDir();
  const std::string path = dir + "/t.mftok";
  std::vector<uint32_t> tokens = IotaTokens(101);
  ASSERT_TRUE(WriteTokenFile(path, tokens, TokenWidth::kU32, 1000).ok());
  auto ds = TokenFileDataset::Open(path, {.seq_len = 10});  // width from the header
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_TRUE((*ds)->header().has_value());
  EXPECT_EQ((*ds)->header()->vocab_size, 1000);
  EXPECT_EQ((*ds)->width(), TokenWidth::kU32);
  EXPECT_EQ((*ds)->size(), 10);
  std::vector<int32_t> want(11);
  std::iota(want.begin(), want.end(), 50);
  EXPECT_EQ(ReadI32(**ds, 5), want);
  std::vector<int64_t> some(3);
  ASSERT_TRUE((*ds)->ReadTokens(98, some).ok());
  EXPECT_EQ(some, (std::vector<int64_t>{98, 99, 100}));
  EXPECT_EQ((*ds)->ReadTokens(99, some).code(), StatusCode::kOutOfRange);
  // A width that contradicts the header.
  auto wrong = TokenFileDataset::Open(path, {.seq_len = 10, .width = TokenWidth::kU16});
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(wrong.status().message(), "holds 4-byte tokens (header) but 2-byte tokens")) << wrong.status();
  // Tokens outside the declared vocabulary cannot be written.
  const Status s = WriteTokenFile(dir + "/v.mftok", tokens, TokenWidth::kU32, 100);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "token 100 at position 100 is outside the vocabulary [0, 100)")) << s;
  // The fingerprint depends on the contents and on seq_len.
  auto again = TokenFileDataset::Open(path, {.seq_len = 10});
  auto other_len = TokenFileDataset::Open(path, {.seq_len = 20});
  EXPECT_EQ((*again)->fingerprint(), (*ds)->fingerprint());
  EXPECT_NE((*other_len)->fingerprint(), (*ds)->fingerprint());
  tokens[7] = 8;
  ASSERT_TRUE(WriteTokenFile(dir + "/w.mftok", tokens, TokenWidth::kU32, 1000).ok());
  EXPECT_NE((*TokenFileDataset::Open(dir + "/w.mftok", {.seq_len = 10}))->fingerprint(), (*ds)->fingerprint());
}

// A token file truncated to half used to open silently with half the samples.
TEST(TokenFile, TruncatedToHalfFailsLoudly) {
  const std::string dir = FreshTempDir();
  const std::string path = dir + "/t.mftok";
  ASSERT_TRUE(WriteTokenFile(path, IotaTokens(1000), TokenWidth::kU16).ok());
  std::vector<char> bytes = ReadAll(path);
  bytes.resize(64 + 1000);  // half the payload
  WriteAll(path, bytes);
  auto ds = TokenFileDataset::Open(path, {.seq_len = 8});
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(ds.status().message(), "has 1064 bytes but its header says 1000 tokens (2064 bytes) (truncated)"))
      << ds.status();
}

TEST(TokenFile, CorruptHeaderAndPayload) {
  const std::string dir = FreshTempDir();
  const std::string path = dir + "/t.mftok";
  ASSERT_TRUE(WriteTokenFile(path, IotaTokens(100), TokenWidth::kU16).ok());
  const std::vector<char> good = ReadAll(path);
  std::vector<char> bytes = good;
  bytes[20] ^= 1;  // token count
  WriteAll(path, bytes);
  auto ds = TokenFileDataset::Open(path, {.seq_len = 8});
  EXPECT_EQ(ds.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(ds.status().message(), "corrupted header: header CRC-32C")) << ds.status();
  bytes = good;
  bytes[100] ^= 1;  // a payload byte
  WriteAll(path, bytes);
  ds = TokenFileDataset::Open(path, {.seq_len = 8});
  EXPECT_EQ(ds.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(ds.status().message(), "payload checksum mismatch")) << ds.status();
  EXPECT_TRUE(TokenFileDataset::Open(path, {.seq_len = 8, .verify_checksum = false}).ok());
}

TEST(TokenFile, ConvertRawFile) {
  const std::string dir = FreshTempDir();
  std::vector<uint32_t> tokens = IotaTokens(77);
  ASSERT_TRUE(WriteRawTokenFile(dir + "/raw.bin", tokens, TokenWidth::kU16).ok());
  auto h = ConvertRawTokenFile(dir + "/raw.bin", dir + "/t.mftok", TokenWidth::kU16);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->num_tokens, 77);
  EXPECT_EQ(h->vocab_size, 77);
  auto raw = TokenFileDataset::Open(dir + "/raw.bin", {.seq_len = 7, .width = TokenWidth::kU16});
  auto conv = TokenFileDataset::Open(dir + "/t.mftok", {.seq_len = 7});
  ASSERT_TRUE(raw.ok() && conv.ok());
  for (int64_t i = 0; i < (*raw)->size(); ++i) EXPECT_EQ(ReadI32(**raw, i), ReadI32(**conv, i));
  EXPECT_EQ(ConvertRawTokenFile(dir + "/t.mftok", dir + "/u.mftok", TokenWidth::kU16).status().code(),
            StatusCode::kInvalidArgument);  // already converted
}

// A file truncated while open: DATA_LOSS from Read, never SIGBUS (the datasets used mmap).
TEST(TokenFile, TruncatedAfterOpenIsAnError) {
  const std::string dir = FreshTempDir();
  const std::string path = dir + "/t.mftok";
  ASSERT_TRUE(WriteTokenFile(path, IotaTokens(60000), TokenWidth::kU16).ok());
  auto ds = TokenFileDataset::Open(path, {.seq_len = 100});
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ReadI32(**ds, 10)[0], 1000);
  std::filesystem::resize_file(path, 4096);
  std::vector<std::byte> buf(static_cast<size_t>((*ds)->sample_bytes()));
  const Status s = (*ds)->Read(500, buf);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(s.message(), "truncated after open")) << s;
  EXPECT_TRUE(Contains(s.message(), path)) << s;
  // The read starts past the new end: the message gives the file's size, not the read offset.
  EXPECT_TRUE(Contains(s.message(), "has 4096 bytes now")) << s;
  EXPECT_TRUE(Contains(s.message(), "had 120064 bytes at open")) << s;
}

TEST(RecordShards, TruncatedAfterOpenIsAnError) {
  const std::string dir = FreshTempDir();
  ASSERT_TRUE(WriteRecordShards(dir, *Iota(5000, 4), 5000).ok());
  auto ds = RecordShardDataset::Open(dir);
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::filesystem::resize_file(dir + "/shard-00000.mfrec", 1000);
  std::vector<std::byte> buf(32);
  const Status s = (*ds)->Read(4000, buf);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(s.message(), "truncated after open")) << s;
}

// The manifest catches what per-file checks cannot: a deleted shard, an extra shard, two
// swapped file names.
TEST(RecordShards, ManifestDetectsDeletedExtraAndSwappedShards) {
  const std::string base = FreshTempDir();
  auto make = [&](const std::string& name) {
    const std::string dir = base + "/" + name;
    EXPECT_TRUE(WriteRecordShards(dir, *Iota(30, 2), 10).ok());  // shard-00000..00002 of 10 records
    return dir;
  };
  auto expect = [](const std::string& dir, const std::string& needle) {
    auto ds = RecordShardDataset::Open(dir);
    ASSERT_FALSE(ds.ok()) << dir;
    EXPECT_EQ(ds.status().code(), StatusCode::kDataLoss) << ds.status();
    EXPECT_TRUE(Contains(ds.status().message(), needle)) << ds.status();
  };
  const std::string ok = make("ok");
  auto good = RecordShardDataset::Open(ok);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ((*good)->size(), 30);

  const std::string deleted = make("deleted");
  std::filesystem::remove(deleted + "/shard-00001.mfrec");
  expect(deleted, "shard 'shard-00001.mfrec' listed in manifest.mfidx is missing");

  const std::string extra = make("extra");
  std::filesystem::copy_file(ok + "/shard-00000.mfrec", extra + "/zzz.mfrec");
  expect(extra, "'zzz.mfrec' is not listed in manifest.mfidx");

  const std::string swapped = make("swapped");
  std::filesystem::rename(swapped + "/shard-00000.mfrec", swapped + "/tmp");
  std::filesystem::rename(swapped + "/shard-00002.mfrec", swapped + "/shard-00000.mfrec");
  std::filesystem::rename(swapped + "/tmp", swapped + "/shard-00002.mfrec");
  expect(swapped, "shard-00000.mfrec' does not match its manifest entry");

  const std::string damaged = make("damaged");
  std::vector<char> m = ReadAll(damaged + "/manifest.mfidx");
  m[m.size() / 2] ^= 1;
  WriteAll(damaged + "/manifest.mfidx", m);
  expect(damaged, "is damaged");

  // Same size, other contents: another fingerprint.
  const std::string other = base + "/other";
  Tensor t = Tensor::Iota(DType::kI64, {30, 2});
  t.data<int64_t>()[17] = -1;
  ASSERT_TRUE(WriteRecordShards(other, **InMemoryDataset::FromTensor(t), 10).ok());
  auto o = RecordShardDataset::Open(other);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ((*o)->size(), 30);
  EXPECT_NE((*o)->fingerprint(), (*good)->fingerprint());
}

TEST(RecordShards, ManifestRoundTripAndParseErrors) {
  RecordShardManifest m{.dtype = DType::kBF16,
                        .sample_shape = {2, 3},
                        .record_size = 12,
                        .shards = {{.name = "a.mfrec", .records = 2, .bytes = 152, .crc = 0xdeadbeef},
                                   {.name = "b.mfrec", .records = 0, .bytes = 128, .crc = 0}}};
  const std::string text = EncodeRecordShardManifest(m);
  auto back = ParseRecordShardManifest(text, "m");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, m);
  for (const std::string& bad : {std::string(""), text.substr(0, text.size() / 2), text + "x",
                                 std::string("meshflow.data.RecordShardManifest v1\nmanifest_crc32c=0x00000000\n")}) {
    auto p = ParseRecordShardManifest(bad, "m");
    EXPECT_EQ(p.status().code(), StatusCode::kDataLoss) << bad;
  }
}

// Crafted shape entries whose product overflows int64 (signed-overflow UB before the fix).
TEST(RecordShards, HeaderWithOverflowingShapeIsRejected) {
  RecordShardHeader h;
  h.dtype = DType::kF64;
  h.sample_shape = {int64_t{1} << 40, int64_t{1} << 40, int64_t{1} << 40, 3};
  h.record_size = 0;
  const std::vector<std::byte> bytes = EncodeRecordShardHeader(h);
  auto d = DecodeRecordShardHeader(bytes, "crafted.mfrec");
  EXPECT_EQ(d.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(d.status().message(), "would exceed 1099511627776 bytes")) << d.status();
  EXPECT_EQ(WriteRecordShard(FreshTempDir() + "/x.mfrec", DType::kF64, h.sample_shape, {}).code(),
            StatusCode::kInvalidArgument);
  // A zero dim does not excuse the others: sample_elements() multiplies the whole shape (found by
  // the record_shard_header fuzzer; corpus regression_zero_dim_sample_elements).
  h.sample_shape = {0, int64_t{1} << 40, int64_t{1} << 40};
  d = DecodeRecordShardHeader(EncodeRecordShardHeader(h), "crafted.mfrec");
  EXPECT_EQ(d.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(d.status().message(), "would exceed")) << d.status();
  h.sample_shape = {0, 3};
  d = DecodeRecordShardHeader(EncodeRecordShardHeader(h), "empty.mfrec");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->record_size, 0);
}

}  // namespace
}  // namespace meshflow
