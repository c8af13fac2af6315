#include "meshflow/data/packed.h"

#include <algorithm>
#include <cstring>

namespace meshflow {

StatusOr<std::shared_ptr<PackedTokenDataset>> PackedTokenDataset::Create(std::shared_ptr<const TokenFileDataset> tokens,
                                                                         PackingOptions options) {
  if (tokens == nullptr) return InvalidArgumentError("PackedTokenDataset: token dataset is null");
  if (options.seq_len < 1 || options.seq_len > kTokenFileMaxSeqLen) {
    return InvalidArgumentError("PackedTokenDataset: seq_len must be in [1, 2^40], got " +
                                std::to_string(options.seq_len));
  }
  if (options.dtype != DType::kI32 && options.dtype != DType::kI64) {
    return InvalidArgumentError("PackedTokenDataset: output dtype must be i32 or i64, got " +
                                std::string(DTypeName(options.dtype)));
  }
  if (options.eos_token < 0) {
    return InvalidArgumentError("PackedTokenDataset: eos_token must be >= 0, got " + std::to_string(options.eos_token));
  }
  const int64_t n = tokens->num_tokens();
  if (n < options.seq_len + 1) {
    return InvalidArgumentError("PackedTokenDataset: " + tokens->name() + " holds " + std::to_string(n) +
                                " tokens, fewer than one sample (seq_len + 1 = " + std::to_string(options.seq_len + 1) +
                                ")");
  }
  auto ds = std::shared_ptr<PackedTokenDataset>(new PackedTokenDataset());
  ds->doc_starts_.push_back(0);
  std::vector<int64_t> chunk(1 << 16);
  for (int64_t pos = 0; pos < n;) {
    const int64_t len = std::min<int64_t>(static_cast<int64_t>(chunk.size()), n - pos);
    MF_RETURN_IF_ERROR(tokens->ReadTokens(pos, std::span<int64_t>(chunk.data(), static_cast<size_t>(len))));
    for (int64_t i = 0; i < len; ++i) {
      if (chunk[static_cast<size_t>(i)] == options.eos_token && pos + i + 1 < n) ds->doc_starts_.push_back(pos + i + 1);
    }
    pos += len;
  }
  uint64_t fp = FingerprintCombine(0x6d662d7061636bull, tokens->fingerprint());
  fp = FingerprintCombine(fp, static_cast<uint64_t>(options.seq_len));
  fp = FingerprintCombine(fp, static_cast<uint64_t>(options.eos_token));
  ds->fingerprint_ = FingerprintCombine(fp, static_cast<uint64_t>(options.dtype));
  ds->tokens_ = std::move(tokens);
  ds->options_ = options;
  ds->sample_shape_ = {3, options.seq_len + 1};
  ds->num_samples_ = (n - 1) / options.seq_len;
  return ds;
}

Status PackedTokenDataset::ReadUnchecked(int64_t index, std::span<std::byte> dst) const {
  const int64_t len = options_.seq_len + 1;
  const int64_t first = index * options_.seq_len;
  std::vector<int64_t> rows(static_cast<size_t>(3 * len));
  MF_RETURN_IF_ERROR(tokens_->ReadTokens(first, std::span<int64_t>(rows.data(), static_cast<size_t>(len))));
  // The document containing `first`, then walk the boundaries inside the sample.
  auto next = std::upper_bound(doc_starts_.begin(), doc_starts_.end(), first);
  int64_t start = first;  // positions restart at the sample start
  int64_t segment = 0;
  for (int64_t t = 0; t < len; ++t) {
    const int64_t token = first + t;
    if (next != doc_starts_.end() && *next == token) {
      start = token;
      ++segment;
      ++next;
    }
    rows[static_cast<size_t>(len + t)] = token - start;
    rows[static_cast<size_t>(2 * len + t)] = segment;
  }
  if (options_.dtype == DType::kI64) {
    std::memcpy(dst.data(), rows.data(), rows.size() * sizeof(int64_t));
    return Status::Ok();
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] > INT32_MAX) {
      return DataLossError(name() + ": token " + std::to_string(rows[i]) + " at position " +
                           std::to_string(first + static_cast<int64_t>(i)) + " does not fit the i32 output dtype");
    }
    const int32_t v = static_cast<int32_t>(rows[i]);
    std::memcpy(dst.data() + i * 4, &v, 4);
  }
  return Status::Ok();
}

}  // namespace meshflow
