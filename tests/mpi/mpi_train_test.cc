// Multi-step equality under mpirun: 20 AdamW steps of the 2-layer MLP and of the small transformer
// block of train/train_step_cases.h on the MPI world (one process per rank) under data-parallel,
// ZeRO-1, FSDP, tensor-parallel and mixed plans end with the same params and losses as one rank
// (f32: within 2e-4 absolute, losses within 1e-5), the same tolerance as the thread-rank test.
// Rank 0 computes the single-rank reference in-process (a 1-rank thread world) first.
//
//   mpirun -np 4 mpi_train_test_main      # plans on 4 ranks
//   mpirun -np 8 mpi_train_test_main      # plans on 8 ranks
//
// Prints one line per plan and "mpi train, N ranks: P passed, F failed" on rank 0; exits
// non-zero on any failure.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "meshflow/collectives/mpi/mpi_communicator.h"
#include "meshflow/train/train_step_cases.h"

namespace meshflow {
namespace {

using train_cases::Model;
using train_cases::Plan;

std::vector<Plan> MlpPlans(int n) {
  const Placement r = Replicate{}, s0 = Shard{0}, s1 = Shard{1};
  using P = Placements;
  using S = std::optional<Placements>;
  const std::vector<S> same(3);
  const int64_t nn = n;
  std::vector<Plan> plans = {
      {"mlp ddp-" + std::to_string(n), {nn}, {s0}, {{r}, {r}, {r}}, same},
      {"mlp zero1-" + std::to_string(n), {nn}, {s0}, {{r}, {r}, {r}}, {P{s0}, P{s0}, P{s0}}},
      {"mlp fsdp-" + std::to_string(n), {nn}, {s0}, {{s0}, {s0}, {s0}}, same},
      {"mlp tp-" + std::to_string(n), {nn}, {r}, {{s1}, {s0}, {s0}}, same},
  };
  if (n == 4) {
    plans.push_back({"mlp fsdp x tp 2x2", {2, 2}, {s0, r}, {{s0, s1}, {s0, s0}, {s1, s0}}, same});
  } else if (n == 8) {
    plans.push_back({"mlp dp x fsdp x tp 2x2x2", {2, 2, 2}, {s0, s0, r}, {{r, s0, s1}, {r, s0, s0}, {r, s1, s0}}, same});
  }
  return plans;
}

std::vector<Plan> TransformerPlans(int n) {
  using train_cases::TransformerPlan;
  std::vector<Plan> plans = {TransformerPlan("transformer ddp-" + std::to_string(n), {n}, {"dp"})};
  if (n == 4) {
    plans.push_back(TransformerPlan("transformer dp x tp 2x2", {2, 2}, {"dp", "tp"}));
    plans.push_back(TransformerPlan("transformer fsdp x tp 2x2", {2, 2}, {"fsdp", "tp"}));
  } else if (n == 8) {
    plans.push_back(TransformerPlan("transformer dp x fsdp x tp 2x2x2", {2, 2, 2}, {"dp", "fsdp", "tp"}));
  }
  return plans;
}

int Main() {
  auto world = MpiWorld();
  if (!world.ok()) MpiAbort(world.status());
  Communicator& comm = **world;
  const int n = comm.size();
  const bool lead = comm.rank() == 0;
  int passed = 0, failed = 0;
  for (const Model& m : {train_cases::Mlp(), train_cases::Transformer()}) {
    std::vector<Tensor> want;
    std::vector<double> want_losses;
    if (lead) {
      const Status st = train_cases::TrainOnThreads(m, train_cases::SingleRankPlan(m), 20, &want, &want_losses);
      if (!st.ok()) MpiAbort(st.WithContext("single-rank reference"));
    }
    for (const Plan& plan : m.names.size() == 3 ? MlpPlans(n) : TransformerPlans(n)) {
      std::vector<Tensor> got;
      std::vector<double> losses;
      const auto t0 = std::chrono::steady_clock::now();
      const Status st = train_cases::TrainOnRank(m, plan, 20, comm, &got, &losses);
      if (!st.ok()) MpiAbort(st.WithContext(plan.name));
      if (!lead) continue;
      const std::string diff =
          train_cases::CompareToSingle(m, want, want_losses, got, losses, /*tolerance=*/2e-4, /*loss_tolerance=*/1e-5);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (diff.empty()) {
        ++passed;
        std::printf("ok   %s (%.2f s, final loss %.6f vs %.6f)\n", plan.name.c_str(), secs, losses.back(),
                    want_losses.back());
      } else {
        ++failed;
        std::printf("FAIL %s: %s\n", plan.name.c_str(), diff.c_str());
      }
    }
  }
  if (lead) {
    std::printf("mpi train, %d ranks: %d passed, %d failed\n", n, passed, failed);
    std::fflush(stdout);
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace meshflow

int main() {
  meshflow::MpiFinalizeGuard finalize;
  return meshflow::Main();
}
