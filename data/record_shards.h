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
//   MF_RETURN_IF_ERROR(WriteRecordShards("ds", *in_memory, /*records_per_shard=*/1000));
//   MF_ASSIGN_OR_RETURN(auto ds, RecordShardDataset::Open("ds"));
#ifndef MESHFLOW_DATA_RECORD_SHARDS_H_
#define MESHFLOW_DATA_RECORD_SHARDS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
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
// most records_per_shard records each. Errors: records_per_shard < 1, read or I/O errors.
Status WriteRecordShards(const std::string& dir, const Dataset& dataset, int64_t records_per_shard,
                         const std::string& prefix = "shard");

struct RecordShardOptions {
  bool verify_checksums = true;  // check every payload CRC at open
};

class RecordShardDataset final : public Dataset {
 public:
  // All "*.mfrec" files in `dir`, in file-name order. Errors: NOT_FOUND for a missing directory
  // or one without shard files; the per-file errors above.
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

 protected:
  Status ReadUnchecked(int64_t index, std::span<std::byte> dst) const override;

 private:
  RecordShardDataset() = default;
  std::string source_;
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::vector<int64_t> starts_;  // starts_[i] = first global index of shard i; back() = total
  DType dtype_ = DType::kF32;
  std::vector<int64_t> sample_shape_;
  int64_t record_size_ = 0;
  int64_t total_ = 0;
};

}  // namespace meshflow

#endif  // MESHFLOW_DATA_RECORD_SHARDS_H_
