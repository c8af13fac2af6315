#include "meshflow/optim/clip.h"

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "meshflow/base/strings.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/placement.h"
#include "meshflow/optim/device_math.h"
#include "meshflow/runtime/device_copy.h"
#include "meshflow/runtime/redistribute.h"

namespace meshflow {
namespace {

Placements WithoutPartial(const Placements& ps) {
  Placements out = ps;
  for (Placement& p : out) {
    if (IsPartial(p)) p = Replicate{};
  }
  return out;
}

// Sum of squares (in double) of the elements this rank owns of a DTensor without Partial
// placements: all of its local elements when it sits at coordinate 0 of every Replicate mesh dim,
// none otherwise (Shard boxes are disjoint, so every global element is owned exactly once).
StatusOr<double> OwnedSumOfSquares(const DTensor& x, RankContext& ctx) {
  const Layout& layout = x.layout();
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> coord, layout.mesh().Coordinate(x.rank()));
  for (int d = 0; d < layout.mesh().ndim(); ++d) {
    if (IsReplicate(layout.placement(d)) && coord[static_cast<size_t>(d)] != 0) return 0.0;
  }
  if (!x.local().is_host()) return optim_internal::SumOfSquaresOnDevice(x.local(), ctx.compute_stream_ptr());
  double sum = 0;
  VisitDType(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, BFloat16>) {
      for (BFloat16 v : x.local().data<BFloat16>()) {
        const double d = static_cast<double>(static_cast<float>(v));
        sum += d * d;
      }
    } else if constexpr (std::is_floating_point_v<T>) {
      for (T v : x.local().data<T>()) {
        const double d = static_cast<double>(v);
        sum += d * d;
      }
    }
  });
  return sum;
}

// Sum over the mesh of one double per rank, the same bits on every rank (Partial(sum) scalar,
// gathered by FullTensor: a rank-order reduction).
StatusOr<double> MeshSum(double mine, RankContext& ctx) {
  const DeviceMesh& mesh = ctx.mesh();
  Placements partial(static_cast<size_t>(mesh.ndim()), Partial{ReduceOp::kSum});
  MF_ASSIGN_OR_RETURN(Layout layout, Layout::Create({1}, mesh, std::move(partial)));
  MF_ASSIGN_OR_RETURN(Tensor local, Tensor::FromVector<double>({1}, {mine}));
  MF_ASSIGN_OR_RETURN(local, OnRankDevice(std::move(local), ctx));
  MF_ASSIGN_OR_RETURN(DTensor scalar, DTensor::FromLocal(std::move(local), layout, ctx.world_rank()));
  MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(scalar, ctx));
  MF_ASSIGN_OR_RETURN(full, OnHost(std::move(full)));
  return full.data<double>()[0];
}

Status CheckGradForNorm(const DTensor* g, size_t i, const DeviceMesh& mesh) {
  if (g == nullptr) return InvalidArgumentError("ClipGradNorm: gradient " + std::to_string(i) + " is null");
  if (!IsFloatDType(g->dtype())) {
    return InvalidArgumentError("ClipGradNorm: gradient " + std::to_string(i) + " has dtype " +
                                std::string(DTypeName(g->dtype())) + "; gradients must be f32, f64 or bf16");
  }
  if (!(g->layout().mesh() == mesh)) {
    return InvalidArgumentError("ClipGradNorm: gradient " + std::to_string(i) + " is on mesh " +
                                g->layout().mesh().ToString() + " but the communicators are for mesh " +
                                mesh.ToString());
  }
  return Status::Ok();
}

// Norm of gradients already checked by CheckGradForNorm.
StatusOr<double> NormOf(std::span<const DTensor* const> grads, RankContext& ctx) {
  double mine = 0;
  for (const DTensor* g : grads) {
    if (g->layout().HasPartial()) {
      MF_ASSIGN_OR_RETURN(Layout reduced, g->layout().WithPlacements(WithoutPartial(g->layout().placements()),
                                                                     g->layout().shard_order()));
      MF_ASSIGN_OR_RETURN(DTensor r, Redistribute(*g, reduced, ctx));
      MF_ASSIGN_OR_RETURN(double s, OwnedSumOfSquares(r, ctx));
      mine += s;
    } else {
      MF_ASSIGN_OR_RETURN(double s, OwnedSumOfSquares(*g, ctx));
      mine += s;
    }
  }
  MF_ASSIGN_OR_RETURN(double total, MeshSum(mine, ctx));
  return std::sqrt(total);
}

Status ScaleLocal(Tensor& t, double coef, RankContext& ctx) {
  if (!t.is_host()) return optim_internal::ScaleOnDevice(t, coef, ctx.compute_stream_ptr());
  VisitDType(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, BFloat16>) {
      const float c = static_cast<float>(coef);
      for (BFloat16& v : t.data<BFloat16>()) v = BFloat16(static_cast<float>(v) * c);
    } else if constexpr (std::is_floating_point_v<T>) {
      const T c = static_cast<T>(coef);
      for (T& v : t.data<T>()) v *= c;
    }
  });
  return Status::Ok();
}

// clip_grad_norm_'s coefficient: max_norm / (total + 1e-6), applied when < 1.
Status ApplyClip(std::span<DTensor* const> grads, double total, double max_norm, RankContext& ctx) {
  const double coef = max_norm / (total + 1e-6);
  if (!(coef < 1)) return Status::Ok();
  for (DTensor* g : grads) MF_RETURN_IF_ERROR(ScaleLocal(g->mutable_local(), coef, ctx));
  return Status::Ok();
}

}  // namespace

Status CheckMaxGradNorm(double max_norm) {
  if (std::isnan(max_norm) || max_norm < 0) {
    return InvalidArgumentError("max_norm " + DoubleString(max_norm) + " must be >= 0");
  }
  return Status::Ok();
}

StatusOr<double> GlobalGradNorm(std::span<const DTensor* const> grads, RankContext& ctx) {
  for (size_t i = 0; i < grads.size(); ++i) MF_RETURN_IF_ERROR(CheckGradForNorm(grads[i], i, ctx.mesh()));
  return NormOf(grads, ctx);
}

StatusOr<double> ClipGradNorm(std::span<DTensor* const> grads, double max_norm, RankContext& ctx) {
  MF_RETURN_IF_ERROR(CheckMaxGradNorm(max_norm));
  std::vector<const DTensor*> cgrads(grads.begin(), grads.end());
  for (size_t i = 0; i < grads.size(); ++i) MF_RETURN_IF_ERROR(CheckGradForNorm(grads[i], i, ctx.mesh()));
  MF_ASSIGN_OR_RETURN(double total, NormOf(cgrads, ctx));
  MF_RETURN_IF_ERROR(ApplyClip(grads, total, max_norm, ctx));
  return total;
}

}  // namespace meshflow
