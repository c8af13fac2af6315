#include "meshflow/runtime/executor.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>
#include <type_traits>

#include "meshflow/runtime/send_recv_cache.h"
#include "meshflow/planner/direct.h"

namespace meshflow {
namespace {

std::vector<int64_t> Sub(std::span<const int64_t> a, std::span<const int64_t> b) {
  std::vector<int64_t> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] - b[i];
  return out;
}

// Copies the part of `t` (whose global box is `box`) at global `offset` with extents `shape`
// (inside `box`) to `dst` as a dense row-major block. Returns the bytes written.
int64_t PackPiece(const Tensor& t, const Box& box, std::span<const int64_t> offset, std::span<const int64_t> shape,
                  std::byte* dst) {
  const std::vector<int64_t> zero(shape.size(), 0);
  CopyRegion(t.raw(), t.shape(), Sub(offset, box.offset), dst, shape, zero, shape, DTypeSize(t.dtype()));
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  return n * DTypeSize(t.dtype());
}
int64_t PackPiece(const Tensor& t, const Box& box, const Box& piece, std::byte* dst) {
  return PackPiece(t, box, piece.offset, piece.shape, dst);
}

// Writes the dense block at `src` (extents `shape`, global `offset`) into `out`, whose global box
// is `out_box`.
void UnpackPiece(const std::byte* src, std::span<const int64_t> offset, std::span<const int64_t> shape, Tensor& out,
                 const Box& out_box) {
  const std::vector<int64_t> zero(shape.size(), 0);
  CopyRegion(src, shape, zero, out.raw(), out.shape(), Sub(offset, out_box.offset), shape, DTypeSize(out.dtype()));
}
void UnpackPiece(const std::byte* src, const Box& piece, Tensor& out, const Box& out_box) {
  UnpackPiece(src, piece.offset, piece.shape, out, out_box);
}

// Bytes of the blocks `pieces` packed back to back.
int64_t PackedBytes(std::span<const Box> pieces, DType dtype) {
  int64_t n = 0;
  for (const Box& b : pieces) n += b.NumElements();
  return n * DTypeSize(dtype);
}

// The row-major element offset of the piece at global `offset` with extents `shape` inside
// `outer` when the piece is one contiguous run of it (then it can be sent from / received into
// `outer`'s buffer directly), else -1.
int64_t ContiguousOffset(std::span<const int64_t> offset, std::span<const int64_t> shape, const Box& outer) {
  const size_t r = shape.size();
  size_t d = 0;
  while (d < r && shape[d] == 1) ++d;
  for (size_t e = d + 1; e < r; ++e) {
    if (shape[e] != outer.shape[e]) return -1;
  }
  int64_t flat = 0;
  for (size_t e = 0; e < r; ++e) flat = flat * outer.shape[e] + (offset[e] - outer.offset[e]);
  return flat;
}
int64_t ContiguousOffset(const Box& piece, const Box& outer) { return ContiguousOffset(piece.offset, piece.shape, outer); }

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

// `piece` (inside `outer`, both global boxes) as a strided block of `outer`'s row-major buffer,
// when it is one: runs of its innermost partial dim (and the full dims inside it), repeated along at
// most one other dim. Otherwise nullopt (then it is packed).
std::optional<StridedBlock> StridedView(const Box& piece, const Box& outer) {
  if (piece.empty()) return StridedBlock{};
  const int d = piece.rank();
  int64_t flat = 0;
  for (int x = 0; x < d; ++x) flat = flat * outer.shape[x] + (piece.offset[x] - outer.offset[x]);
  int e = d - 1;
  int64_t inner = 1;  // elements of outer per index of dim e
  while (e >= 0 && piece.shape[e] == outer.shape[e]) inner *= outer.shape[e--];
  if (e < 0) return StridedBlock{flat, 1, inner, inner};
  const int64_t run = piece.shape[e] * inner;
  int64_t stride = inner * outer.shape[e];
  int j = e - 1;
  while (j >= 0 && piece.shape[j] == 1) stride *= outer.shape[j--];
  if (j < 0) return StridedBlock{flat, 1, run, run};
  for (int x = 0; x < j; ++x) {
    if (piece.shape[x] != 1) return std::nullopt;
  }
  // stride now spans dims j+1.. of outer: one step of dim j.
  const int64_t rows = piece.shape[j];
  if (stride == run) return StridedBlock{flat, 1, rows * run, rows * run};
  return StridedBlock{flat, rows, run, stride};
}

int64_t SumOf(std::span<const int64_t> v) {
  int64_t n = 0;
  for (int64_t x : v) n += x;
  return n;
}

// Step buffers come from the rank's pool (RankContext::buffers()) and go back to it, so that a
// repeated redistribution allocates nothing in steady state. Pooled bytes are stale: a step takes
// an uninitialized buffer only where it writes every byte (the pieces it writes are disjoint and
// add up to the whole buffer), and a zeroed one otherwise. On an error path the buffers are simply
// freed, as before (a backend that timed out might still touch them).

// A tensor of `shape` whose every byte the caller writes.
Tensor TakeUninitialized(BufferPool& pool, DType dtype, std::vector<int64_t> shape) {
  int64_t n = DTypeSize(dtype);
  for (int64_t s : shape) n *= s;
  return Tensor::Uninitialized(dtype, std::move(shape), pool.Take(n));
}

Tensor TakeUninitialized(BufferPool& pool, DType dtype, std::span<const int64_t> shape) {
  return TakeUninitialized(pool, dtype, std::vector<int64_t>(shape.begin(), shape.end()));
}

// A zero-filled tensor of `shape` in pooled memory.
Tensor TakeZeros(BufferPool& pool, DType dtype, std::vector<int64_t> shape) {
  Tensor t = TakeUninitialized(pool, dtype, std::move(shape));
  if (t.NumBytes() > 0) std::memset(t.raw(), 0, static_cast<size_t>(t.NumBytes()));
  return t;
}

// The step's result replaces `local`, whose storage goes back to the pool.
void Replace(BufferPool& pool, Tensor& local, Tensor out) {
  pool.Give(local.ReleaseBuffer());
  local = std::move(out);
}

struct GroupInfo {
  Communicator* comm = nullptr;
  std::vector<int> members;  // world ranks, group order
  int me = 0;                // position of this rank
};

StatusOr<GroupInfo> GetGroup(RankContext& ctx, std::span<const int> dims) {
  GroupInfo g;
  MF_ASSIGN_OR_RETURN(g.comm, ctx.Group(dims));
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

Status RunAllGather(const PlanStep& step, RankContext& ctx, Tensor& local, int rank) {
  MF_ASSIGN_OR_RETURN(GroupInfo g, GetGroup(ctx, step.mesh_dims));
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
  BufferPool& pool = ctx.buffers();
  const int64_t total = SumOf(counts);
  // The members' blocks are disjoint shards inside to_box: when they add up to it, they cover it.
  Tensor out = total == to_box.NumElements() ? TakeUninitialized(pool, local.dtype(), to_box.shape)
                                             : TakeZeros(pool, local.dtype(), to_box.shape);
  if (BlocksTileInOrder(from_boxes, to_box)) {
    // The blocks lie back to back in the output (e.g. gathering the outermost dim): receive in place.
    MF_RETURN_IF_ERROR(g.comm->AllGatherV(local.raw(), local.NumElements(), out.raw(), counts, local.dtype()));
    Replace(pool, local, std::move(out));
    return Status();
  }
  TensorBuffer recv = pool.Take(total * DTypeSize(local.dtype()));  // AllGatherV writes all of it
  MF_RETURN_IF_ERROR(g.comm->AllGatherV(local.raw(), local.NumElements(), recv.data(), counts, local.dtype()));
  int64_t pos = 0;
  for (size_t q = 0; q < g.members.size(); ++q) {
    if (!from_boxes[q].empty()) UnpackPiece(recv.data() + pos, from_boxes[q], out, to_box);
    pos += counts[q] * DTypeSize(local.dtype());
  }
  pool.Give(std::move(recv));
  Replace(pool, local, std::move(out));
  return Status();
}

Status RunAllReduce(const PlanStep& step, RankContext& ctx, Tensor& local) {
  MF_ASSIGN_OR_RETURN(GroupInfo g, GetGroup(ctx, step.mesh_dims));
  const std::optional<ReduceOp> op = step.from.partial_op();
  if (!op) return InternalError("all_reduce step from a layout without Partial: " + step.from.ToString());
  return g.comm->AllReduce(local.raw(), local.raw(), local.NumElements(), local.dtype(), *op);
}

Status RunReduceScatter(const PlanStep& step, RankContext& ctx, Tensor& local, int rank) {
  MF_ASSIGN_OR_RETURN(GroupInfo g, GetGroup(ctx, step.mesh_dims));
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
  BufferPool& pool = ctx.buffers();
  TensorBuffer send = pool.Take(PackedBytes(pieces, local.dtype()));  // the pieces fill it
  int64_t pos = 0;
  for (const Box& piece : pieces) pos += PackPiece(local, from_box, piece, send.data() + pos);
  // This rank's piece is its whole target box (checked above): the reduction writes all of out.
  Tensor out = TakeUninitialized(pool, local.dtype(), to_box.shape);
  MF_RETURN_IF_ERROR(g.comm->ReduceScatterV(send.data(), counts, out.raw(), local.dtype(), *op));
  pool.Give(std::move(send));
  Replace(pool, local, std::move(out));
  return Status();
}

Status RunAllToAll(const PlanStep& step, RankContext& ctx, Tensor& local, int rank) {
  MF_ASSIGN_OR_RETURN(GroupInfo g, GetGroup(ctx, step.mesh_dims));
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
  BufferPool& pool = ctx.buffers();
  const int64_t es = DTypeSize(local.dtype());
  const int64_t covered = SumOf(recv_counts);
  // Checked after the exchange, so that every member still takes part in it.
  auto check_covered = [&]() -> Status {
    if (covered == to_box.NumElements()) return Status();
    return InternalError("all_to_all: group pieces cover " + std::to_string(covered) + " of the " +
                         std::to_string(to_box.NumElements()) + " elements of target box " + to_box.ToString());
  };
  // One call site for either form: members whose pieces differ in shape may take different paths
  // (the threads backend matches a strided post with an AllToAllV post).
  const CallerSite where = CallerSite::Here(__FILE__, __LINE__);
  // A backend that reads its peers' memory (threads) copies every piece once, from the sender's
  // tensor straight into the receiver's, when every piece is a strided block of its tensor.
  if (g.comm->strided_all_to_all_is_direct()) {
    std::vector<StridedBlock> send_views, recv_views;
    bool strided = true;
    for (size_t q = 0; q < send_pieces.size() && strided; ++q) {
      const std::optional<StridedBlock> sv = StridedView(send_pieces[q], from_box);
      const std::optional<StridedBlock> rv = StridedView(recv_pieces[q], to_box);
      strided = sv.has_value() && rv.has_value();
      if (strided) {
        send_views.push_back(*sv);
        recv_views.push_back(*rv);
      }
    }
    if (strided) {
      Tensor out = TakeUninitialized(pool, local.dtype(), to_box.shape);  // the pieces cover it
      MF_RETURN_IF_ERROR(g.comm->AllToAllStrided(local.raw(), send_views, out.raw(), recv_views, local.dtype(), where));
      MF_RETURN_IF_ERROR(check_covered());
      Replace(pool, local, std::move(out));
      return Status();
    }
  }
  // Blocks that lie back to back in `local` (e.g. S(1) -> S(0)) are sent from it directly;
  // otherwise they are packed into a pooled buffer, which the pieces fill.
  const bool send_in_place = BlocksTileInOrder(send_pieces, from_box);
  TensorBuffer send;
  if (!send_in_place) {
    send = pool.Take(PackedBytes(send_pieces, local.dtype()));
    int64_t spos = 0;
    for (const Box& piece : send_pieces) {
      if (!piece.empty()) spos += PackPiece(local, from_box, piece, send.data() + spos);
    }
  }
  // The received pieces are disjoint (the members' source shards are); when they add up to the
  // target box they cover it, and out needs no zero-fill (otherwise the step fails below).
  Tensor out = TakeUninitialized(pool, local.dtype(), to_box.shape);
  // Pieces that lie back to back in the target box (e.g. S(0) -> S(1)) are received in place.
  const bool recv_in_place = BlocksTileInOrder(recv_pieces, to_box);
  TensorBuffer recv;
  if (!recv_in_place) recv = pool.Take(covered * es);  // AllToAllV writes all of it
  MF_RETURN_IF_ERROR(g.comm->AllToAllV(send_in_place ? local.raw() : send.data(), send_counts,
                                       recv_in_place ? out.raw() : recv.data(), recv_counts, local.dtype(),
                                       where));
  if (!recv_in_place) {
    int64_t pos = 0;
    for (size_t q = 0; q < recv_pieces.size(); ++q) {
      const Box& p = recv_pieces[q];
      if (!p.empty()) UnpackPiece(recv.data() + pos, p, out, to_box);
      pos += recv_counts[q] * es;
    }
  }
  MF_RETURN_IF_ERROR(check_covered());
  pool.Give(std::move(send));
  pool.Give(std::move(recv));
  Replace(pool, local, std::move(out));
  return Status();
}

Status RunLocalSlice(const PlanStep& step, BufferPool& pool, Tensor& local, int rank) {
  MF_ASSIGN_OR_RETURN(Box from_box, step.from.LocalBox(rank));
  MF_ASSIGN_OR_RETURN(Box to_box, step.to.LocalBox(rank));
  if (!(Intersect(from_box, to_box) == to_box) && !to_box.empty()) {
    return InternalError("local_slice: target box " + to_box.ToString() + " is not inside source box " +
                         from_box.ToString());
  }
  Tensor out = TakeUninitialized(pool, local.dtype(), to_box.shape);
  if (!to_box.empty()) {
    const std::vector<int64_t> zero(to_box.shape.size(), 0);
    CopyRegion(local.raw(), local.shape(), Sub(to_box.offset, from_box.offset), out.raw(), out.shape(), zero,
               to_box.shape, DTypeSize(local.dtype()));  // writes all of out
  }
  Replace(pool, local, std::move(out));
  return Status();
}

Status RunLocalPartial(const PlanStep& step, Tensor& local, int rank) {
  const std::optional<ReduceOp> op = step.to.partial_op();
  if (!op) return InternalError("local_partial step to a layout without Partial: " + step.to.ToString());
  if (*op != ReduceOp::kSum) return Status();  // avg/max/min keep the value
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> coord, step.to.mesh().Coordinate(rank));
  for (int m : step.mesh_dims) {
    if (coord[m] != 0) {
      if (local.NumBytes() > 0) std::memset(local.raw(), 0, static_cast<size_t>(local.NumBytes()));
      return Status();
    }
  }
  return Status();
}

// Fills `t` with the identity of `op`: sum 0 (-0.0 for floats, so x + identity == x bit for bit,
// -0.0 included), max the lowest value (-inf for floats), min the highest (+inf). avg has none.
Status FillReduceIdentity(Tensor& t, ReduceOp op) {
  if (op == ReduceOp::kAvg) return InternalError("Partial(avg) has no identity element");
  VisitDType(t.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T v{};
    if constexpr (std::is_same_v<T, BFloat16>) {
      const float f = op == ReduceOp::kSum   ? -0.0f
                      : op == ReduceOp::kMax ? -std::numeric_limits<float>::infinity()
                                             : std::numeric_limits<float>::infinity();
      v = BFloat16(f);
    } else if constexpr (std::is_floating_point_v<T>) {
      v = op == ReduceOp::kSum   ? -T{0}
          : op == ReduceOp::kMax ? -std::numeric_limits<T>::infinity()
                                 : std::numeric_limits<T>::infinity();
    } else {
      v = op == ReduceOp::kSum   ? T{0}
          : op == ReduceOp::kMax ? std::numeric_limits<T>::lowest()
                                 : std::numeric_limits<T>::max();
    }
    std::span<T> data = t.data<T>();
    std::fill(data.begin(), data.end(), v);
  });
  return Status();
}

