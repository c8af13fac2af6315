// PropertyTestCases: how many random cases a property test runs.
//
// Property tests compare many random executions against a single-rank reference. Their default
// case counts suit a plain build; sanitizer builds run the same code paths 5-20x slower, so the
// asan/tsan configs in .bazelrc set MESHFLOW_PROPERTY_CASES_PERCENT (e.g. 20) and every property
// test scales its count by it (at least 1 case). Unset or invalid: 100%.
//
//   const int cases = PropertyTestCases(1500);   // 1500, or 300 under --config=asan
#ifndef MESHFLOW_BASE_TEST_CASES_H_
#define MESHFLOW_BASE_TEST_CASES_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <algorithm>
#include <cstdint>
#include <cstdlib>

namespace meshflow::testing {

inline int PropertyTestCases(int default_cases) {
  const char* env = std::getenv("MESHFLOW_PROPERTY_CASES_PERCENT");
  if (env == nullptr) return default_cases;
  char* end = nullptr;
  const long percent = std::strtol(env, &end, 10);
  if (end == env || *end != '\0' || percent <= 0 || percent > 100) return default_cases;
  return std::max(1, static_cast<int>(static_cast<int64_t>(default_cases) * percent / 100));
}

}  // namespace meshflow::testing

#endif  // MESHFLOW_BASE_TEST_CASES_H_
