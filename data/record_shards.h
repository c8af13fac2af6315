// RecordShardDataset: a directory of fixed-record binary shard files ("*.mfrec").
//
// File format, version 2 (all integers little-endian):
//
//   offset size  field
//        0    8  magic "MFRECSHD"
//        8    4  u32 format version (2; version 1 used CRC-32)
//       12    4  u32 dtype code: 0 f32, 1 f64, 2 bf16, 3 i32, 4 i64
//       16    4  u32 ndim of the sample shape (0..8)
//       20    4  u32 reserved, 0
//       24    8  u64 record size in bytes (= prod(shape) * dtype size)
//       32    8  u64 record count
//       40   64  i64 sample shape[8] (entries past ndim are 0)
//      104    4  u32 CRC-32C (base/checksum.h) of the payload
//      108   16  reserved, 0
//      124    4  u32 CRC-32C of header bytes [0, 124)
//      128       payload: record count * record size bytes, record i at 128 + i * record size,
//                each record the row-major little-endian element bytes of one sample
//
// Opening validates every file and returns DATA_LOSS naming the file for: a file shorter than
// the header, a bad magic, a header CRC mismatch (corrupted header), a bad dtype code / ndim /
// record size, a file size != 128 + count * record size (truncated or trailing bytes), a payload
// CRC mismatch (when verify_checksums, the default; it reads every byte once). An unsupported
// version is UNIMPLEMENTED; shards whose dtype or sample shape differ from the first are
// INVALID_ARGUMENT. The dataset is the concatenation of the shards in file-name order.
//
// Manifest ("manifest.mfidx" in the directory, written by WriteRecordShards and by
// WriteRecordShardManifest for older directories). A text index, one line each:
//   meshflow.data.RecordShardManifest v1
//   dtype=i32 shape=[2,3] record_size=24 num_shards=2 num_records=1500
//   shard name=shard-00000.mfrec records=1000 bytes=24128 crc32c=0x1234abcd
//   shard name=shard-00001.mfrec records=500 bytes=12128 crc32c=0x0badf00d
//   manifest_crc32c=0x89abcdef          (CRC-32C of every byte before this line)
// Open(dir) checks the directory against it (DATA_LOSS naming the file): a listed shard missing,
// a ".mfrec" file not listed (e.g. from another dataset), a shard whose record count, size or
// payload CRC-32C differs from its entry (swapped or replaced files), dtype / shape differing, a
// damaged manifest. A directory without a manifest is FAILED_PRECONDITION unless
// RecordShardOptions::require_manifest is false. fingerprint() hashes the index (dtype, shape,
// each shard's name, count and payload CRC), so a LoaderState is tied to these exact shards.
//
//   MF_RETURN_IF_ERROR(WriteRecordShards("ds", *in_memory, /*records_per_shard=*/1000));
//   MF_ASSIGN_OR_RETURN(auto ds, RecordShardDataset::Open("ds"));
#ifndef MESHFLOW_DATA_RECORD_SHARDS_H_
#define MESHFLOW_DATA_RECORD_SHARDS_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/data/dataset.h"
#include "meshflow/data/mapped_file.h"
#include "meshflow/dtensor/dtype.h"

