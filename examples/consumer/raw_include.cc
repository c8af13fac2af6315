// Must NOT compile: it includes a meshflow header by its path without the "meshflow/" prefix.
// .ci/run builds it and expects MESHFLOW_CHECK_INCLUDE_PATH's message (base/include_check.h).
#include "planner/search.h"
