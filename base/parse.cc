#include "meshflow/base/parse.h"

#include <algorithm>
#include <charconv>
#include <string>

namespace meshflow {

StatusOr<int64_t> ParseInt64(std::string_view text, std::string_view what) {
  std::string_view digits = text;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);  // from_chars takes '-' only
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size()) {
    return InvalidArgumentError("bad " + std::string(what) + " '" + std::string(text) + "': " +
                                (ec == std::errc::result_out_of_range ? "out of the int64 range"
                                                                      : "not an integer"));
  }
  return v;
}

StatusOr<std::vector<int64_t>> ParseIntList(std::string_view text, char sep, std::string_view what) {
  if (text.empty()) return InvalidArgumentError("empty " + std::string(what));
  std::vector<int64_t> out;
  size_t start = 0;
  while (true) {
    const size_t end = std::min(text.find(sep, start), text.size());
    const std::string_view item = text.substr(start, end - start);
    StatusOr<int64_t> v = ParseInt64(item, what);
    if (!v.ok()) {
      return InvalidArgumentError("bad " + std::string(what) + " '" + std::string(text) + "': '" + std::string(item) +
                                  "' is not an integer");
    }
    out.push_back(*v);
    if (end == text.size()) return out;
    start = end + 1;
  }
}

}  // namespace meshflow
