// Test helper shared by the ops tests: runs an op under given strategies on an in-process world
// and compares every result with the single-rank reference.
#ifndef MESHFLOW_RUNTIME_STRATEGY_CHECK_H_
#define MESHFLOW_RUNTIME_STRATEGY_CHECK_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <span>
#include <string>
#include <vector>

#include "meshflow/dtensor/tensor.h"
#include "meshflow/mesh/device_mesh.h"
#include "meshflow/runtime/eager.h"
#include "meshflow/ops/sharding_rule.h"

namespace meshflow::testing {

// For each strategy (forced through RunOp), on a threads world over `mesh`: distributes `globals`
// into the strategy's operand layouts, runs `op`, and checks that the result has the strategy's
// result layout and that its full tensor equals `want` (within testing::Compare's tolerance).
// Returns one message per failure (naming op, mesh, dtype of operand 0, strategy and rank).
std::vector<std::string> CheckStrategiesOnWorld(const OpSpec& op, const ShardingRule& rule,
                                                std::span<const Strategy> strategies,
                                                const std::vector<Tensor>& globals, const Tensor& want,
                                                const DeviceMesh& mesh);

}  // namespace meshflow::testing

#endif  // MESHFLOW_RUNTIME_STRATEGY_CHECK_H_
