// TokenFileDataset: a raw token file (nanoGPT's train.bin) cut into fixed-length sequences.
//
// The file is a headerless little-endian array of uint16 or uint32 token ids, memory-mapped
// read-only. Sample i is the seq_len + 1 tokens starting at token i * seq_len:
//
//   tokens   t0 t1 t2 t3 t4 t5 t6 t7 t8       (seq_len = 4)
//   sample 0 t0 t1 t2 t3 t4                   input = sample[0:4], target = sample[1:5]
//   sample 1             t4 t5 t6 t7 t8
//
// Consecutive samples overlap by one token, so every token except t0 is a prediction target
// exactly once per epoch; num_samples = (num_tokens - 1) / seq_len (a tail shorter than a whole
// sequence is not used). The sample shape is [seq_len + 1] and the dtype is the requested output
// dtype, i32 or i64 (tokens are zero-extended; a uint32 token above INT32_MAX read as i32 is a
// DATA_LOSS error naming the token position).
//
// Errors at open (naming the file): NOT_FOUND (missing file), DATA_LOSS for a file size that is
// not a multiple of the token width ("wrong size") or fewer than seq_len + 1 tokens;
// INVALID_ARGUMENT for seq_len < 1 or an output dtype other than i32/i64.
//
//   MF_RETURN_IF_ERROR(WriteTokenFile("t.bin", tokens, TokenWidth::kU16));
//   MF_ASSIGN_OR_RETURN(auto ds, TokenFileDataset::Open("t.bin", {.seq_len = 128}));
//   ds->sample_shape()  ->  {129}
#ifndef MESHFLOW_DATA_TOKEN_FILE_H_
#define MESHFLOW_DATA_TOKEN_FILE_H_

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

enum class TokenWidth { kU16 = 2, kU32 = 4 };

struct TokenFileOptions {
  int64_t seq_len = 0;                // tokens per input sequence (each sample holds seq_len + 1)
  TokenWidth width = TokenWidth::kU16;  // storage type in the file
  DType dtype = DType::kI32;          // output dtype: kI32 or kI64
};

// Writes `tokens` as a raw little-endian token file. Errors: a token that does not fit `width`
// (naming its position), I/O errors naming the path.
Status WriteTokenFile(const std::string& path, std::span<const uint32_t> tokens, TokenWidth width);

class TokenFileDataset final : public Dataset {
 public:
  static StatusOr<std::shared_ptr<TokenFileDataset>> Open(const std::string& path, TokenFileOptions options);

  int64_t size() const override { return num_samples_; }
  DType dtype() const override { return options_.dtype; }
  const std::vector<int64_t>& sample_shape() const override { return sample_shape_; }
  std::string name() const override { return "token file '" + file_->path() + "'"; }

  int64_t num_tokens() const { return num_tokens_; }
  int64_t seq_len() const { return options_.seq_len; }
  // The raw token bytes (for benchmarks comparing against a plain read).
  std::span<const std::byte> raw_bytes() const { return file_->bytes(); }

 protected:
  Status ReadUnchecked(int64_t index, std::span<std::byte> dst) const override;

 private:
  TokenFileDataset() = default;
  std::unique_ptr<MappedFile> file_;
  TokenFileOptions options_;
  std::vector<int64_t> sample_shape_;
  int64_t num_tokens_ = 0;
  int64_t num_samples_ = 0;
};

}  // namespace meshflow

#endif  // MESHFLOW_DATA_TOKEN_FILE_H_
