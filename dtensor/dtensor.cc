#include "meshflow/dtensor/dtensor.h"

#include <sstream>

namespace meshflow {
namespace {

std::string ShapeString(std::span<const int64_t> s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? "," : "") << s[i];
  os << "]";
  return os.str();
}

}  // namespace

StatusOr<DTensor> DTensor::FromLocal(Tensor local, Layout layout, int rank) {
  MF_ASSIGN_OR_RETURN(Box box, layout.LocalBox(rank));
  if (local.shape() != box.shape) {
    return InvalidArgumentError("FromLocal: rank " + std::to_string(rank) + " passed a local tensor of shape " +
                                ShapeString(local.shape()) + " but layout " + layout.ToString() +
                                " gives it box " + box.ToString() + " of shape " + ShapeString(box.shape));
  }
  return DTensor(std::move(local), std::move(layout), rank, std::move(box));
}

StatusOr<Tensor> ReferenceLocal(const Tensor& global, const Layout& layout, int rank) {
  if (global.shape() != layout.global_shape()) {
    return InvalidArgumentError("global tensor has shape " + ShapeString(global.shape()) + " but layout " +
                                layout.ToString() + " expects " + ShapeString(layout.global_shape()));
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
