// The RuleBuilder example of ops/sharding_rule.h (the header's other examples: ops_doc_test.cc),
// compiled and run here; keep it identical to the header comment.
#include <cstdint>
#include <optional>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/base/status.h"
#include "meshflow/ops/sharding_rule.h"

namespace meshflow {
namespace {

Status RuleBuilderExample() {
  MF_ASSIGN_OR_RETURN(ShardingRule rule,
                      RuleBuilder("matmul", {2, 2}, {5, 3})
                          .AddFactor("m", 5, FactorKind::kPassThrough, {0, kNoDim}, 0)
                          .AddFactor("k", 7, FactorKind::kContracting, {1, 0}, kNoDim)
                          .AddFactor("n", 3, FactorKind::kPassThrough, {kNoDim, 1}, 1)
                          .AddPartialRule({{ReduceOp::kSum, std::nullopt}, ReduceOp::kSum})
                          .AddPartialRule({{std::nullopt, ReduceOp::kSum}, ReduceOp::kSum})
                          .Build());
  // rule == *MatmulRule(std::vector<int64_t>{5, 7}, std::vector<int64_t>{7, 3})

  EXPECT_EQ(rule, *MatmulRule(std::vector<int64_t>{5, 7}, std::vector<int64_t>{7, 3}));
  return Status::Ok();
}

TEST(RuleBuilderDocTest, Matmul) { EXPECT_EQ(RuleBuilderExample(), Status::Ok()); }

}  // namespace
}  // namespace meshflow
