// Shared cases of the multi-step training equality tests (train/train_step_test.cc on thread
// ranks, tests/mpi/mpi_train_test.cc under mpirun): a 2-layer MLP and a small transformer block
// (causal single-head attention + layer norm + MLP, residuals) with fixed initial values and
// inputs, parallel plans as placements, and 20 AdamW steps with autograd gradients on one rank of
// any world.
//
//   const Model m = Mlp();
//   std::vector<Tensor> params;
//   std::vector<double> losses;
//   MF_RETURN_IF_ERROR(TrainOnThreads(m, SingleRankPlan(m), 20, &params, &losses));
//   // or, on each rank of an MPI world: TrainOnRank(m, plan, 20, world, &params, &losses)
#ifndef MESHFLOW_TRAIN_TRAIN_STEP_CASES_H_
#define MESHFLOW_TRAIN_TRAIN_STEP_CASES_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "meshflow/autograd/variable.h"
#include "meshflow/base/status.h"
#include "meshflow/collectives/communicator.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/dtensor/placement.h"
#include "meshflow/dtensor/tensor.h"

namespace meshflow::train_cases {

// A model: named params with initial values, fixed inputs (x, y, and constants), and the loss.
struct Model {
  std::vector<std::string> names;
  std::vector<Tensor> init;
  std::vector<Tensor> inputs;  // inputs[0] = x, inputs[1] = y (batch dim 0), then constants
  std::function<StatusOr<Variable>(const std::vector<Variable>& p, const std::vector<Variable>& in, RankContext& c)>
      loss;
};

// x [12, 8] -> w1 [8, 16] + b1, tanh, w2 [16, 4]; MSE against y [12, 4].
Model Mlp();
// x [B=4, T=4, D=8]: causal single-head attention (wq, wk, wv, wo), residual, layer norm, MLP
// (w1 [8,16], gelu, w2 [16,8]), residual; MSE against y.
Model Transformer();
// The same model with params, x and y in another float dtype (bf16: rounded).
Model InDType(Model m, DType dtype);

struct Plan {
  std::string name;
  std::vector<int64_t> mesh;
  Placements batch;                              // x and y
  std::vector<Placements> params;                // per param
  std::vector<std::optional<Placements>> state;  // per param (nullopt: the param's)
};

// Everything replicated on a 1-rank mesh.
Plan SingleRankPlan(const Model& m);
// Megatron-style placements of the transformer's params for a mesh whose dims are `dims`, each
// "dp" (replicated), "fsdp" (Shard of the first dim, or the second for row-parallel weights where
// tp shards the first) or "tp" (q/k/v and w1 column-parallel, wo and w2 row-parallel, norm
// replicated); the batch is sharded over dp and fsdp.
Plan TransformerPlan(std::string name, const std::vector<int64_t>& mesh, const std::vector<std::string>& dims);

// `steps` AdamW steps (lr 5e-3) of `m` under `plan` on this rank of `comm` (collective over a
// world of the plan's mesh size); rank 0 gets every param's full value after the last step and
// the loss of every step.
Status TrainOnRank(const Model& m, const Plan& plan, int steps, Communicator& comm, std::vector<Tensor>* out,
                   std::vector<double>* losses);
// The same on a fresh in-process world of thread ranks.
Status TrainOnThreads(const Model& m, const Plan& plan, int steps, std::vector<Tensor>* out,
                      std::vector<double>* losses);
// "" when every loss is within loss_tolerance and every param element within tolerance of the
// single-rank values; else what differs.
std::string CompareToSingle(const Model& m, const std::vector<Tensor>& want, const std::vector<double>& want_losses,
                            const std::vector<Tensor>& got, const std::vector<double>& losses, double tolerance,
                            double loss_tolerance);

}  // namespace meshflow::train_cases

#endif  // MESHFLOW_TRAIN_TRAIN_STEP_CASES_H_
