// PackedTokenDataset: variable-length documents packed into fixed-length sequences, with the
// document boundaries each sequence needs for attention masks and position resets.
//
// The documents are the runs of a token file that end with `eos_token` (inclusive; a last run
// without one is a document too). They are concatenated as they are in the file and cut like
// TokenFileDataset: sample i covers the seq_len + 1 tokens starting at token i * seq_len
// (consecutive samples overlap by one token; num_samples = (tokens - 1) / seq_len; a document may
// continue in the next sample). Every sample is a [3, seq_len + 1] tensor (i32 or i64):
//
//   row 0  tokens
//   row 1  position ids: the offset of the token from the start of its document, restarting
//          at 0 at every document start and at the start of the sample
//   row 2  segment ids: 0 for the sample's first (possibly partial) document, +1 at every
//          document start inside the sample
//
//   tokens    5  6  E  7  8  9  E  3  4        (E = eos_token, seq_len = 8: one sample)
//   positions 0  1  2  0  1  2  3  0  1
//   segments  0  0  0  1  1  1  1  2  2
//
// Attention: query t may attend key u iff u <= t and segment[u] == segment[t] (block-diagonal
// causal mask). Loss: input = [:, :-1], target = tokens[1:]; the target of an eos token is the
// next document's first token: mask position t when segment[t + 1] != segment[t].
// Because it is a Dataset, the loader's guarantees hold: every token after the first is a target
// exactly once per epoch, the stream is independent of the world size, and a LoaderState resumes
// exactly (the fingerprint covers the token file, seq_len and eos_token). Opening scans the file
// once for eos tokens (8 bytes of memory per document). Reads are O(seq_len + log documents).
//
//   MF_ASSIGN_OR_RETURN(auto tokens, TokenFileDataset::Open("docs.mftok", {.seq_len = 1}));
//   MF_ASSIGN_OR_RETURN(auto packed, PackedTokenDataset::Create(tokens, {.seq_len = 2048, .eos_token = 50256}));
//   packed->sample_shape()  ->  {3, 2049}
//
// Errors of Create (INVALID_ARGUMENT): a null token dataset, seq_len outside [1, 2^40], an
// output dtype other than i32/i64, a negative eos_token, fewer than seq_len + 1 tokens (DATA_LOSS
// when the file cannot be read).
#ifndef MESHFLOW_DATA_PACKED_H_
#define MESHFLOW_DATA_PACKED_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/data/dataset.h"
#include "meshflow/data/token_file.h"

namespace meshflow {

struct PackingOptions {
  int64_t seq_len = 0;         // tokens per input sequence (each sample holds seq_len + 1)
  int64_t eos_token = 0;       // ends a document
  DType dtype = DType::kI32;   // i32 or i64
};

class PackedTokenDataset final : public Dataset {
 public:
  // `tokens` supplies the token stream (its own seq_len is not used).
  static StatusOr<std::shared_ptr<PackedTokenDataset>> Create(std::shared_ptr<const TokenFileDataset> tokens,
                                                              PackingOptions options);

  int64_t size() const override { return num_samples_; }
  DType dtype() const override { return options_.dtype; }
  const std::vector<int64_t>& sample_shape() const override { return sample_shape_; }
  std::string name() const override { return "packed " + tokens_->name(); }
  uint64_t fingerprint() const override { return fingerprint_; }

  int64_t num_documents() const { return static_cast<int64_t>(doc_starts_.size()); }
  // Token index where document d starts.
  int64_t document_start(int64_t d) const { return doc_starts_[static_cast<size_t>(d)]; }

 protected:
  Status ReadUnchecked(int64_t index, std::span<std::byte> dst) const override;

 private:
  PackedTokenDataset() = default;
  std::shared_ptr<const TokenFileDataset> tokens_;
  PackingOptions options_;
  std::vector<int64_t> doc_starts_;  // ascending, doc_starts_[0] == 0
  std::vector<int64_t> sample_shape_;
  int64_t num_samples_ = 0;
  uint64_t fingerprint_ = 0;
};

}  // namespace meshflow

#endif  // MESHFLOW_DATA_PACKED_H_
