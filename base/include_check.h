// MESHFLOW_CHECK_INCLUDE_PATH(): every meshflow header starts with it, so that a header reached by
// any path other than "meshflow/<folder>/<file>.h" stops the build with one message.
//
// Bazel puts a repository's root on the quote-include path of everything that depends on it, so
// a consumer could write #include "planner/search.h" (the layout before the "meshflow/" prefix,
// or a header the front door never exposed) and it compiled, until the next move broke it
// silently. The check looks at the header's own path as the compiler opened it (__FILE__): through
// the prefix it contains "meshflow/<folder>/" and does not start with "external/" (Bazel's
// _virtual_includes/<target>/meshflow/..., an install's include/meshflow/..., nvcc's staged
// include directory); through the raw root it is "external/<repo>/<folder>/<file>.h" (a consumer)
// or "<folder>/<file>.h" (meshflow's own workspace).
#ifndef MESHFLOW_BASE_INCLUDE_CHECK_H_
#define MESHFLOW_BASE_INCLUDE_CHECK_H_

namespace meshflow::include_check {

constexpr bool StartsWith(const char* s, const char* prefix) {
  for (; *prefix != '\0'; ++s, ++prefix) {
    if (*s != *prefix) return false;
  }
  return true;
}

constexpr bool Contains(const char* s, const char* part) {
  for (; *s != '\0'; ++s) {
    if (StartsWith(s, part)) return true;
  }
  return false;
}

// Whether a header's __FILE__ was reached through the "meshflow/" include prefix.
constexpr bool ViaPrefix(const char* file) { return !StartsWith(file, "external/") && Contains(file, "meshflow/"); }

}  // namespace meshflow::include_check

#define MESHFLOW_CHECK_INCLUDE_PATH()                                                                 \
  static_assert(::meshflow::include_check::ViaPrefix(__FILE__),                                      \
                "include meshflow headers as \"meshflow/<folder>/<file>.h\" (e.g. "                   \
                "\"meshflow/planner/search.h\", not \"planner/search.h\"); see CHANGELOG.md")

#endif  // MESHFLOW_BASE_INCLUDE_CHECK_H_
