// HashMix: the one hash combiner of the layout-keyed caches (mesh fingerprints, HashLayout, the
// plan cache and the eager dispatch cache), so that their hashes compose.
//
//   uint64_t h = 0x6d657368ull;
//   for (int64_t d : shape) HashMix(h, static_cast<uint64_t>(d));
#ifndef MESHFLOW_BASE_HASH_H_
#define MESHFLOW_BASE_HASH_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>

namespace meshflow {

// Mixes `v` into the running hash `h` (boost::hash_combine's mixing on 64 bits).
inline void HashMix(uint64_t& h, uint64_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); }

}  // namespace meshflow

#endif  // MESHFLOW_BASE_HASH_H_
