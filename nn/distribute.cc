#include "meshflow/nn/distribute.h"

#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "meshflow/ops/shape_util.h"
#include "meshflow/runtime/device_copy.h"

namespace meshflow::nn {
namespace {

constexpr int kMaxHeaderDims = 8;
constexpr int64_t kOk = 0, kNull = 1, kBadShape = 2;

}  // namespace

StatusOr<DTensor> Distribute(const Tensor& global, const Layout& layout, const RankContext& ctx) {
  MF_ASSIGN_OR_RETURN(DTensor d, meshflow::Distribute(global, layout, ctx.world_rank()));
  return OnRankDevice(std::move(d), ctx);
}

namespace {

// DistributeFrom's body, as communication work (on the context's communication stream).
StatusOr<DTensor> DistributeFromInWork(const Tensor* global, const Layout& layout, int src_rank, RankContext& ctx) {
  const DeviceMesh& mesh = layout.mesh();
  if (!(mesh == ctx.mesh())) {
    return InvalidArgumentError("DistributeFrom: layout is on mesh " + mesh.ToString() +
                                " but the communicators are for mesh " + ctx.mesh().ToString());
  }
  if (!mesh.Contains(src_rank)) {
    return InvalidArgumentError("DistributeFrom: src_rank " + std::to_string(src_rank) + " is not a rank of mesh " +
                                mesh.ToString());
  }
  MF_ASSIGN_OR_RETURN(const int src_index, mesh.IndexOf(src_rank));
  const int me = ctx.world_rank();
  std::vector<int> dims(static_cast<size_t>(mesh.ndim()));
  std::iota(dims.begin(), dims.end(), 0);
  MF_ASSIGN_OR_RETURN(Communicator * group, ctx.Group(dims));

  // 1. The header: src's check and the dtype (and src's shape for the message).
  std::vector<int64_t> header(3 + kMaxHeaderDims, 0);
  if (me == src_rank) {
    if (global == nullptr) {
      header[0] = kNull;
    } else {
      header[1] = static_cast<int64_t>(global->dtype());
      header[2] = global->rank();
      for (int i = 0; i < global->rank() && i < kMaxHeaderDims; ++i) header[3 + static_cast<size_t>(i)] = global->shape()[static_cast<size_t>(i)];
      header[0] = global->shape() == layout.global_shape() ? kOk : kBadShape;
    }
  }
  MF_RETURN_IF_ERROR(group->Broadcast(header.data(), static_cast<int64_t>(header.size()), DType::kI64, src_index));
  if (header[0] == kNull) {
    return InvalidArgumentError("DistributeFrom: the global tensor on src_rank " + std::to_string(src_rank) + " is null");
  }
  if (header[0] == kBadShape) {
    std::string shape = "a rank-" + std::to_string(header[2]) + " tensor";
    if (header[2] <= kMaxHeaderDims) {
      shape = ShapeString(std::vector<int64_t>(header.begin() + 3, header.begin() + 3 + header[2]));
    }
    return InvalidArgumentError("DistributeFrom: the global tensor on src_rank " + std::to_string(src_rank) +
                                " has shape " + shape + " but the layout has shape " +
                                ShapeString(layout.global_shape()));
  }
  const DType dtype = static_cast<DType>(header[1]);

  // 2. The data.
  MF_ASSIGN_OR_RETURN(const Box box, layout.LocalBox(me));
  if (layout.IsFullyReplicated()) {
    Tensor full = me == src_rank ? *global : Tensor::Zeros(dtype, layout.global_shape());
    MF_RETURN_IF_ERROR(group->Broadcast(full.raw(), full.NumElements(), dtype, src_index));
    return DTensor::FromLocal(std::move(full), layout, me);
  }
  if (me == src_rank) {
    std::vector<Tensor> parts;
    std::vector<SendSpec> sends;
    parts.reserve(static_cast<size_t>(mesh.size()));
    for (int i = 0; i < mesh.size(); ++i) {
      if (i == src_index) continue;
      MF_ASSIGN_OR_RETURN(Tensor part, ReferenceLocal(*global, layout, mesh.rank(i)));
      if (part.NumElements() == 0) continue;
      parts.push_back(std::move(part));
      sends.push_back(SendSpec{i, parts.back().raw(), parts.back().NumElements()});
    }
    MF_RETURN_IF_ERROR(group->SendRecv(sends, {}, dtype));
    return meshflow::Distribute(*global, layout, me);
  }
  Tensor local = Tensor::Zeros(dtype, box.shape);
  if (local.NumElements() > 0) {
    const RecvSpec recv{src_index, local.raw(), local.NumElements()};
    MF_RETURN_IF_ERROR(group->SendRecv({}, std::span<const RecvSpec>(&recv, 1), dtype));
  }
  return DTensor::FromLocal(std::move(local), layout, me);
}

}  // namespace

StatusOr<DTensor> DistributeFrom(const Tensor* global, const Layout& layout, int src_rank, RankContext& ctx) {
  std::optional<StatusOr<DTensor>> result;
  MF_RETURN_IF_ERROR(ctx.RunCollective(
      [&]() -> Status {
        result = DistributeFromInWork(global, layout, src_rank, ctx);
        return Status::Ok();
      },
      "distribute_from"));
  MF_ASSIGN_OR_RETURN(DTensor d, std::move(*result));
  return OnRankDevice(std::move(d), ctx);  // staged through the host, kept on the rank's device
}

}  // namespace meshflow::nn
