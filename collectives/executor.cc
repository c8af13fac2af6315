#include "meshflow/collectives/executor.h"

#include <algorithm>
#include <sstream>

#include "meshflow/planner/direct.h"

namespace meshflow {
namespace {

std::vector<int64_t> Sub(std::span<const int64_t> a, std::span<const int64_t> b) {
  std::vector<int64_t> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] - b[i];
  return out;
}

// Copies the part `piece` (global coordinates, inside `box`) of `t`, whose global box is `box`,
// to `dst` as a dense row-major block. Returns the bytes written.
int64_t PackPiece(const Tensor& t, const Box& box, const Box& piece, std::byte* dst) {
  const std::vector<int64_t> zero(piece.shape.size(), 0);
  CopyRegion(t.raw(), t.shape(), Sub(piece.offset, box.offset), dst, piece.shape, zero, piece.shape,
             DTypeSize(t.dtype()));
  return piece.NumElements() * DTypeSize(t.dtype());
}

// Writes the dense block at `src` (shape piece.shape) into `out`, whose global box is `out_box`.
void UnpackPiece(const std::byte* src, const Box& piece, Tensor& out, const Box& out_box) {
  const std::vector<int64_t> zero(piece.shape.size(), 0);
  CopyRegion(src, piece.shape, zero, out.raw(), out.shape(), Sub(piece.offset, out_box.offset), piece.shape,
             DTypeSize(out.dtype()));
}

// Bytes of the blocks `pieces` packed back to back.
int64_t PackedBytes(std::span<const Box> pieces, DType dtype) {
  int64_t n = 0;
  for (const Box& b : pieces) n += b.NumElements();
  return n * DTypeSize(dtype);
}

// The row-major element offset of `piece` inside `outer` when the piece is one contiguous run of
// it (then it can be sent from / received into `outer`'s buffer directly), else -1.
int64_t ContiguousOffset(const Box& piece, const Box& outer) {
  int d = 0;
  while (d < piece.rank() && piece.shape[d] == 1) ++d;
  for (int e = d + 1; e < piece.rank(); ++e) {
    if (piece.shape[e] != outer.shape[e]) return -1;
  }
  int64_t flat = 0;
  for (int e = 0; e < piece.rank(); ++e) flat = flat * outer.shape[e] + (piece.offset[e] - outer.offset[e]);
  return flat;
}

// True when every block is a contiguous run of `outer` (row-major) and the runs follow each
// other in block order with no gap: then the blocks, concatenated, are exactly `outer`'s buffer.
bool BlocksTileInOrder(std::span<const Box> blocks, const Box& outer) {
  int64_t next = 0;
  for (const Box& b : blocks) {
    if (b.empty()) continue;
    if (ContiguousOffset(b, outer) != next) return false;
    next += b.NumElements();
  }
  return next == outer.NumElements();
}

struct GroupInfo {
  Communicator* comm = nullptr;
  std::vector<int> members;  // world ranks, group order
  int me = 0;                // position of this rank
};

StatusOr<GroupInfo> GetGroup(MeshComms& comms, std::span<const int> dims) {
  GroupInfo g;
  MF_ASSIGN_OR_RETURN(g.comm, comms.Group(dims));
  g.members = g.comm->world_ranks();
  g.me = g.comm->rank();
  return g;
}

Status CheckLocal(const Layout& layout, int rank, const Tensor& local, const char* what) {
  MF_ASSIGN_OR_RETURN(Box box, layout.LocalBox(rank));
  if (local.shape() != box.shape) {
    std::ostringstream os;
    os << what << ": rank " << rank << " holds a local tensor of shape [";
    for (size_t i = 0; i < local.shape().size(); ++i) os << (i ? "," : "") << local.shape()[i];
    os << "] but " << layout.ToString() << " gives it box " << box.ToString();
    return InvalidArgumentError(os.str());
  }
  return Status();
}

Status RunAllGather(const PlanStep& step, MeshComms& comms, Tensor& local, int rank) {
  MF_ASSIGN_OR_RETURN(GroupInfo g, GetGroup(comms, step.mesh_dims));
  MF_ASSIGN_OR_RETURN(Box to_box, step.to.LocalBox(rank));
  std::vector<Box> from_boxes;
  std::vector<int64_t> counts;
  for (int q : g.members) {
    MF_ASSIGN_OR_RETURN(Box b, step.from.LocalBox(q));
    counts.push_back(b.NumElements());
    from_boxes.push_back(std::move(b));
  }
  for (size_t q = 0; q < g.members.size(); ++q) {
    const Box& b = from_boxes[q];
    if (!b.empty() && !(Intersect(b, to_box) == b)) {
      return InternalError("all_gather: block " + b.ToString() + " of rank " + std::to_string(g.members[q]) +
                           " is not inside the target box " + to_box.ToString());
    }
  }
  Tensor out = Tensor::Zeros(local.dtype(), to_box.shape);
  if (BlocksTileInOrder(from_boxes, to_box)) {
    // The blocks lie back to back in the output (e.g. gathering the outermost dim): receive in place.
    MF_RETURN_IF_ERROR(g.comm->AllGatherV(local.raw(), local.NumElements(), out.raw(), counts, local.dtype()));
    local = std::move(out);
    return Status();
  }
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  std::vector<std::byte> recv(static_cast<size_t>(total * DTypeSize(local.dtype())));
  MF_RETURN_IF_ERROR(g.comm->AllGatherV(local.raw(), local.NumElements(), recv.data(), counts, local.dtype()));
  int64_t pos = 0;
  for (size_t q = 0; q < g.members.size(); ++q) {
    if (!from_boxes[q].empty()) UnpackPiece(recv.data() + pos, from_boxes[q], out, to_box);
    pos += counts[q] * DTypeSize(local.dtype());
  }
  local = std::move(out);
  return Status();
}

Status RunAllReduce(const PlanStep& step, MeshComms& comms, Tensor& local) {
  MF_ASSIGN_OR_RETURN(GroupInfo g, GetGroup(comms, step.mesh_dims));
  const std::optional<ReduceOp> op = step.from.partial_op();
  if (!op) return InternalError("all_reduce step from a layout without Partial: " + step.from.ToString());
  return g.comm->AllReduce(local.raw(), local.raw(), local.NumElements(), local.dtype(), *op);
}

Status RunReduceScatter(const PlanStep& step, MeshComms& comms, Tensor& local, int rank) {
  MF_ASSIGN_OR_RETURN(GroupInfo g, GetGroup(comms, step.mesh_dims));
  const std::optional<ReduceOp> op = step.from.partial_op();
  if (!op) return InternalError("reduce_scatter step from a layout without Partial: " + step.from.ToString());
  MF_ASSIGN_OR_RETURN(Box from_box, step.from.LocalBox(rank));
  MF_ASSIGN_OR_RETURN(Box to_box, step.to.LocalBox(rank));
  std::vector<Box> pieces;
  std::vector<int64_t> counts;
  for (int q : g.members) {
    MF_ASSIGN_OR_RETURN(Box tq, step.to.LocalBox(q));
    Box piece = Intersect(from_box, tq);
    if (!(piece == tq)) {
      return InternalError("reduce_scatter: target box " + tq.ToString() + " of rank " + std::to_string(q) +
                           " is not inside the source box " + from_box.ToString());
    }
    counts.push_back(piece.NumElements());
    pieces.push_back(std::move(piece));
  }
  std::vector<std::byte> send(static_cast<size_t>(PackedBytes(pieces, local.dtype())));
  int64_t pos = 0;
  for (const Box& piece : pieces) pos += PackPiece(local, from_box, piece, send.data() + pos);
  Tensor out = Tensor::Zeros(local.dtype(), to_box.shape);
  MF_RETURN_IF_ERROR(g.comm->ReduceScatterV(send.data(), counts, out.raw(), local.dtype(), *op));
  local = std::move(out);
  return Status();
}

Status RunAllToAll(const PlanStep& step, MeshComms& comms, Tensor& local, int rank) {
  MF_ASSIGN_OR_RETURN(GroupInfo g, GetGroup(comms, step.mesh_dims));
  MF_ASSIGN_OR_RETURN(Box from_box, step.from.LocalBox(rank));
  MF_ASSIGN_OR_RETURN(Box to_box, step.to.LocalBox(rank));
  std::vector<int64_t> send_counts, recv_counts;
  std::vector<Box> send_pieces, recv_pieces;
  for (int q : g.members) {
    MF_ASSIGN_OR_RETURN(Box tq, step.to.LocalBox(q));
    MF_ASSIGN_OR_RETURN(Box fq, step.from.LocalBox(q));
    Box out_piece = Intersect(from_box, tq);
    send_counts.push_back(out_piece.NumElements());
    send_pieces.push_back(std::move(out_piece));
    Box in_piece = Intersect(fq, to_box);
    recv_counts.push_back(in_piece.NumElements());
    recv_pieces.push_back(std::move(in_piece));
  }
  std::vector<std::byte> send(static_cast<size_t>(PackedBytes(send_pieces, local.dtype())));
  {
    int64_t spos = 0;
    for (const Box& piece : send_pieces) {
      if (!piece.empty()) spos += PackPiece(local, from_box, piece, send.data() + spos);
    }
  }
  int64_t total = 0;
  for (int64_t c : recv_counts) total += c;
  std::vector<std::byte> recv(static_cast<size_t>(total * DTypeSize(local.dtype())));
  MF_RETURN_IF_ERROR(g.comm->AllToAllV(send.data(), send_counts, recv.data(), recv_counts, local.dtype()));
  Tensor out = Tensor::Zeros(local.dtype(), to_box.shape);
  int64_t pos = 0, covered = 0;
  for (size_t q = 0; q < recv_pieces.size(); ++q) {
    const Box& p = recv_pieces[q];
    if (!p.empty()) UnpackPiece(recv.data() + pos, p, out, to_box);
    pos += recv_counts[q] * DTypeSize(local.dtype());
    covered += recv_counts[q];
  }
  if (covered != to_box.NumElements()) {
    return InternalError("all_to_all: group pieces cover " + std::to_string(covered) + " of the " +
                         std::to_string(to_box.NumElements()) + " elements of target box " + to_box.ToString());
  }
  local = std::move(out);
  return Status();
}

Status RunLocalSlice(const PlanStep& step, Tensor& local, int rank) {
  MF_ASSIGN_OR_RETURN(Box from_box, step.from.LocalBox(rank));
  MF_ASSIGN_OR_RETURN(Box to_box, step.to.LocalBox(rank));
  if (!(Intersect(from_box, to_box) == to_box) && !to_box.empty()) {
    return InternalError("local_slice: target box " + to_box.ToString() + " is not inside source box " +
                         from_box.ToString());
  }
  local = to_box.empty() ? Tensor::Zeros(local.dtype(), to_box.shape)
                         : local.Slice(Box{Sub(to_box.offset, from_box.offset), to_box.shape});
  return Status();
}

Status RunLocalPartial(const PlanStep& step, Tensor& local, int rank) {
  const std::optional<ReduceOp> op = step.to.partial_op();
  if (!op) return InternalError("local_partial step to a layout without Partial: " + step.to.ToString());
  if (*op != ReduceOp::kSum) return Status();  // avg/max/min keep the value
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> coord, step.to.mesh().Coordinate(rank));
  for (int m : step.mesh_dims) {
    if (coord[m] != 0) {
      local = Tensor::Zeros(local.dtype(), local.shape());
      return Status();
    }
  }
  return Status();
}

