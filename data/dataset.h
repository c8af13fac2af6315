// Dataset: a random-access source of fixed-shape samples, and the in-memory implementation.
//
// Every sample of a Dataset has the same dtype and shape. Read(i, dst) copies sample i (row-major
// element bytes) into dst; it is const and safe to call from several threads at once (the
// loader's prefetch thread reads while the user thread holds the dataset). Implementations:
//   InMemoryDataset      (this header)       samples held in a Tensor / byte vector
//   RecordShardDataset   (record_shards.h)   a directory of checksummed shard files + manifest
//   TokenFileDataset     (token_file.h)      a uint16/uint32 token file (.mftok, or raw nanoGPT .bin)
//   MixtureDataset       (mixture.h)         weighted mixture of several datasets
//   PackedTokenDataset   (packed.h)          documents packed into sequences, with boundaries
//
//   Tensor samples = Tensor::Iota(DType::kF32, {10, 3});        // 10 samples of shape [3]
//   MF_ASSIGN_OR_RETURN(auto ds, InMemoryDataset::FromTensor(samples));
//   std::vector<std::byte> buf(ds->sample_bytes());
//   MF_RETURN_IF_ERROR(ds->Read(7, buf));                       // bytes of row 7
//   ds->Read(10, buf)  ->  OUT_OF_RANGE: sample index 10 out of range [0, 10) in in-memory dataset
#ifndef MESHFLOW_DATA_DATASET_H_
#define MESHFLOW_DATA_DATASET_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/tensor.h"

namespace meshflow {

class Dataset {
 public:
  virtual ~Dataset() = default;

  // Number of samples.
  virtual int64_t size() const = 0;
  virtual DType dtype() const = 0;
  virtual const std::vector<int64_t>& sample_shape() const = 0;
  // Short description used in error messages, e.g. "token file /data/train.bin".
  virtual std::string name() const = 0;

  // A 64-bit identity of the contents, stored in LoaderState so that a state saved for one
  // dataset does not restore onto another of the same size. Record shards: the manifest hash;
  // token files: the header (token count, width, vocabulary, payload CRC-32C); in-memory: the
  // bytes. The default (for other implementations) hashes only dtype, shape and size.
  virtual uint64_t fingerprint() const;

  int64_t sample_elements() const;
  int64_t sample_bytes() const { return sample_elements() * DTypeSize(dtype()); }

  // Copies sample `index` into dst. Errors: OUT_OF_RANGE for an index outside [0, size())
  // (the message names the index, the size and the dataset); INVALID_ARGUMENT when dst.size() !=
  // sample_bytes(); implementation errors (e.g. DATA_LOSS for a token that does not fit the
  // output dtype). Thread-safe.
  Status Read(int64_t index, std::span<std::byte> dst) const;

  // Copies samples [first, first + count) into dst, back to back: what `count` Reads would give.
  // A dataset whose consecutive samples are contiguous in storage (token files) reads them at
  // once. Errors: OUT_OF_RANGE for a range outside [0, size()) or count < 1; INVALID_ARGUMENT
  // when dst.size() != count * sample_bytes(); implementation errors. On an error dst holds
  // garbage. Thread-safe.
  Status ReadRun(int64_t first, int64_t count, std::span<std::byte> dst) const;

 protected:
  // Precondition: 0 <= index < size(), dst.size() == sample_bytes().
  virtual Status ReadUnchecked(int64_t index, std::span<std::byte> dst) const = 0;
  // Precondition: the range lies in [0, size()), count >= 1, dst.size() == count *
  // sample_bytes(). The default reads each sample with ReadUnchecked.
  virtual Status ReadRunUnchecked(int64_t first, int64_t count, std::span<std::byte> dst) const;
};

// Mixes v into the fingerprint h (SplitMix64-based; order-dependent).
uint64_t FingerprintCombine(uint64_t h, uint64_t v);
// 16 lower-case hex digits.
std::string FingerprintHex(uint64_t fingerprint);

class InMemoryDataset final : public Dataset {
 public:
  // Samples are the rows of `samples` (dim 0); the sample shape is the remaining dims.
  // Errors: a rank-0 tensor.
  static StatusOr<std::shared_ptr<InMemoryDataset>> FromTensor(const Tensor& samples);
  // `bytes` holds num_samples * prod(sample_shape) elements of `dtype`, row-major.
  // Errors: a negative size in sample_shape, bytes.size() not a multiple of the sample size.
  static StatusOr<std::shared_ptr<InMemoryDataset>> Create(DType dtype, std::vector<int64_t> sample_shape,
                                                           std::vector<std::byte> bytes);

  int64_t size() const override { return num_samples_; }
  DType dtype() const override { return dtype_; }
  const std::vector<int64_t>& sample_shape() const override { return sample_shape_; }
  std::string name() const override { return "in-memory dataset"; }
  uint64_t fingerprint() const override { return fingerprint_; }

 protected:
  Status ReadUnchecked(int64_t index, std::span<std::byte> dst) const override;

 private:
  InMemoryDataset() = default;
  DType dtype_ = DType::kF32;
  std::vector<int64_t> sample_shape_;
  int64_t num_samples_ = 0;
  std::vector<std::byte> bytes_;
  uint64_t fingerprint_ = 0;
};

}  // namespace meshflow

#endif  // MESHFLOW_DATA_DATASET_H_
