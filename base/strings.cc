#include "meshflow/base/strings.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace meshflow {
namespace {

template <typename T>
std::string ListOf(std::span<const T> v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += ",";
    s += std::to_string(v[i]);
  }
  return s + "]";
}

template <typename T>
std::string ElidedListOf(std::span<const T> v, size_t max_items) {
  if (v.size() <= max_items || max_items < 2) return ListOf(v);
  const size_t head = (max_items + 1) / 2, tail = max_items / 2;
  std::string s = ListOf(v.first(head));
  s.pop_back();
  std::string t = ListOf(v.last(tail));
  return s + ",..." + t.replace(0, 1, ",") + " (" + std::to_string(v.size()) + " entries)";
}

}  // namespace

std::string ListString(std::span<const int> v) { return ListOf(v); }
std::string ListString(std::span<const int64_t> v) { return ListOf(v); }
std::string ElidedListString(std::span<const int> v, size_t max_items) { return ElidedListOf(v, max_items); }
std::string ElidedListString(std::span<const int64_t> v, size_t max_items) { return ElidedListOf(v, max_items); }

std::string DoubleString(double v) {
  if (std::isnan(v)) return "nan";
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, end) : "nan";
}

std::string FixedString(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::vector<std::string_view> SplitString(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (true) {
    const size_t e = s.find(sep, pos);
    if (e == std::string_view::npos) {
      out.push_back(s.substr(pos));
      return out;
    }
    out.push_back(s.substr(pos, e - pos));
    pos = e + 1;
  }
}

}  // namespace meshflow