Status RunSendRecv(const PlanStep& step, MeshComms& comms, Tensor& local, int rank) {
  const DeviceMesh& mesh = step.from.mesh();
  std::vector<int> all_dims(static_cast<size_t>(mesh.ndim()));
  for (int d = 0; d < mesh.ndim(); ++d) all_dims[d] = d;
  MF_ASSIGN_OR_RETURN(GroupInfo g, GetGroup(comms, all_dims));
  MF_ASSIGN_OR_RETURN(std::vector<Transfer> transfers, DirectTransfers(step.from, step.to));
  MF_ASSIGN_OR_RETURN(Box from_box, step.from.LocalBox(rank));
  MF_ASSIGN_OR_RETURN(Box to_box, step.to.LocalBox(rank));
  auto peer_of = [&](int world_rank) {
    return static_cast<int>(std::find(g.members.begin(), g.members.end(), world_rank) - g.members.begin());
  };
  // Contiguous pieces go straight from `local` / into `out`; the others through packed temporaries.
  const int64_t es = DTypeSize(local.dtype());
  Tensor out = Tensor::Zeros(local.dtype(), to_box.shape);
  std::vector<Tensor> temps;  // send slices and receive buffers of non-contiguous pieces
  temps.reserve(transfers.size());
  std::vector<std::pair<size_t, Box>> unpack;  // (temps index, piece) received into a temporary
  std::vector<SendSpec> sends;
  std::vector<RecvSpec> recvs;
  for (const Transfer& t : transfers) {
    if (t.src_rank == rank) {
      const void* buf = nullptr;
      if (const int64_t off = ContiguousOffset(t.box, from_box); off >= 0) {
        buf = local.raw() + off * es;
      } else {
        temps.push_back(local.Slice(Box{Sub(t.box.offset, from_box.offset), t.box.shape}));
        buf = temps.back().raw();
      }
      sends.push_back(SendSpec{peer_of(t.dst_rank), buf, t.box.NumElements()});
    }
    if (t.dst_rank == rank) {
      void* buf = nullptr;
      if (const int64_t off = ContiguousOffset(t.box, to_box); off >= 0) {
        buf = out.raw() + off * es;
      } else {
        temps.push_back(Tensor::Zeros(local.dtype(), t.box.shape));
        unpack.emplace_back(temps.size() - 1, t.box);
        buf = temps.back().raw();
      }
      recvs.push_back(RecvSpec{peer_of(t.src_rank), buf, t.box.NumElements()});
    }
  }
  MF_RETURN_IF_ERROR(g.comm->SendRecv(sends, recvs, local.dtype()));
  Box kept = Intersect(from_box, to_box);
  if (!kept.empty()) {
    CopyRegion(local.raw(), local.shape(), Sub(kept.offset, from_box.offset), out.raw(), out.shape(),
               Sub(kept.offset, to_box.offset), kept.shape, es);
  }
  for (const auto& [i, piece] : unpack) UnpackPiece(temps[i].raw(), piece, out, to_box);
  local = std::move(out);
  return Status();
}

}  // namespace