// local_shard_to_partial (no communication): the new box (the all_gather target box) holds the
// own shard in place and the identity of the Partial op elsewhere; the group's shards tile it
// (planner/transforms.h), so the reduction over the group is the gathered value exactly.
Status RunLocalShardToPartial(const PlanStep& step, BufferPool& pool, Tensor& local, int rank) {
  const std::optional<ReduceOp> op = step.to.partial_op();
  if (!op) return InternalError("local_shard_to_partial step to a layout without Partial: " + step.to.ToString());
  MF_ASSIGN_OR_RETURN(Box from_box, step.from.LocalBox(rank));
  MF_ASSIGN_OR_RETURN(Box to_box, step.to.LocalBox(rank));
  if (!from_box.empty() && !(Intersect(from_box, to_box) == from_box)) {
    return InternalError("local_shard_to_partial: source box " + from_box.ToString() + " is not inside target box " +
                         to_box.ToString());
  }
  Tensor out = TakeUninitialized(pool, local.dtype(), to_box.shape);
  MF_RETURN_IF_ERROR(FillReduceIdentity(out, *op));
  if (!from_box.empty()) {
    const std::vector<int64_t> zero(from_box.shape.size(), 0);
    CopyRegion(local.raw(), local.shape(), zero, out.raw(), out.shape(), Sub(from_box.offset, to_box.offset),
               from_box.shape, DTypeSize(local.dtype()));
  }
  Replace(pool, local, std::move(out));
  return Status();
}

