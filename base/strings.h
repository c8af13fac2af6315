// Small text helpers shared by every layer's messages and printers.
//
//   ListString(std::vector<int64_t>{5, 2})   -> "[5,2]"
//   ListString(std::vector<int>{})           -> "[]"
//   ElidedListString(ranks_0_to_99, 4)       -> "[0,1,...,98,99] (100 entries)"
//   DoubleString(0.1)                        -> "0.1"
//   DoubleString(1e6)                        -> "1e+06"
//   FixedString(2.345, 1)                    -> "2.3"
//   SplitString("dp,,tp", ',')               -> {"dp", "", "tp"}
#ifndef MESHFLOW_BASE_STRINGS_H_
#define MESHFLOW_BASE_STRINGS_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace meshflow {

// "[1,2,3]": shapes, dims, permutations and rank lists in messages.
std::string ListString(std::span<const int> v);
std::string ListString(std::span<const int64_t> v);
// ListString for lists that can be as long as the world (rank lists, per-rank counts): at most
// max_items entries, the first and last halves around "...", then the length.
std::string ElidedListString(std::span<const int> v, size_t max_items = 16);
std::string ElidedListString(std::span<const int64_t> v, size_t max_items = 16);
// The shortest text that parses back to the same double ("0.001", "-1", "1e+06", "inf", "-inf";
// every NaN is "nan"): numbers in messages and in round-tripping printers.
std::string DoubleString(double v);
// printf("%.*f", digits, v): fixed-point numbers in tables and reports.
std::string FixedString(double v, int digits);
// Every field between separators, empty ones included (a trailing separator gives a trailing
// empty field; "" gives one empty field), so that a caller can name the empty one in its error.
// The views point into `s`.
std::vector<std::string_view> SplitString(std::string_view s, char sep);
// A temporary std::string would leave the views dangling: keep it in a variable first.
template <typename S>
  requires(std::same_as<std::remove_cvref_t<S>, std::string> && !std::is_lvalue_reference_v<S>)
std::vector<std::string_view> SplitString(S&& s, char sep) = delete;

}  // namespace meshflow

#endif  // MESHFLOW_BASE_STRINGS_H_
