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

}  // namespace

std::string ListString(std::span<const int> v) { return ListOf(v); }
std::string ListString(std::span<const int64_t> v) { return ListOf(v); }

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

}  // namespace meshflow