// One rank's part of a send_recv step: its pieces from DirectPiecesOfRank (arithmetic over its own
// peers, never the world, no allocation per piece), with the pieces' places in the local buffers.
// Computed once per distinct step and cached in ctx.send_recv_cache().
StatusOr<SendRecvSchedule> BuildSendRecvSchedule(const PlanStep& step, int rank) {
  SendRecvSchedule s;
  MF_ASSIGN_OR_RETURN(s.pieces, DirectPiecesOfRank(step.from, step.to, rank));
  MF_ASSIGN_OR_RETURN(s.from_box, step.from.LocalBox(rank));
  MF_ASSIGN_OR_RETURN(s.to_box, step.to.LocalBox(rank));
  s.kept = Intersect(s.from_box, s.to_box);
  // The received boxes and the kept one are disjoint (planner/direct.h): when they add up to the
  // target box, every byte of the output is written.
  s.covered = s.kept.NumElements();
  const PieceList& sends = s.pieces.sends;
  const PieceList& recvs = s.pieces.recvs;
  s.send_offsets.resize(sends.size());
  for (size_t i = 0; i < sends.size(); ++i) {
    s.send_offsets[i] = ContiguousOffset(sends.offset(i), sends.shape(i), s.from_box);
  }
  s.recv_offsets.resize(recvs.size());
  for (size_t i = 0; i < recvs.size(); ++i) {
    s.recv_offsets[i] = ContiguousOffset(recvs.offset(i), recvs.shape(i), s.to_box);
    s.covered += recvs.NumElements(i);
  }
  return s;
}

