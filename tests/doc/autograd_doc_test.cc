// Every example in autograd/variable.h, autograd/functions.h and autograd/vjp.h is compiled
// here; keep them identical.
#include <optional>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/autograd/functions.h"
#include "meshflow/autograd/variable.h"
#include "meshflow/autograd/vjp.h"
#include "meshflow/base/status.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/mesh/device_mesh.h"

namespace meshflow {
namespace {

Tensor Values(std::vector<int64_t> shape, int seed) {
  Tensor t = Tensor::Zeros(DType::kF32, std::move(shape));
  for (int64_t i = 0; i < t.NumElements(); ++i) t.SetFromDouble(i, 0.1 * static_cast<double>((i + seed) % 7) - 0.3);
  return t;
}

// autograd/variable.h
Status VariableExample(const DTensor& w_dtensor, const DTensor& x_dtensor, RankContext& ctx, Tensor* dw_full) {
  MF_ASSIGN_OR_RETURN(Variable w, Variable::Leaf(w_dtensor, /*requires_grad=*/true));
  MF_ASSIGN_OR_RETURN(Variable x, Variable::Leaf(x_dtensor, /*requires_grad=*/false));
  MF_ASSIGN_OR_RETURN(Variable h, autograd::Matmul(x, w, ctx));
  MF_ASSIGN_OR_RETURN(Variable loss, autograd::Mean(h, {}, false, ctx));
  MF_RETURN_IF_ERROR(Backward(loss, ctx));
  const DTensor& dw = *w.grad();  // same global values as the single-rank gradient
  MF_ASSIGN_OR_RETURN(*dw_full, FullTensor(dw, ctx));
  return Status::Ok();
}

// autograd/functions.h
Status FunctionsExample(const Variable& x, const Variable& w1, const Variable& w2, const Variable& targets,
                        RankContext& ctx) {
  MF_ASSIGN_OR_RETURN(Variable h, autograd::Matmul(x, w1, ctx));
  MF_ASSIGN_OR_RETURN(Variable a, autograd::Gelu(h, ctx));
  MF_ASSIGN_OR_RETURN(Variable logits, autograd::Matmul(a, w2, ctx));
  MF_ASSIGN_OR_RETURN(Variable loss, autograd::CrossEntropy(logits, targets, LossReduction::kMean, ctx));
  return Backward(loss, ctx);
}

// autograd/vjp.h
Status VjpExample(const DTensor& x, const DTensor& w, const DTensor& y, const DTensor& dy, RankContext& ctx) {
  const DTensor* in[2] = {&x, &w};
  MF_ASSIGN_OR_RETURN(std::vector<std::optional<DTensor>> g,
                      Vjp(OpSpec::Matmul(), in, y, dy, ctx));  // g[0] = dy w^T, g[1] = x^T dy
  if (g.size() != 2 || !g[0] || !g[1]) return InternalError("expected two gradients");
  return Status::Ok();
}

TEST(AutogradDocTest, Examples) {
  auto world = ThreadWorld::Create(2);
  ASSERT_TRUE(world.ok());
  const DeviceMesh mesh = *DeviceMesh::Create({2}, {"dp"});
  const Tensor x = Values({4, 3}, 1), w = Values({3, 2}, 2);
  Tensor dw[2] = {Tensor::Zeros(DType::kF32, {}), Tensor::Zeros(DType::kF32, {})};
  const Status st = (*world)->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    const int rank = comm.rank();
    MF_ASSIGN_OR_RETURN(DTensor xd, Distribute(x, *Layout::Create({4, 3}, mesh, {Shard{0}}), rank));
    MF_ASSIGN_OR_RETURN(DTensor wd, Distribute(w, *Layout::Create({3, 2}, mesh, {Replicate{}}), rank));
    MF_RETURN_IF_ERROR(VariableExample(wd, xd, ctx, &dw[rank]));
    MF_ASSIGN_OR_RETURN(Variable xv, Variable::Leaf(xd, false));
    MF_ASSIGN_OR_RETURN(Variable w1, Variable::Leaf(wd, true));
    MF_ASSIGN_OR_RETURN(DTensor w2d, Distribute(Values({2, 5}, 3), *Layout::Create({2, 5}, mesh, {Replicate{}}), rank));
    MF_ASSIGN_OR_RETURN(Variable w2, Variable::Leaf(w2d, true));
    Tensor t = Tensor::Zeros(DType::kI64, {4});
    for (int64_t i = 0; i < 4; ++i) t.SetFromDouble(i, static_cast<double>(i));
    MF_ASSIGN_OR_RETURN(DTensor td, Distribute(t, *Layout::Create({4}, mesh, {Shard{0}}), rank));
    MF_ASSIGN_OR_RETURN(Variable tv, Variable::Leaf(td, false));
    MF_RETURN_IF_ERROR(FunctionsExample(xv, w1, w2, tv, ctx));
    if (!w1.grad() || !w2.grad()) return InternalError("missing gradients");
    MF_ASSIGN_OR_RETURN(DTensor y, Matmul(xd, wd, ctx));
    return VjpExample(xd, wd, y, y, ctx);
  });
  ASSERT_TRUE(st.ok()) << st;
  // d mean(x w) / dw = column sums of x / (4 * 2), the same on both ranks.
  for (int64_t k = 0; k < 3; ++k) {
    double col = 0;
    for (int64_t i = 0; i < 4; ++i) col += x.GetAsDouble(i * 3 + k);
    for (int64_t j = 0; j < 2; ++j) {
      EXPECT_NEAR(dw[0].GetAsDouble(k * 2 + j), col / 8, 1e-6);
      EXPECT_EQ(dw[0].GetAsDouble(k * 2 + j), dw[1].GetAsDouble(k * 2 + j));
    }
  }
}

}  // namespace
}  // namespace meshflow
