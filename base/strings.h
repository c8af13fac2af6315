// Small text helpers shared by every layer's messages and printers.
//
//   ListString(std::vector<int64_t>{5, 2})   -> "[5,2]"
//   ListString(std::vector<int>{})           -> "[]"
//   DoubleString(0.1)                        -> "0.1"
//   DoubleString(1e6)                        -> "1e+06"
//   FixedString(2.345, 1)                    -> "2.3"
#ifndef MESHFLOW_BASE_STRINGS_H_
#define MESHFLOW_BASE_STRINGS_H_

#include <cstdint>
#include <span>
#include <string>

namespace meshflow {

// "[1,2,3]": shapes, dims, permutations and rank lists in messages.
std::string ListString(std::span<const int> v);
std::string ListString(std::span<const int64_t> v);
// The shortest text that parses back to the same double ("0.001", "-1", "1e+06", "inf", "-inf";
// every NaN is "nan"): numbers in messages and in round-tripping printers.
std::string DoubleString(double v);
// printf("%.*f", digits, v): fixed-point numbers in tables and reports.
std::string FixedString(double v, int digits);

}  // namespace meshflow

#endif  // MESHFLOW_BASE_STRINGS_H_
