// The one pseudo-random generator of meshflow's deterministic values: test inputs, the examples'
// parameter initialisations and benchmark data. A 32-bit linear congruential generator
// (multiplier 1664525, increment 1013904223): the same sequence on every platform and compiler,
// which the loss curves checked into examples/ depend on. Not for statistics or security.
//
//   Lcg32 g = Lcg32::Seeded(3, 7);
//   uint32_t token = g.Next24() % 16;      // an integer in [0, 16)
//   double w = 0.1 * g.NextSymmetric();    // a value in [-0.1, 0.1)
#ifndef MESHFLOW_BASE_LCG_H_
#define MESHFLOW_BASE_LCG_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>

namespace meshflow {

class Lcg32 {
 public:
  explicit constexpr Lcg32(uint32_t state) : state_(state) {}
  // The generator for (seed, salt): the seed spread by Knuth's multiplicative hash, plus the salt
  // (callers keep their historical salts so that their sequences do not change).
  static constexpr Lcg32 Seeded(uint32_t seed, uint32_t salt) { return Lcg32(seed * 2654435761u + salt); }

  // Advances and returns the whole state.
  constexpr uint32_t Next() {
    state_ = state_ * 1664525u + 1013904223u;
    return state_;
  }
  // The top 24 bits of the next state (the low bits of an LCG are weak): [0, 2^24).
  constexpr uint32_t Next24() { return Next() >> 8; }
  // Uniform in [0, 1) on a grid of 2^-24.
  constexpr double NextUnit() { return static_cast<double>(Next24()) / static_cast<double>(1u << 24); }
  // Uniform in [-1, 1) on a grid of 2^-23.
  constexpr double NextSymmetric() { return NextUnit() * 2.0 - 1.0; }

 private:
  uint32_t state_;
};

}  // namespace meshflow

#endif  // MESHFLOW_BASE_LCG_H_
