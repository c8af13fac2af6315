#include "meshflow/data/sample_order.h"

#include <cassert>

namespace meshflow {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

SampleOrder::SampleOrder(int64_t num_samples, uint64_t seed, uint64_t epoch, bool shuffle)
    : n_(num_samples), shuffle_(shuffle) {
  assert(num_samples >= 0);
  // Domain 2^(2*half_bits) >= n, half_bits >= 1.
  int bits = 2;
  while (bits < 62 && (uint64_t{1} << bits) < static_cast<uint64_t>(n_)) bits += 2;
  half_bits_ = bits / 2;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
  uint64_t k = SplitMix64(seed ^ SplitMix64(epoch ^ 0x6D657368666C6F77ull));  // "meshflow"
  for (uint64_t& key : keys_) {
    k = SplitMix64(k);
    key = k;
  }
}

uint64_t SampleOrder::Encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_;
  uint64_t right = x & half_mask_;
  for (uint64_t key : keys_) {
    const uint64_t f = SplitMix64(right ^ key) & half_mask_;
    const uint64_t next_right = left ^ f;
    left = right;
    right = next_right;
  }
  return (left << half_bits_) | right;
}

int64_t SampleOrder::At(int64_t position) const {
  assert(position >= 0 && position < n_);
  if (!shuffle_) return position;
  // Cycle walking: the Feistel network permutes the power-of-two domain; following the cycle
  // from `position` until it re-enters [0, n) gives a permutation of [0, n).
  uint64_t y = static_cast<uint64_t>(position);
  do {
    y = Encrypt(y);
  } while (y >= static_cast<uint64_t>(n_));
  return static_cast<int64_t>(y);
}

}  // namespace meshflow
