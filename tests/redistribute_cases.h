// Shared pieces of the redistribution property tests (tests/redistribute_property_test.cc on the
// threads backend, tests/mpi/mpi_redistribute_property_test.cc under mpirun): the random case
// generator, the planning of one case and the check that one rank runs after the plan.
//
//   RedistributeCaseGenerator gen(seed, {{4}, {2, 2}});
//   const RedistributeCase c = gen.Next();
//   std::optional<PlannedCase> planned;
//   std::string failure = PlanCase(c, PlannerKind::kOptimal, &planned);
//   if (failure.empty() && planned) {
//     // on every rank of c.mesh, with that rank's RankContext:
//     StatusOr<std::string> err = CheckRank(c, *planned, ctx);  // "" when the rank's result is right
//   }
#ifndef MESHFLOW_TESTS_REDISTRIBUTE_CASES_H_
#define MESHFLOW_TESTS_REDISTRIBUTE_CASES_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/dtensor/dtensor.h"

namespace meshflow::testing {

// One random redistribution: a global tensor of `shape` and `dtype` on `mesh`, from one layout to
// another.
struct RedistributeCase {
  DeviceMesh mesh;
  std::vector<int64_t> shape;
  DType dtype;
  Placements from, to;
  ShardOrder from_order, to_order;
  // "<mesh> shape [2,3] f32 <from placements> -> <to placements>".
  std::string ToString() const;
};

// Deterministic random cases: the same seed and mesh shapes give the same sequence on every rank
// and every run. Meshes are drawn uniformly from `mesh_shapes`; tensors have rank 1..4 with dims
// 0..9 (0..5 from rank 3); placements mix Shard, Replicate and (in a third of the cases) Partial of
// one op per case; shard orders are random.
class RedistributeCaseGenerator {
 public:
  RedistributeCaseGenerator(uint32_t seed, std::vector<std::vector<int64_t>> mesh_shapes);

  RedistributeCase Next();

 private:
  int Uniform(int lo, int hi);
  std::vector<int64_t> Shape();
  Placements RandomPlacements(int mesh_ndim, int tensor_rank, ReduceOp op, bool allow_partial);
  ShardOrder RandomOrder(const Placements& p, int tensor_rank);

  std::mt19937 rng_;
  std::vector<std::vector<int64_t>> mesh_shapes_;
};

// The global tensor of a case: small integers, so that every sum/avg is exact in every dtype (bf16
// holds integers <= 256).
Tensor GlobalFor(DType dtype, const std::vector<int64_t>& shape);

// A case planned with one planner.
struct PlannedCase {
  Layout from, to;
  std::shared_ptr<const Plan> plan;
  Tensor global;
};

// Builds the layouts and plans `c` with `planner`. Returns a description of a failure ("bad generated
// layout", the optimal planner failing, plan bytes below the lower bound), or "" with *planned set,
// or "" with *planned empty when the planner refuses the case as expected (greedy with explicit
// shard orders, direct from Partial sources).
std::string PlanCase(const RedistributeCase& c, PlannerKind planner, std::optional<PlannedCase>* planned);

// Collective over ctx.world() (every rank of c.mesh calls it): distributes the global tensor,
// resets this rank's byte counters, executes the plan and checks this rank's result. Returns ""
// or the first failure ("got X want Y" for a Partial-free target that differs from ReferenceLocal,
// "received N bytes, plan models M" when the counted bytes differ from the plan's, "FullTensor
// differs: X"); an error status when a step fails.
StatusOr<std::string> CheckRank(const RedistributeCase& c, const PlannedCase& planned, RankContext& ctx);

}  // namespace meshflow::testing

#endif  // MESHFLOW_TESTS_REDISTRIBUTE_CASES_H_
