// The data/ rows of docs/errors.md added for issues #16 and #17 (marked `//data:data_errors_test`
// there): each test triggers one user-facing error and checks its code and key words. Kept beside
// the code so that the data rows build without the rest of the repository.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <span>
#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "meshflow/base/checksum.h"
#include "meshflow/data/dataset.h"
#include "meshflow/data/loader.h"
#include "meshflow/data/mapped_file.h"
#include "meshflow/data/mixture.h"
#include "meshflow/data/packed.h"
#include "meshflow/data/record_shards.h"
#include "meshflow/data/test_util.h"
#include "meshflow/data/token_file.h"
#include "meshflow/mesh/device_mesh.h"

namespace meshflow {
namespace {

template <typename T>
Status StatusOf(const StatusOr<T>& s) {
  return s.status();
}
inline Status StatusOf(const Status& s) { return s; }

#define EXPECT_ERROR(expr, want_code, want_substr)                    \
  do {                                                                \
    const Status mf_s = StatusOf(expr);                               \
    EXPECT_EQ(mf_s.code(), (want_code)) << mf_s;                      \
    EXPECT_NE(mf_s.message().find(want_substr), std::string::npos)    \
        << "missing '" << (want_substr) << "' in: " << mf_s;          \
  } while (0)

std::shared_ptr<const Dataset> Samples(int64_t n, int64_t poke = -1) {
  Tensor t = Tensor::Iota(DType::kI32, {n, 3});
  if (poke >= 0) t.data<int32_t>()[static_cast<size_t>(poke)] = -7;
  return *InMemoryDataset::FromTensor(t);
}

std::unique_ptr<DataLoader> Loader(std::shared_ptr<const Dataset> ds, DataLoaderOptions o) {
  o.global_batch_size = 4;
  o.prefetch_depth = 0;
  return std::move(DataLoader::Create(std::move(ds), *DeviceMesh::Create({2}, {"dp"}), 0, o).value());
}

LoaderState SavedState() {
  auto l = Loader(Samples(10), {.seed = 1});
  EXPECT_TRUE(l->Next().ok());
  return l->state();
}

std::vector<uint32_t> Iota(size_t n) {
  std::vector<uint32_t> v(n);
  std::iota(v.begin(), v.end(), 0u);
  return v;
}

// ---- DataLoader / LoaderState ----

TEST(ErrorsTest, DataLoaderRestore_OtherShuffle) {
  EXPECT_ERROR(Loader(Samples(10), {.seed = 1, .shuffle = false})->Restore(SavedState()),
               StatusCode::kFailedPrecondition, "saved with shuffle=true, this loader has shuffle=false");
}

TEST(ErrorsTest, DataLoaderRestore_OtherDropLast) {
  EXPECT_ERROR(Loader(Samples(10), {.seed = 1, .drop_last = true})->Restore(SavedState()),
               StatusCode::kFailedPrecondition, "saved with drop_last=false, this loader has drop_last=true");
}

TEST(ErrorsTest, DataLoaderRestore_OtherDatasetOfTheSameSize) {
  EXPECT_ERROR(Loader(Samples(10, /*poke=*/4), {.seed = 1})->Restore(SavedState()), StatusCode::kFailedPrecondition,
               "saved for dataset fingerprint");
}

TEST(ErrorsTest, DataLoaderCreate_NoDataParallelDim) {
  EXPECT_ERROR(DataLoader::Create(Samples(10), *DeviceMesh::Create({2, 2}, {"x", "tp"}), 0, {.global_batch_size = 4}),
               StatusCode::kInvalidArgument, "dp_dims is empty and");
}

TEST(ErrorsTest, DataLoaderCreate_ReplicateBatchWithDpDims) {
  EXPECT_ERROR(DataLoader::Create(Samples(10), *DeviceMesh::Create({2}, {"dp"}), 0,
                                  {.dp_dims = {"dp"}, .global_batch_size = 4, .replicate_batch = true}),
               StatusCode::kInvalidArgument, "replicate_batch is set but dp_dims names 1 dim(s)");
}

TEST(ErrorsTest, DataLoaderCreate_BadNumReaders) {
  EXPECT_ERROR(DataLoader::Create(Samples(10), *DeviceMesh::Create({1}), 0, {.global_batch_size = 4, .num_readers = 0}),
               StatusCode::kInvalidArgument, "num_readers must be in [1, 256], got 0");
}

TEST(ErrorsTest, DataLoaderCreate_HugeBatch) {
  EXPECT_ERROR(DataLoader::Create(Samples(10), *DeviceMesh::Create({1}), 0, {.global_batch_size = INT64_MAX}),
               StatusCode::kInvalidArgument, "global_batch_size 9223372036854775807 is too large");
}

// Found by the loader_state fuzzer: epoch INT64_MAX overflowed when rolled over.
TEST(ErrorsTest, DataLoaderRestore_HugeEpoch) {
  LoaderState st = SavedState();
  st.epoch = INT64_MAX;
  EXPECT_ERROR(Loader(Samples(10), {.seed = 1})->Restore(st), StatusCode::kInvalidArgument,
               "epoch 9223372036854775807 is too large (max 2^62)");
}

TEST(ErrorsTest, LoaderStateParse_BadFlagOrFingerprint) {
  EXPECT_ERROR(LoaderState::Parse("meshflow.data.LoaderState v2 seed=1 epoch=0 consumed=0 num_samples=5 shuffle=yes"),
               StatusCode::kInvalidArgument, "bad value in 'shuffle=yes'");
  EXPECT_ERROR(LoaderState::Parse("meshflow.data.LoaderState v2 seed=1 epoch=0 consumed=0 num_samples=5 dataset=xyz"),
               StatusCode::kInvalidArgument, "bad value in 'dataset=xyz'");
}

// ---- Record shards ----

std::string ShardDir(const std::string& name) {
  const std::string dir = testing::FreshTempDir() + "/" + name;
  EXPECT_TRUE(WriteRecordShards(dir, *Samples(30), 10).ok());
  return dir;
}

TEST(ErrorsTest, RecordShardsOpen_NoManifest) {
  const std::string dir = ShardDir("d");
  std::filesystem::remove(dir + "/manifest.mfidx");
  EXPECT_ERROR(RecordShardDataset::Open(dir), StatusCode::kFailedPrecondition, "has no manifest.mfidx");
}

TEST(ErrorsTest, RecordShardsOpen_DeletedShard) {
  const std::string dir = ShardDir("d");
  std::filesystem::remove(dir + "/shard-00001.mfrec");
  EXPECT_ERROR(RecordShardDataset::Open(dir), StatusCode::kDataLoss,
               "shard 'shard-00001.mfrec' listed in manifest.mfidx is missing");
}

TEST(ErrorsTest, RecordShardsOpen_ExtraShard) {
  const std::string dir = ShardDir("d");
  std::filesystem::copy_file(dir + "/shard-00001.mfrec", dir + "/extra.mfrec");
  EXPECT_ERROR(RecordShardDataset::Open(dir), StatusCode::kDataLoss, "'extra.mfrec' is not listed in manifest.mfidx");
}

TEST(ErrorsTest, RecordShardsOpen_SwappedShards) {
  const std::string dir = ShardDir("d");
  std::filesystem::rename(dir + "/shard-00000.mfrec", dir + "/t");
  std::filesystem::rename(dir + "/shard-00001.mfrec", dir + "/shard-00000.mfrec");
  std::filesystem::rename(dir + "/t", dir + "/shard-00001.mfrec");
  EXPECT_ERROR(RecordShardDataset::Open(dir), StatusCode::kDataLoss, "does not match its manifest entry");
}

TEST(ErrorsTest, RecordShardsOpen_DamagedManifest) {
  const std::string dir = ShardDir("d");
  std::vector<char> m = testing::ReadAll(dir + "/manifest.mfidx");
  // Checked first: GCC 12 at -O1 (--config=asan) otherwise warns that the shrink could wrap.
  ASSERT_GT(m.size(), 20u);
  m.erase(m.end() - 20, m.end());
  testing::WriteAll(dir + "/manifest.mfidx", m);
  EXPECT_ERROR(RecordShardDataset::Open(dir), StatusCode::kDataLoss, "is damaged");
}

TEST(ErrorsTest, DecodeRecordShardHeader_OverflowingShape) {
  RecordShardHeader h;
  h.dtype = DType::kF64;
  h.sample_shape = {int64_t{1} << 40, int64_t{1} << 40};
  EXPECT_ERROR(DecodeRecordShardHeader(EncodeRecordShardHeader(h), "x.mfrec"), StatusCode::kDataLoss,
               "corrupted header: a record of f64[1099511627776,1099511627776] would exceed");
}

// A stat failure other than ENOENT (here ELOOP: a symlink to itself; EIO and EACCES take the same
// path) was reported as "does not exist or is not a directory", or, for the manifest, silently
// as "no manifest". Now UNAVAILABLE with the path and the errno text.
TEST(ErrorsTest, RecordShardsOpen_UnstatableDirectory) {
  const std::string dir = testing::FreshTempDir() + "/loop";
  std::filesystem::create_symlink(dir, dir);
  EXPECT_ERROR(RecordShardDataset::Open(dir), StatusCode::kUnavailable,
               "cannot stat record shard directory '" + dir + "': Too many levels of symbolic links");
  EXPECT_ERROR(WriteRecordShardManifest(dir), StatusCode::kUnavailable, "cannot stat record shard directory");
  // A missing directory is still NOT_FOUND.
  EXPECT_ERROR(RecordShardDataset::Open(dir + "_missing"), StatusCode::kNotFound, "does not exist or is not a directory");
}

TEST(ErrorsTest, RecordShardsOpen_UnstatableManifest) {
  const std::string dir = ShardDir("d");
  std::filesystem::remove(dir + "/manifest.mfidx");
  std::filesystem::create_symlink(dir + "/manifest.mfidx", dir + "/manifest.mfidx");
  EXPECT_ERROR(RecordShardDataset::Open(dir, {.require_manifest = false}), StatusCode::kUnavailable,
               "cannot stat record shard manifest '" + dir + "/manifest.mfidx': Too many levels of symbolic links");
}

// open(2) failures other than ENOENT were all NOT_FOUND ("cannot open file").
TEST(ErrorsTest, RandomAccessFileOpen_OpenFailureKeepsErrno) {
  const std::string dir = testing::FreshTempDir();
  std::filesystem::create_symlink(dir + "/loop.bin", dir + "/loop.bin");
  EXPECT_ERROR(RandomAccessFile::Open(dir + "/loop.bin"), StatusCode::kUnavailable,
               "cannot open file '" + dir + "/loop.bin': Too many levels of symbolic links");
  EXPECT_ERROR(RandomAccessFile::Open(dir + "/missing.bin"), StatusCode::kNotFound,
               "cannot open file '" + dir + "/missing.bin': No such file or directory");
  // A directory in place of a data file: named as such, not as a truncated file.
  EXPECT_ERROR(RandomAccessFile::Open(dir), StatusCode::kInvalidArgument, "'" + dir + "' is not a regular file");
}

TEST(ErrorsTest, RecordShardRead_TruncatedAfterOpen) {
  const std::string dir = ShardDir("d");
  auto ds = RecordShardDataset::Open(dir);
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::filesystem::resize_file(dir + "/shard-00002.mfrec", 130);
  std::vector<std::byte> buf(12);
  EXPECT_ERROR((*ds)->Read(25, buf), StatusCode::kDataLoss, "(truncated after open?)");
}

// ---- Token files ----

TEST(ErrorsTest, TokenFileOpen_RawFileWithoutWidth) {
  const std::string path = testing::FreshTempDir() + "/raw.bin";
  ASSERT_TRUE(WriteRawTokenFile(path, Iota(100), TokenWidth::kU32).ok());
  EXPECT_ERROR(TokenFileDataset::Open(path, {.seq_len = 8}), StatusCode::kInvalidArgument,
               "has no header (a legacy raw token file): give TokenFileOptions::width explicitly");
}

TEST(ErrorsTest, TokenFileOpen_TruncatedToHalf) {
  const std::string path = testing::FreshTempDir() + "/t.mftok";
  ASSERT_TRUE(WriteTokenFile(path, Iota(100), TokenWidth::kU16).ok());
  std::filesystem::resize_file(path, 64 + 100);
  EXPECT_ERROR(TokenFileDataset::Open(path, {.seq_len = 8}), StatusCode::kDataLoss,
               "has 164 bytes but its header says 100 tokens (264 bytes) (truncated)");
}

TEST(ErrorsTest, TokenFileOpen_WidthDiffersFromHeader) {
  const std::string path = testing::FreshTempDir() + "/t.mftok";
  ASSERT_TRUE(WriteTokenFile(path, Iota(100), TokenWidth::kU32).ok());
  EXPECT_ERROR(TokenFileDataset::Open(path, {.seq_len = 8, .width = TokenWidth::kU16}), StatusCode::kInvalidArgument,
               "holds 4-byte tokens (header) but 2-byte tokens were requested");
}

TEST(ErrorsTest, TokenFileOpen_CorruptPayload) {
  const std::string path = testing::FreshTempDir() + "/t.mftok";
  ASSERT_TRUE(WriteTokenFile(path, Iota(100), TokenWidth::kU16).ok());
  std::vector<char> b = testing::ReadAll(path);
  b[100] ^= 4;
  testing::WriteAll(path, b);
  EXPECT_ERROR(TokenFileDataset::Open(path, {.seq_len = 8}), StatusCode::kDataLoss, "payload checksum mismatch");
}

TEST(ErrorsTest, TokenFileOpen_HugeSeqLen) {
  const std::string path = testing::FreshTempDir() + "/t.mftok";
  ASSERT_TRUE(WriteTokenFile(path, Iota(100), TokenWidth::kU16).ok());
  EXPECT_ERROR(TokenFileDataset::Open(path, {.seq_len = INT64_MAX}), StatusCode::kInvalidArgument,
               "seq_len must be in [1, 2^40], got 9223372036854775807");
}

TEST(ErrorsTest, TokenFileRead_TruncatedAfterOpen) {
  const std::string path = testing::FreshTempDir() + "/t.mftok";
  ASSERT_TRUE(WriteTokenFile(path, Iota(1000), TokenWidth::kU16).ok());
  auto ds = TokenFileDataset::Open(path, {.seq_len = 10});
  ASSERT_TRUE(ds.ok());
  std::filesystem::resize_file(path, 100);
  std::vector<std::byte> buf(44);
  EXPECT_ERROR((*ds)->Read(50, buf), StatusCode::kDataLoss, "(truncated after open?)");
}

TEST(ErrorsTest, WriteTokenFile_TokenOutsideVocabulary) {
  EXPECT_ERROR(WriteTokenFile(testing::FreshTempDir() + "/t.mftok", Iota(10), TokenWidth::kU16, 5),
               StatusCode::kInvalidArgument, "token 5 at position 5 is outside the vocabulary [0, 5)");
}

TEST(ErrorsTest, ConvertRawTokenFile_AlreadyConverted) {
  const std::string dir = testing::FreshTempDir();
  ASSERT_TRUE(WriteTokenFile(dir + "/t.mftok", Iota(10), TokenWidth::kU16).ok());
  EXPECT_ERROR(ConvertRawTokenFile(dir + "/t.mftok", dir + "/u.mftok", TokenWidth::kU16), StatusCode::kInvalidArgument,
               "it is already a .mftok file");
}

TEST(ErrorsTest, TokenFileOpen_CorruptHeader) {
  const std::string path = testing::FreshTempDir() + "/t.mftok";
  ASSERT_TRUE(WriteTokenFile(path, Iota(100), TokenWidth::kU16).ok());
  std::vector<char> b = testing::ReadAll(path);
  b[20] ^= 1;  // the token count
  testing::WriteAll(path, b);
  EXPECT_ERROR(TokenFileDataset::Open(path, {.seq_len = 8}), StatusCode::kDataLoss,
               "corrupted header: header CRC-32C is");
}

// A payload byte changed and the checksum skipped at open: the read names the token.
TEST(ErrorsTest, TokenFileRead_TokenOutsideTheHeaderVocabulary) {
  const std::string path = testing::FreshTempDir() + "/t.mftok";
  ASSERT_TRUE(WriteTokenFile(path, Iota(100), TokenWidth::kU16, 100).ok());
  std::vector<char> b = testing::ReadAll(path);
  b[64 + 2 * 3 + 1] = 1;  // token 3 becomes 259
  testing::WriteAll(path, b);
  auto ds = TokenFileDataset::Open(path, {.seq_len = 8, .verify_checksum = false});
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::vector<std::byte> buf(36);
  EXPECT_ERROR((*ds)->Read(0, buf), StatusCode::kDataLoss,
               "token 259 at position 3 is outside the vocabulary [0, 100) of its header");
}

TEST(ErrorsTest, ConvertRawTokenFile_SizeNotAMultipleOfTheWidth) {
  const std::string dir = testing::FreshTempDir();
  testing::WriteAll(dir + "/odd.bin", std::vector<char>(7, 1));
  EXPECT_ERROR(ConvertRawTokenFile(dir + "/odd.bin", dir + "/t.mftok", TokenWidth::kU32), StatusCode::kDataLoss,
               "7 bytes is not a multiple of the 4-byte token width");
}

// A manifest whose CRC line is right but whose header line is not (written by another tool).
TEST(ErrorsTest, ParseRecordShardManifest_BadLine) {
  std::string body =
      "meshflow.data.RecordShardManifest v1\n"
      "dtype=q32 shape=[3] record_size=12 num_shards=1 num_records=2\n"
      "shard name=a.mfrec records=2 bytes=152 crc32c=0x00000000\n";
  char crc[16];
  std::snprintf(crc, sizeof(crc), "0x%08x", Crc32c(std::as_bytes(std::span<const char>(body.data(), body.size()))));
  EXPECT_ERROR(ParseRecordShardManifest(body + "manifest_crc32c=" + crc + "\n", "m"), StatusCode::kDataLoss,
               "record shard manifest 'm' line 2: bad dtype 'q32'");
}

// ---- Mixture ----

std::shared_ptr<const Dataset> I64(int64_t n, int64_t width = 2) {
  return *InMemoryDataset::FromTensor(Tensor::Iota(DType::kI64, {n, width}));
}

TEST(ErrorsTest, MixtureCreate_NoComponents) {
  EXPECT_ERROR(MixtureDataset::Create({}), StatusCode::kInvalidArgument, "MixtureDataset: no components");
}

TEST(ErrorsTest, MixtureCreate_NullOrEmptyComponent) {
  EXPECT_ERROR(MixtureDataset::Create({{I64(3), 1.0}, {nullptr, 1.0}}), StatusCode::kInvalidArgument,
               "component 1 is null");
  EXPECT_ERROR(MixtureDataset::Create({{I64(0), 1.0}}), StatusCode::kInvalidArgument,
               "component 0 (in-memory dataset) has no samples");
}

TEST(ErrorsTest, MixtureCreate_BadWeight) {
  EXPECT_ERROR(MixtureDataset::Create({{I64(3), 1.0}, {I64(3), 0.0}}), StatusCode::kInvalidArgument,
               "component 1 has weight 0.000000; weights must be finite and > 0");
}

TEST(ErrorsTest, MixtureCreate_ShapeUnlikeComponent0) {
  EXPECT_ERROR(MixtureDataset::Create({{I64(3), 1.0}, {I64(3, 5), 1.0}}), StatusCode::kInvalidArgument,
               "component 1 (in-memory dataset) has dtype or sample shape unlike component 0");
}

TEST(ErrorsTest, MixtureCreate_BadNumSamples) {
  EXPECT_ERROR(MixtureDataset::Create({{I64(3), 1.0}}, {.num_samples = -5}), StatusCode::kInvalidArgument,
               "num_samples must be in [0, 2^48], got -5");
}

TEST(ErrorsTest, MixtureCreate_ComponentRoundsToZero) {
  EXPECT_ERROR(MixtureDataset::Create({{I64(3), 99.0}, {I64(3), 0.5}}, {.num_samples = 20}),
               StatusCode::kInvalidArgument, "component 1 (weight 0.500000) gets 0 of 20 samples");
}

// ---- Packing ----

std::shared_ptr<const TokenFileDataset> FiveTokens() {
  const std::string path = testing::FreshTempDir() + "/docs.mftok";
  EXPECT_TRUE(WriteTokenFile(path, std::vector<uint32_t>{1, 2, 0, 3, 4}, TokenWidth::kU16).ok());
  return *TokenFileDataset::Open(path, {.seq_len = 1});
}

TEST(ErrorsTest, PackedCreate_NullTokens) {
  EXPECT_ERROR(PackedTokenDataset::Create(nullptr, {.seq_len = 2}), StatusCode::kInvalidArgument,
               "PackedTokenDataset: token dataset is null");
}

TEST(ErrorsTest, PackedCreate_BadSeqLen) {
  EXPECT_ERROR(PackedTokenDataset::Create(FiveTokens(), {.seq_len = 0}), StatusCode::kInvalidArgument,
               "seq_len must be in [1, 2^40], got 0");
}

TEST(ErrorsTest, PackedCreate_BadDtype) {
  EXPECT_ERROR(PackedTokenDataset::Create(FiveTokens(), {.seq_len = 2, .dtype = DType::kF32}),
               StatusCode::kInvalidArgument, "output dtype must be i32 or i64, got f32");
}

TEST(ErrorsTest, PackedCreate_NegativeEos) {
  EXPECT_ERROR(PackedTokenDataset::Create(FiveTokens(), {.seq_len = 2, .eos_token = -1}),
               StatusCode::kInvalidArgument, "eos_token must be >= 0, got -1");
}

TEST(ErrorsTest, PackedCreate_TooFewTokens) {
  EXPECT_ERROR(PackedTokenDataset::Create(FiveTokens(), {.seq_len = 5}), StatusCode::kInvalidArgument,
               "holds 5 tokens, fewer than one sample (seq_len + 1 = 6)");
}

}  // namespace
}  // namespace meshflow
