#include "meshflow/base/include_check.h"

#include <gtest/gtest.h>

namespace meshflow::include_check {
namespace {

TEST(IncludeCheckTest, AcceptsPrefixedPathsOnly) {
  // Through the prefix: Bazel's virtual includes (own workspace and a consumer's), nvcc's staged
  // include directory, an installed tree.
  static_assert(ViaPrefix("bazel-out/k8-fastbuild/bin/planner/_virtual_includes/search/meshflow/planner/search.h"));
  static_assert(ViaPrefix(
      "bazel-out/k8-fastbuild/bin/external/meshflow/planner/_virtual_includes/search/meshflow/planner/search.h"));
  static_assert(ViaPrefix("/tmp/tmp.Ab12/meshflow/ops/elementwise.h"));
  static_assert(ViaPrefix("/usr/include/meshflow/base/status.h"));
  // The raw repository root: a consumer's and meshflow's own.
  static_assert(!ViaPrefix("external/meshflow/planner/search.h"));
  static_assert(!ViaPrefix("external/my_meshflow/planner/search.h"));
  static_assert(!ViaPrefix("planner/search.h"));
  static_assert(!ViaPrefix("./base/status.h"));
  // The same at run time (a wrong answer above fails the build, here the test).
  const char* raw = "external/meshflow/base/status.h";
  EXPECT_FALSE(ViaPrefix(raw));
  EXPECT_TRUE(ViaPrefix(raw + 9));  // "meshflow/base/status.h"
}

}  // namespace
}  // namespace meshflow::include_check
