#include "meshflow/dtensor/dtensor.h"

#include "meshflow/base/strings.h"

namespace meshflow {
namespace {

}  // namespace

StatusOr<DTensor> DTensor::FromLocal(Tensor local, Layout layout, int rank) {
  MF_ASSIGN_OR_RETURN(Box box, layout.LocalBox(rank));
  if (local.shape() != box.shape) {
    return InvalidArgumentError("FromLocal: rank " + std::to_string(rank) + " passed a local tensor of shape " +
                                ListString(local.shape()) + " but layout " + layout.ToString() +
                                " gives it box " + box.ToString() + " of shape " + ListString(box.shape));
  }
  return DTensor(std::move(local), std::move(layout), rank, std::move(box));
}

StatusOr<Tensor> ReferenceLocal(const Tensor& global, const Layout& layout, int rank) {
  if (global.shape() != layout.global_shape()) {
    return InvalidArgumentError("global tensor has shape " + ListString(global.shape()) + " but layout " +
                                layout.ToString() + " expects " + ListString(layout.global_shape()));
  }
  MF_ASSIGN_OR_RETURN(Box box, layout.LocalBox(rank));
  Tensor local = global.Slice(box);
  if (layout.partial_op() == ReduceOp::kSum) {
    MF_ASSIGN_OR_RETURN(std::vector<int64_t> coord, layout.mesh().Coordinate(rank));
    for (int m = 0; m < layout.mesh().ndim(); ++m) {
      if (IsPartial(layout.placement(m)) && coord[m] != 0) {
        return Tensor::Zeros(local.dtype(), local.shape());
      }
    }
  }
  return local;
}

StatusOr<DTensor> Distribute(const Tensor& global, const Layout& layout, int rank) {
  MF_ASSIGN_OR_RETURN(Tensor local, ReferenceLocal(global, layout, rank));
  return DTensor::FromLocal(std::move(local), layout, rank);
}

}  // namespace meshflow