Status RunSendRecv(const PlanStep& step, RankContext& ctx, Tensor& local) {
  const int ndim = step.from.mesh().ndim();
  std::vector<int> all_dims(static_cast<size_t>(ndim));
  for (int d = 0; d < ndim; ++d) all_dims[d] = d;
  MF_ASSIGN_OR_RETURN(Communicator* comm, ctx.Group(all_dims));
  SendRecvCache& cache = ctx.send_recv_cache();
  const SendRecvSchedule* s = cache.Find(step.from, step.to);
  if (s == nullptr) {
    if (!(step.from.mesh() == ctx.mesh())) {
      return InvalidArgumentError("send_recv step on " + step.from.mesh().ToString() +
                                  " but the communicators are for " + ctx.mesh().ToString());
    }
    MF_ASSIGN_OR_RETURN(SendRecvSchedule built, BuildSendRecvSchedule(step, ctx.world_rank()));
    s = &cache.Insert(step.from, step.to, std::move(built));
  }
  // Contiguous pieces go straight from `local` / into `out`; the others through packed temporaries.
  BufferPool& pool = ctx.buffers();
  const int64_t es = DTypeSize(local.dtype());
  Tensor out = s->covered == s->to_box.NumElements() ? TakeUninitialized(pool, local.dtype(), s->to_box.shape)
                                                     : TakeZeros(pool, local.dtype(), s->to_box.shape);
  std::vector<Tensor> temps;  // send slices and receive buffers of non-contiguous pieces (all written)
  temps.reserve(s->pieces.sends.size() + s->pieces.recvs.size());
  std::vector<std::pair<size_t, size_t>> unpack;  // (temps index, receive piece) received into a temporary
  const PieceList& send_pieces = s->pieces.sends;
  const PieceList& recv_pieces = s->pieces.recvs;
  std::vector<SendSpec> sends;
  std::vector<RecvSpec> recvs;
  sends.reserve(send_pieces.size());
  recvs.reserve(recv_pieces.size());
  for (size_t i = 0; i < send_pieces.size(); ++i) {
    const void* buf = nullptr;
    if (s->send_offsets[i] >= 0) {
      buf = local.raw() + s->send_offsets[i] * es;
    } else {
      temps.push_back(TakeUninitialized(pool, local.dtype(), send_pieces.shape(i)));
      PackPiece(local, s->from_box, send_pieces.offset(i), send_pieces.shape(i), temps.back().raw());
      buf = temps.back().raw();
    }
    sends.push_back(SendSpec{send_pieces.peers[i], buf, send_pieces.NumElements(i)});
  }
  for (size_t i = 0; i < recv_pieces.size(); ++i) {
    void* buf = nullptr;
    if (s->recv_offsets[i] >= 0) {
      buf = out.raw() + s->recv_offsets[i] * es;
    } else {
      temps.push_back(TakeUninitialized(pool, local.dtype(), recv_pieces.shape(i)));
      unpack.emplace_back(temps.size() - 1, i);
      buf = temps.back().raw();
    }
    recvs.push_back(RecvSpec{recv_pieces.peers[i], buf, recv_pieces.NumElements(i)});
  }
  MF_RETURN_IF_ERROR(comm->SendRecv(sends, recvs, local.dtype()));
  const Box& kept = s->kept;
  if (!kept.empty()) {
    CopyRegion(local.raw(), local.shape(), Sub(kept.offset, s->from_box.offset), out.raw(), out.shape(),
               Sub(kept.offset, s->to_box.offset), kept.shape, es);
  }
  for (const auto& [t, i] : unpack) {
    UnpackPiece(temps[t].raw(), recv_pieces.offset(i), recv_pieces.shape(i), out, s->to_box);
  }
  for (Tensor& t : temps) pool.Give(t.ReleaseBuffer());
  Replace(pool, local, std::move(out));
  return Status();
}

}  // namespace

