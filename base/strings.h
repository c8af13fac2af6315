// Small text helpers shared by every layer's messages and printers.
//
//   ListString(std::vector<int64_t>{5, 2})   -> "[5,2]"
//   ListString(std::vector<int>{})           -> "[]"
#ifndef MESHFLOW_BASE_STRINGS_H_
#define MESHFLOW_BASE_STRINGS_H_

#include <cstdint>
#include <span>
#include <string>

namespace meshflow {

// "[1,2,3]": shapes, dims, permutations and rank lists in messages.
std::string ListString(std::span<const int> v);
std::string ListString(std::span<const int64_t> v);

}  // namespace meshflow

#endif  // MESHFLOW_BASE_STRINGS_H_