Status ExecuteStep(const PlanStep& step, MeshComms& comms, Tensor& local) {
  const int rank = comms.world_rank();
  MF_RETURN_IF_ERROR(CheckLocal(step.from, rank, local, "ExecuteStep"));
  switch (step.kind) {
    case StepKind::kAllGather: return RunAllGather(step, comms, local, rank);
    case StepKind::kAllReduce: return RunAllReduce(step, comms, local);
    case StepKind::kReduceScatter: return RunReduceScatter(step, comms, local, rank);
    case StepKind::kAllToAll: return RunAllToAll(step, comms, local, rank);
    case StepKind::kLocalSlice: return RunLocalSlice(step, local, rank);
    case StepKind::kLocalPartial: return RunLocalPartial(step, local, rank);
    case StepKind::kSendRecv: return RunSendRecv(step, comms, local, rank);
  }
  return InternalError("unknown step kind");
}

Status ExecutePlan(const Plan& plan, MeshComms& comms, Tensor& local) {
  if (!(plan.from.mesh() == comms.mesh())) {
    return InvalidArgumentError("plan is for " + plan.from.mesh().ToString() + " but the communicators are for " +
                                comms.mesh().ToString());
  }
  if (local.dtype() != plan.dtype) {
    return InvalidArgumentError("plan is for dtype " + std::string(DTypeName(plan.dtype)) +
                                " but the local tensor is " + std::string(DTypeName(local.dtype())));
  }
  MF_RETURN_IF_ERROR(CheckLocal(plan.from, comms.world_rank(), local, "ExecutePlan"));
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PlanStep& step = plan.steps[i];
    Status s = ExecuteStep(step, comms, local);
    if (!s.ok()) {
      return s.WithContext("step " + std::to_string(i) + " (" + std::string(StepKindName(step.kind)) + ")");
    }
  }
  return Status();
}

}  // namespace meshflow