Status ExecuteStep(const PlanStep& step, RankContext& ctx, Tensor& local) {
  const int rank = ctx.world_rank();
  MF_RETURN_IF_ERROR(CheckLocal(step.from, rank, local, "ExecuteStep"));
  switch (step.kind) {
    case StepKind::kAllGather: return RunAllGather(step, ctx, local, rank);
    case StepKind::kAllReduce: return RunAllReduce(step, ctx, local);
    case StepKind::kReduceScatter: return RunReduceScatter(step, ctx, local, rank);
    case StepKind::kAllToAll: return RunAllToAll(step, ctx, local, rank);
    case StepKind::kLocalSlice: return RunLocalSlice(step, ctx.buffers(), local, rank);
    case StepKind::kLocalPartial: return RunLocalPartial(step, local, rank);
    case StepKind::kSendRecv: return RunSendRecv(step, ctx, local);
    case StepKind::kLocalShardToPartial: return RunLocalShardToPartial(step, ctx.buffers(), local, rank);
  }
  return InternalError("unknown step kind");
}

Status ExecutePlan(const Plan& plan, RankContext& ctx, Tensor& local) {
  if (!(plan.from.mesh() == ctx.mesh())) {
    return InvalidArgumentError("plan is for " + plan.from.mesh().ToString() + " but the communicators are for " +
                                ctx.mesh().ToString());
  }
  if (local.dtype() != plan.dtype) {
    return InvalidArgumentError("plan is for dtype " + std::string(DTypeName(plan.dtype)) +
                                " but the local tensor is " + std::string(DTypeName(local.dtype())));
  }
  MF_RETURN_IF_ERROR(CheckLocal(plan.from, ctx.world_rank(), local, "ExecutePlan"));
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PlanStep& step = plan.steps[i];
    Status s = ExecuteStep(step, ctx, local);
    if (!s.ok()) {
      return s.WithContext("step " + std::to_string(i) + " (" + std::string(StepKindName(step.kind)) + ")");
    }
  }
  return Status();
}

}  // namespace meshflow
