// Text parsing shared by the command-line tools, benchmarks and fuzz targets.
//
//   MF_ASSIGN_OR_RETURN(std::vector<int64_t> mesh, ParseIntList("2x4", 'x', "mesh"));  // {2, 4}
//   MF_ASSIGN_OR_RETURN(int64_t n, ParseInt64("128", "--iters"));
//
// Errors (INVALID_ARGUMENT, naming `what`, the whole text and the bad item): an empty text or
// item, an item that is not a base-10 integer (signs allowed, no spaces), a value outside int64.
#ifndef MESHFLOW_BASE_PARSE_H_
#define MESHFLOW_BASE_PARSE_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <string_view>
#include <vector>

#include "meshflow/base/status.h"

namespace meshflow {

StatusOr<int64_t> ParseInt64(std::string_view text, std::string_view what);

// Integers separated by `sep` ("8,6", "2x2"). Range checks (e.g. sizes >= 1) are the caller's.
StatusOr<std::vector<int64_t>> ParseIntList(std::string_view text, char sep, std::string_view what);

}  // namespace meshflow

#endif  // MESHFLOW_BASE_PARSE_H_
