// DTensor: one rank's view of a distributed tensor: its local buffer plus the Layout.
//
// A DTensor value lives on one rank (in the in-process world, one per thread). Functions here are
// local (no communication): `Distribute` slices a global tensor every rank already holds,
// `FromLocal` wraps a local buffer after checking its shape against the layout. Gathering
// (`FullTensor`) and `Redistribute` need a Communicator and live in runtime/redistribute.h.
//
//   MF_ASSIGN_OR_RETURN(Layout layout, Layout::Create({8, 6}, mesh, {Shard{0}, Replicate{}}));
//   MF_ASSIGN_OR_RETURN(DTensor x, Distribute(global, layout, my_rank));
//   x.local()   // this rank's rows
//
// Replicate -> Partial semantics (used by Distribute for Partial placements): for Partial(sum)
// the value is kept on group coordinate 0 of each Partial mesh dim and zeros elsewhere, so the
// sum is exact for every dtype including integers; Partial(avg/max/min) keep the value on every
// rank (avg of equal values, max and min are the value itself).
#ifndef MESHFLOW_DTENSOR_DTENSOR_H_
#define MESHFLOW_DTENSOR_DTENSOR_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include "meshflow/base/status.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/dtensor/tensor.h"

namespace meshflow {

class DTensor {
 public:
  // Errors: rank not in the layout's mesh; local shape != the rank's box shape.
  static StatusOr<DTensor> FromLocal(Tensor local, Layout layout, int rank);

  const Layout& layout() const { return layout_; }
  int rank() const { return rank_; }
  DType dtype() const { return local_.dtype(); }
  const std::vector<int64_t>& global_shape() const { return layout_.global_shape(); }
  // The global box this rank holds.
  const Box& box() const { return box_; }
  const Tensor& local() const { return local_; }
  Tensor& mutable_local() { return local_; }
  Tensor to_local() const { return local_; }

 private:
  DTensor(Tensor local, Layout layout, int rank, Box box)
      : layout_(std::move(layout)), rank_(rank), local_(std::move(local)), box_(std::move(box)) {}
  Layout layout_;
  int rank_ = 0;
  Tensor local_;
  Box box_;
};

// This rank's part of `global` under `layout` (see the Partial note above). Errors: global shape
// != layout shape; rank not in the mesh.
StatusOr<DTensor> Distribute(const Tensor& global, const Layout& layout, int rank);

// The local tensor every rank would hold for `global` under `layout`: the box slice, with the
// Replicate -> Partial rule applied. Shared by Distribute and reference checks in tests.
StatusOr<Tensor> ReferenceLocal(const Tensor& global, const Layout& layout, int rank);

}  // namespace meshflow

#endif  // MESHFLOW_DTENSOR_DTENSOR_H_
