#include "meshflow/runtime/device_copy.h"

#include <utility>

namespace meshflow {

StatusOr<Tensor> OnRankDevice(Tensor x, const RankContext& ctx) {
  if (x.device() == ctx.device()) return x;
  if (!x.is_host()) {
    return InvalidArgumentError("OnRankDevice: a tensor on " + x.device().ToString() + " for a rank on " +
                                ctx.device().ToString());
  }
  return x.CopyTo(ctx.device(), ctx.compute_stream_ptr());
}

StatusOr<DTensor> OnRankDevice(DTensor x, const RankContext& ctx) {
  if (x.local().device() == ctx.device()) return x;
  MF_ASSIGN_OR_RETURN(Tensor local, OnRankDevice(std::move(x.mutable_local()), ctx));
  return DTensor::FromLocal(std::move(local), x.layout(), x.rank());
}

StatusOr<Tensor> OnHost(Tensor x) {
  if (x.is_host()) return x;
  return x.ToHost();
}

StatusOr<DTensor> OnHost(DTensor x) {
  if (x.local().is_host()) return x;
  MF_ASSIGN_OR_RETURN(Tensor local, x.local().ToHost());
  return DTensor::FromLocal(std::move(local), x.layout(), x.rank());
}

}  // namespace meshflow