namespace meshflow {

inline constexpr char kRecordShardMagic[8] = {'M', 'F', 'R', 'E', 'C', 'S', 'H', 'D'};
inline constexpr uint32_t kRecordShardVersion = 2;
inline constexpr int64_t kRecordShardHeaderSize = 128;
inline constexpr int kRecordShardMaxNdim = 8;
inline constexpr char kRecordShardExtension[] = ".mfrec";
inline constexpr char kRecordShardManifestName[] = "manifest.mfidx";
// Bounds on decoded header fields: a record of at most 2^40 bytes, at most 2^48 records.
inline constexpr int64_t kRecordShardMaxRecordBytes = int64_t{1} << 40;
inline constexpr int64_t kRecordShardMaxRecords = int64_t{1} << 48;

// The decoded header of one shard file.
struct RecordShardHeader {
  uint32_t version = kRecordShardVersion;
  DType dtype = DType::kF32;
  std::vector<int64_t> sample_shape;
  int64_t record_size = 0;
  int64_t record_count = 0;
  uint32_t payload_crc = 0;
};

// Encodes a header (computes the header CRC). Precondition: sample_shape.size() <= 8.
std::vector<std::byte> EncodeRecordShardHeader(const RecordShardHeader& header);
// Decodes and validates the first 128 bytes of `file_bytes` (not the payload). `path` names the
// file in errors.
StatusOr<RecordShardHeader> DecodeRecordShardHeader(std::span<const std::byte> file_bytes, const std::string& path);

// Writes one shard file holding `payload` (whole records of `sample_shape` x `dtype`).
// Errors: a bad shape (negative size, ndim > 8), payload not a whole number of records, I/O
// errors naming the path.
Status WriteRecordShard(const std::string& path, DType dtype, const std::vector<int64_t>& sample_shape,
                        std::span<const std::byte> payload);
// Writes `dataset` into `dir` (created if missing) as files "<prefix>-00000.mfrec", ... with at
// most records_per_shard records each, then the manifest listing exactly those files. Errors:
// records_per_shard < 1, read or I/O errors.
Status WriteRecordShards(const std::string& dir, const Dataset& dataset, int64_t records_per_shard,
                         const std::string& prefix = "shard");

// The manifest of a shard directory (format above).
struct RecordShardManifest {
  struct Shard {
    std::string name = {};  // file name inside the directory, ending in ".mfrec"
    int64_t records = 0;
    int64_t bytes = 0;  // file size
    uint32_t crc = 0;   // payload CRC-32C (as in the shard's header)
    friend bool operator==(const Shard&, const Shard&) = default;
  };
  DType dtype = DType::kF32;
  std::vector<int64_t> sample_shape = {};
  int64_t record_size = 0;
  std::vector<Shard> shards = {};
  friend bool operator==(const RecordShardManifest&, const RecordShardManifest&) = default;
};
std::string EncodeRecordShardManifest(const RecordShardManifest& manifest);
// Errors (DATA_LOSS naming `path` and the line): bad first line, a malformed or repeated field,
// a bad dtype / shape / number, a name that is not a plain "*.mfrec" file name or listed twice,
// counts that disagree with the shard lines, a missing or wrong manifest_crc32c line.
StatusOr<RecordShardManifest> ParseRecordShardManifest(std::string_view text, const std::string& path);

// Writes (or replaces) the manifest of `dir` from the ".mfrec" files it holds now (validating
// each header). For directories written before manifests existed. Errors: as Open without a
// manifest, I/O errors.
Status WriteRecordShardManifest(const std::string& dir);

struct RecordShardOptions {
  bool verify_checksums = true;  // check every payload CRC at open
  bool require_manifest = true;  // Open(dir): a directory without manifest.mfidx is an error
};

class RecordShardDataset final : public Dataset {
 public:
  // All "*.mfrec" files in `dir`, in file-name order, checked against the manifest. Errors:
  // NOT_FOUND for a missing directory or one without shard files; UNAVAILABLE naming the errno
  // when stat of the directory or of its manifest fails otherwise (EIO, EACCES, ELOOP); the
  // manifest and per-file errors above.
  static StatusOr<std::shared_ptr<RecordShardDataset>> Open(const std::string& dir,
                                                            RecordShardOptions options = {});
  // The given files, in the given order. Errors: empty list; the per-file errors above.
  static StatusOr<std::shared_ptr<RecordShardDataset>> OpenFiles(const std::vector<std::string>& paths,
                                                                 RecordShardOptions options = {});

  int64_t size() const override { return total_; }
  DType dtype() const override { return dtype_; }
  const std::vector<int64_t>& sample_shape() const override { return sample_shape_; }
  std::string name() const override;
  int num_shards() const { return static_cast<int>(files_.size()); }
  uint64_t fingerprint() const override { return fingerprint_; }

 protected:
  Status ReadUnchecked(int64_t index, std::span<std::byte> dst) const override;

 private:
  RecordShardDataset() = default;
  std::string source_;
  std::vector<std::unique_ptr<RandomAccessFile>> files_;
  std::vector<uint32_t> crcs_;   // payload CRC-32C of each shard (from its header)
  uint64_t fingerprint_ = 0;
  std::vector<int64_t> starts_;  // starts_[i] = first global index of shard i; back() = total
  DType dtype_ = DType::kF32;
  std::vector<int64_t> sample_shape_;
  int64_t record_size_ = 0;
  int64_t total_ = 0;
};

}  // namespace meshflow

#endif  // MESHFLOW_DATA_RECORD_SHARDS_H_
