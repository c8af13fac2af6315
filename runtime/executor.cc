#include "meshflow/runtime/executor.h"

#include <algorithm>
#include <atomic>
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

int64_t ElementsOf(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  return n;
}

// What a step runs with: pointers into the RankContext's state (stable while work is pending, even
// when the context object moves), and the communication stream the step is work of. Every byte
// operation goes through the device runtime in the stream's order; every collective gets the stream.
struct Env {
  MeshComms* comms;
  BufferPool* pool;
  SendRecvCache* cache;
  DeviceRuntime* rt;
  Stream* stream;
  int rank;
};

Env MakeEnv(RankContext& ctx) {
  return Env{&ctx.comms(), &ctx.buffers(), &ctx.send_recv_cache(), &ctx.runtime(), &ctx.comm_stream(),
             ctx.world_rank()};
}

// Copies the part of `t` (whose global box is `box`) at global `offset` with extents `shape`
// (inside `box`) to `dst` as a dense row-major block.
Status PackPiece(const Env& env, const Tensor& t, const Box& box, std::span<const int64_t> offset,
                 std::span<const int64_t> shape, std::byte* dst) {
  const std::vector<int64_t> zero(shape.size(), 0);
  return env.rt->CopyRegion(t.raw(), t.shape(), Sub(offset, box.offset), dst, shape, zero, shape,
                            DTypeSize(t.dtype()), *env.stream);
}
Status PackPiece(const Env& env, const Tensor& t, const Box& box, const Box& piece, std::byte* dst) {
  return PackPiece(env, t, box, piece.offset, piece.shape, dst);
}

// Writes the dense block at `src` (extents `shape`, global `offset`) into `out`, whose global box
// is `out_box`.
Status UnpackPiece(const Env& env, const std::byte* src, std::span<const int64_t> offset,
                   std::span<const int64_t> shape, Tensor& out, const Box& out_box) {
  const std::vector<int64_t> zero(shape.size(), 0);
  return env.rt->CopyRegion(src, shape, zero, out.raw(), out.shape(), Sub(offset, out_box.offset), shape,
                            DTypeSize(out.dtype()), *env.stream);
}
Status UnpackPiece(const Env& env, const std::byte* src, const Box& piece, Tensor& out, const Box& out_box) {
  return UnpackPiece(env, src, piece.offset, piece.shape, out, out_box);
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
// freed (a backend that timed out might still touch them).

// A tensor of `shape` whose every byte the caller writes.
StatusOr<Tensor> TakeUninitialized(const Env& env, DType dtype, std::vector<int64_t> shape) {
  const int64_t n = DTypeSize(dtype) * ElementsOf(shape);
  MF_ASSIGN_OR_RETURN(TensorBuffer b, env.pool->Take(n));
  return Tensor::Uninitialized(dtype, std::move(shape), std::move(b));
}

StatusOr<Tensor> TakeUninitialized(const Env& env, DType dtype, std::span<const int64_t> shape) {
  return TakeUninitialized(env, dtype, std::vector<int64_t>(shape.begin(), shape.end()));
}

Status FillZero(const Env& env, Tensor& t) {
  const std::byte zero{0};
  return env.rt->Fill(t.raw(), t.NumBytes(), &zero, 1, *env.stream);
}

// A zero-filled tensor of `shape` in pooled memory.
StatusOr<Tensor> TakeZeros(const Env& env, DType dtype, std::vector<int64_t> shape) {
  MF_ASSIGN_OR_RETURN(Tensor t, TakeUninitialized(env, dtype, std::move(shape)));
  MF_RETURN_IF_ERROR(FillZero(env, t));
  return t;
}

// The step's result replaces `local`, whose storage goes back to the pool.
void Replace(const Env& env, Tensor& local, Tensor out) {
  env.pool->Give(local.ReleaseBuffer());
  local = std::move(out);
}

struct GroupInfo {
  Communicator* comm = nullptr;
  std::vector<int> members;  // world ranks, group order
  int me = 0;                // position of this rank
};

StatusOr<GroupInfo> GetGroup(const Env& env, std::span<const int> dims) {
  GroupInfo g;
  MF_ASSIGN_OR_RETURN(g.comm, env.comms->Group(dims));
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

Status RunAllGather(const PlanStep& step, const Env& env, Tensor& local) {
  MF_ASSIGN_OR_RETURN(GroupInfo g, GetGroup(env, step.mesh_dims));
  MF_ASSIGN_OR_RETURN(Box to_box, step.to.LocalBox(env.rank));
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
  const int64_t total = SumOf(counts);
  // The members' blocks are disjoint shards inside to_box: when they add up to it, they cover it.
  MF_ASSIGN_OR_RETURN(Tensor out, total == to_box.NumElements() ? TakeUninitialized(env, local.dtype(), to_box.shape)
                                                                : TakeZeros(env, local.dtype(), to_box.shape));
  if (BlocksTileInOrder(from_boxes, to_box)) {
    // The blocks lie back to back in the output (e.g. gathering the outermost dim): receive in place.
    MF_RETURN_IF_ERROR(
        g.comm->AllGatherV(local.raw(), local.NumElements(), out.raw(), counts, local.dtype(), *env.stream));
    Replace(env, local, std::move(out));
    return Status();
  }
  MF_ASSIGN_OR_RETURN(TensorBuffer recv, env.pool->Take(total * DTypeSize(local.dtype())));  // all written
  MF_RETURN_IF_ERROR(
      g.comm->AllGatherV(local.raw(), local.NumElements(), recv.data(), counts, local.dtype(), *env.stream));
  int64_t pos = 0;
  for (size_t q = 0; q < g.members.size(); ++q) {
    if (!from_boxes[q].empty()) MF_RETURN_IF_ERROR(UnpackPiece(env, recv.data() + pos, from_boxes[q], out, to_box));
    pos += counts[q] * DTypeSize(local.dtype());
  }
  env.pool->Give(std::move(recv));
  Replace(env, local, std::move(out));
  return Status();
}

Status RunAllReduce(const PlanStep& step, const Env& env, Tensor& local) {
  MF_ASSIGN_OR_RETURN(GroupInfo g, GetGroup(env, step.mesh_dims));
  const std::optional<ReduceOp> op = step.from.partial_op();
  if (!op) return InternalError("all_reduce step from a layout without Partial: " + step.from.ToString());
  return g.comm->AllReduce(local.raw(), local.raw(), local.NumElements(), local.dtype(), *op, *env.stream);
}

Status RunReduceScatter(const PlanStep& step, const Env& env, Tensor& local) {
  MF_ASSIGN_OR_RETURN(GroupInfo g, GetGroup(env, step.mesh_dims));
  const std::optional<ReduceOp> op = step.from.partial_op();
  if (!op) return InternalError("reduce_scatter step from a layout without Partial: " + step.from.ToString());
  MF_ASSIGN_OR_RETURN(Box from_box, step.from.LocalBox(env.rank));
  MF_ASSIGN_OR_RETURN(Box to_box, step.to.LocalBox(env.rank));
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
  MF_ASSIGN_OR_RETURN(TensorBuffer send, env.pool->Take(PackedBytes(pieces, local.dtype())));  // the pieces fill it
  int64_t pos = 0;
  for (const Box& piece : pieces) {
    MF_RETURN_IF_ERROR(PackPiece(env, local, from_box, piece, send.data() + pos));
    pos += piece.NumElements() * DTypeSize(local.dtype());
  }
  // This rank's piece is its whole target box (checked above): the reduction writes all of out.
  MF_ASSIGN_OR_RETURN(Tensor out, TakeUninitialized(env, local.dtype(), to_box.shape));
  MF_RETURN_IF_ERROR(g.comm->ReduceScatterV(send.data(), counts, out.raw(), local.dtype(), *op, *env.stream));
  env.pool->Give(std::move(send));
  Replace(env, local, std::move(out));
  return Status();
}

// The strided form of an all_to_all (a backend that reads its peers' memory: threads): every piece
// is copied once, from the sender's tensor straight into the receiver's. nullopt when some piece is
// not a strided block of its tensor.
StatusOr<std::optional<Tensor>> AllToAllStridedIfPossible(const Env& env, Communicator& comm, const Tensor& local,
                                                          const std::vector<Box>& send_pieces,
                                                          const std::vector<Box>& recv_pieces, const Box& from_box,
                                                          const Box& to_box, CallerSite where) {
  std::vector<StridedBlock> send_views, recv_views;
  for (size_t q = 0; q < send_pieces.size(); ++q) {
    const std::optional<StridedBlock> sv = StridedView(send_pieces[q], from_box);
    const std::optional<StridedBlock> rv = StridedView(recv_pieces[q], to_box);
    if (!sv.has_value() || !rv.has_value()) return std::optional<Tensor>();
    send_views.push_back(*sv);
    recv_views.push_back(*rv);
  }
  MF_ASSIGN_OR_RETURN(Tensor out, TakeUninitialized(env, local.dtype(), to_box.shape));  // the pieces cover it
  MF_RETURN_IF_ERROR(
      comm.AllToAllStrided(local.raw(), send_views, out.raw(), recv_views, local.dtype(), *env.stream, where));
  return std::optional<Tensor>(std::move(out));
}

Status RunAllToAll(const PlanStep& step, const Env& env, Tensor& local) {
  MF_ASSIGN_OR_RETURN(GroupInfo g, GetGroup(env, step.mesh_dims));
  MF_ASSIGN_OR_RETURN(Box from_box, step.from.LocalBox(env.rank));
  MF_ASSIGN_OR_RETURN(Box to_box, step.to.LocalBox(env.rank));
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
  const CallerSite where = CallerSite::Current();
  if (g.comm->strided_all_to_all_is_direct()) {
    MF_ASSIGN_OR_RETURN(std::optional<Tensor> strided, AllToAllStridedIfPossible(env, *g.comm, local, send_pieces,
                                                                                  recv_pieces, from_box, to_box, where));
    if (strided.has_value()) {
      MF_RETURN_IF_ERROR(check_covered());
      Replace(env, local, std::move(*strided));
      return Status();
    }
  }
  // Blocks that lie back to back in `local` (e.g. S(1) -> S(0)) are sent from it directly;
  // otherwise they are packed into a pooled buffer, which the pieces fill.
  const bool send_in_place = BlocksTileInOrder(send_pieces, from_box);
  TensorBuffer send;
  if (!send_in_place) {
    MF_ASSIGN_OR_RETURN(send, env.pool->Take(PackedBytes(send_pieces, local.dtype())));
    int64_t spos = 0;
    for (const Box& piece : send_pieces) {
      if (piece.empty()) continue;
      MF_RETURN_IF_ERROR(PackPiece(env, local, from_box, piece, send.data() + spos));
      spos += piece.NumElements() * es;
    }
  }
  // The received pieces are disjoint (the members' source shards are); when they add up to the
  // target box they cover it, and out needs no zero-fill (otherwise the step fails below).
  MF_ASSIGN_OR_RETURN(Tensor out, TakeUninitialized(env, local.dtype(), to_box.shape));
  // Pieces that lie back to back in the target box (e.g. S(0) -> S(1)) are received in place.
  const bool recv_in_place = BlocksTileInOrder(recv_pieces, to_box);
  TensorBuffer recv;
  if (!recv_in_place) {
    MF_ASSIGN_OR_RETURN(recv, env.pool->Take(covered * es));  // AllToAllV writes all of it
  }
  MF_RETURN_IF_ERROR(g.comm->AllToAllV(send_in_place ? local.raw() : send.data(), send_counts,
                                       recv_in_place ? out.raw() : recv.data(), recv_counts, local.dtype(),
                                       *env.stream, where));
  if (!recv_in_place) {
    int64_t pos = 0;
    for (size_t q = 0; q < recv_pieces.size(); ++q) {
      const Box& p = recv_pieces[q];
      if (!p.empty()) MF_RETURN_IF_ERROR(UnpackPiece(env, recv.data() + pos, p, out, to_box));
      pos += recv_counts[q] * es;
    }
  }
  MF_RETURN_IF_ERROR(check_covered());
  env.pool->Give(std::move(send));
  env.pool->Give(std::move(recv));
  Replace(env, local, std::move(out));
  return Status();
}

Status RunLocalSlice(const PlanStep& step, const Env& env, Tensor& local) {
  MF_ASSIGN_OR_RETURN(Box from_box, step.from.LocalBox(env.rank));
  MF_ASSIGN_OR_RETURN(Box to_box, step.to.LocalBox(env.rank));
  if (!(Intersect(from_box, to_box) == to_box) && !to_box.empty()) {
    return InternalError("local_slice: target box " + to_box.ToString() + " is not inside source box " +
                         from_box.ToString());
  }
  MF_ASSIGN_OR_RETURN(Tensor out, TakeUninitialized(env, local.dtype(), to_box.shape));
  if (!to_box.empty()) {
    const std::vector<int64_t> zero(to_box.shape.size(), 0);
    MF_RETURN_IF_ERROR(env.rt->CopyRegion(local.raw(), local.shape(), Sub(to_box.offset, from_box.offset), out.raw(),
                                          out.shape(), zero, to_box.shape, DTypeSize(local.dtype()),
                                          *env.stream));  // writes all of out
  }
  Replace(env, local, std::move(out));
  return Status();
}

Status RunLocalPartial(const PlanStep& step, const Env& env, Tensor& local) {
  const std::optional<ReduceOp> op = step.to.partial_op();
  if (!op) return InternalError("local_partial step to a layout without Partial: " + step.to.ToString());
  if (*op != ReduceOp::kSum) return Status();  // avg/max/min keep the value
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> coord, step.to.mesh().Coordinate(env.rank));
  for (int m : step.mesh_dims) {
    if (coord[m] != 0) return FillZero(env, local);
  }
  return Status();
}

// The identity of `op` as one element of `dtype` (bytes): sum 0 (-0.0 for floats, so x + identity
// == x bit for bit, -0.0 included), max the lowest value (-inf for floats), min the highest (+inf).
// avg has none.
StatusOr<std::vector<std::byte>> ReduceIdentity(DType dtype, ReduceOp op) {
  if (op == ReduceOp::kAvg) return InternalError("Partial(avg) has no identity element");
  std::vector<std::byte> bytes(static_cast<size_t>(DTypeSize(dtype)));
  VisitDType(dtype, [&](auto zero) {
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
    std::memcpy(bytes.data(), &v, sizeof(T));
  });
  return bytes;
}

// local_shard_to_partial (no communication): the new box (the all_gather target box) holds the
// own shard in place and the identity of the Partial op elsewhere; the group's shards tile it
// (planner/transforms.h), so the reduction over the group is the gathered value exactly.
Status RunLocalShardToPartial(const PlanStep& step, const Env& env, Tensor& local) {
  const std::optional<ReduceOp> op = step.to.partial_op();
  if (!op) return InternalError("local_shard_to_partial step to a layout without Partial: " + step.to.ToString());
  MF_ASSIGN_OR_RETURN(Box from_box, step.from.LocalBox(env.rank));
  MF_ASSIGN_OR_RETURN(Box to_box, step.to.LocalBox(env.rank));
  if (!from_box.empty() && !(Intersect(from_box, to_box) == from_box)) {
    return InternalError("local_shard_to_partial: source box " + from_box.ToString() + " is not inside target box " +
                         to_box.ToString());
  }
  MF_ASSIGN_OR_RETURN(Tensor out, TakeUninitialized(env, local.dtype(), to_box.shape));
  MF_ASSIGN_OR_RETURN(std::vector<std::byte> identity, ReduceIdentity(local.dtype(), *op));
  MF_RETURN_IF_ERROR(
      env.rt->Fill(out.raw(), out.NumElements(), identity.data(), DTypeSize(local.dtype()), *env.stream));
  if (!from_box.empty()) {
    const std::vector<int64_t> zero(from_box.shape.size(), 0);
    MF_RETURN_IF_ERROR(env.rt->CopyRegion(local.raw(), local.shape(), zero, out.raw(), out.shape(),
                                          Sub(from_box.offset, to_box.offset), from_box.shape,
                                          DTypeSize(local.dtype()), *env.stream));
  }
  Replace(env, local, std::move(out));
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

Status RunSendRecv(const PlanStep& step, const Env& env, Tensor& local) {
  const int ndim = step.from.mesh().ndim();
  std::vector<int> all_dims(static_cast<size_t>(ndim));
  for (int d = 0; d < ndim; ++d) all_dims[d] = d;
  MF_ASSIGN_OR_RETURN(Communicator * comm, env.comms->Group(all_dims));
  const SendRecvSchedule* s = env.cache->Find(step.from, step.to);
  if (s == nullptr) {
    if (!(step.from.mesh() == env.comms->mesh())) {
      return InvalidArgumentError("send_recv step on " + step.from.mesh().ToString() +
                                  " but the communicators are for " + env.comms->mesh().ToString());
    }
    MF_ASSIGN_OR_RETURN(SendRecvSchedule built, BuildSendRecvSchedule(step, env.rank));
    s = &env.cache->Insert(step.from, step.to, std::move(built));
  }
  // Contiguous pieces go straight from `local` / into `out`; the others through packed temporaries.
  const int64_t es = DTypeSize(local.dtype());
  MF_ASSIGN_OR_RETURN(Tensor out, s->covered == s->to_box.NumElements()
                                      ? TakeUninitialized(env, local.dtype(), s->to_box.shape)
                                      : TakeZeros(env, local.dtype(), s->to_box.shape));
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
      MF_ASSIGN_OR_RETURN(Tensor t, TakeUninitialized(env, local.dtype(), send_pieces.shape(i)));
      temps.push_back(std::move(t));
      MF_RETURN_IF_ERROR(
          PackPiece(env, local, s->from_box, send_pieces.offset(i), send_pieces.shape(i), temps.back().raw()));
      buf = temps.back().raw();
    }
    sends.push_back(SendSpec{send_pieces.peers[i], buf, send_pieces.NumElements(i)});
  }
  for (size_t i = 0; i < recv_pieces.size(); ++i) {
    void* buf = nullptr;
    if (s->recv_offsets[i] >= 0) {
      buf = out.raw() + s->recv_offsets[i] * es;
    } else {
      MF_ASSIGN_OR_RETURN(Tensor t, TakeUninitialized(env, local.dtype(), recv_pieces.shape(i)));
      temps.push_back(std::move(t));
      unpack.emplace_back(temps.size() - 1, i);
      buf = temps.back().raw();
    }
    recvs.push_back(RecvSpec{recv_pieces.peers[i], buf, recv_pieces.NumElements(i)});
  }
  MF_RETURN_IF_ERROR(comm->SendRecv(sends, recvs, local.dtype(), *env.stream));
  const Box& kept = s->kept;
  if (!kept.empty()) {
    MF_RETURN_IF_ERROR(env.rt->CopyRegion(local.raw(), local.shape(), Sub(kept.offset, s->from_box.offset), out.raw(),
                                          out.shape(), Sub(kept.offset, s->to_box.offset), kept.shape, es,
                                          *env.stream));
  }
  for (const auto& [t, i] : unpack) {
    MF_RETURN_IF_ERROR(
        UnpackPiece(env, temps[t].raw(), recv_pieces.offset(i), recv_pieces.shape(i), out, s->to_box));
  }
  for (Tensor& t : temps) env.pool->Give(t.ReleaseBuffer());
  Replace(env, local, std::move(out));
  return Status();
}

Status RunStep(const PlanStep& step, const Env& env, Tensor& local) {
  switch (step.kind) {
    case StepKind::kAllGather: return RunAllGather(step, env, local);
    case StepKind::kAllReduce: return RunAllReduce(step, env, local);
    case StepKind::kReduceScatter: return RunReduceScatter(step, env, local);
    case StepKind::kAllToAll: return RunAllToAll(step, env, local);
    case StepKind::kLocalSlice: return RunLocalSlice(step, env, local);
    case StepKind::kLocalPartial: return RunLocalPartial(step, env, local);
    case StepKind::kSendRecv: return RunSendRecv(step, env, local);
    case StepKind::kLocalShardToPartial: return RunLocalShardToPartial(step, env, local);
  }
  return InternalError("unknown step kind");
}

// The steps, in order, as work of the communication stream (the caller is inside that work).
Status RunSteps(const Plan& plan, const Env& env, Tensor& local) {
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PlanStep& step = plan.steps[i];
    Status s = RunStep(step, env, local);
    if (!s.ok()) {
      return s.WithContext("step " + std::to_string(i) + " (" + std::string(StepKindName(step.kind)) + ")");
    }
  }
  return Status();
}

Status CheckPlanArgs(const Plan& plan, RankContext& ctx, const Tensor& local) {
  if (!(plan.from.mesh() == ctx.mesh())) {
    return InvalidArgumentError("plan is for " + plan.from.mesh().ToString() + " but the communicators are for " +
                                ctx.mesh().ToString());
  }
  if (local.dtype() != plan.dtype) {
    return InvalidArgumentError("plan is for dtype " + std::string(DTypeName(plan.dtype)) +
                                " but the local tensor is " + std::string(DTypeName(local.dtype())));
  }
  if (local.device() != ctx.device()) {
    return InvalidArgumentError("the local tensor is on " + local.device().ToString() + " but the rank runs on " +
                                ctx.device().ToString());
  }
  return CheckLocal(plan.from, ctx.world_rank(), local, "ExecutePlan");
}

// `local`'s bytes are used on the communication stream (device tensors from compute).
void UseOnComm(RankContext& ctx, Tensor& local) {
  if (!local.is_host()) local.mutable_buffer().RecordStream(ctx.comm_stream_ptr());
}

// A result of communication, handed to compute once the compute stream waits for it.
void HandToCompute(RankContext& ctx, Tensor& local) {
  if (!local.is_host()) local.mutable_buffer().Rehome(ctx.compute_stream_ptr());
}

}  // namespace

Status ExecuteStep(const PlanStep& step, RankContext& ctx, Tensor& local) {
  MF_RETURN_IF_ERROR(CheckLocal(step.from, ctx.world_rank(), local, "ExecuteStep"));
  const Env env = MakeEnv(ctx);
  UseOnComm(ctx, local);
  Status s = ctx.RunCollective([&]() { return RunStep(step, env, local); }, "plan step");
  HandToCompute(ctx, local);
  return s;
}

Status ExecutePlan(const Plan& plan, RankContext& ctx, Tensor& local) {
  MF_RETURN_IF_ERROR(CheckPlanArgs(plan, ctx, local));
  if (plan.steps.empty()) return Status();
  const Env env = MakeEnv(ctx);
  UseOnComm(ctx, local);
  Status s = ctx.RunCollective([&]() { return RunSteps(plan, env, local); }, "plan");
  HandToCompute(ctx, local);
  return s;
}

StatusOr<PendingTensor> ExecutePlanAsync(std::shared_ptr<const Plan> plan, RankContext& ctx, Tensor local,
                                         const char* label) {
  if (plan == nullptr) return InvalidArgumentError("ExecutePlanAsync: null plan");
  MF_RETURN_IF_ERROR(CheckPlanArgs(*plan, ctx, local));
  auto st = std::make_shared<PendingTensorState>();
  st->local = std::move(local);
  st->compute = ctx.compute_stream_ptr();
  PendingTensor pending(st);
  if (plan->steps.empty()) return pending;
  UseOnComm(ctx, st->local);
  const Env env = MakeEnv(ctx);
  Stream& comm = ctx.comm_stream();
  MF_RETURN_IF_ERROR(StreamWaitStream(comm, ctx.compute_stream()));
  // The work owns what it touches: the plan and the state (tensor, status).
  MF_RETURN_IF_ERROR(comm.Enqueue(
      [st, plan, env]() {
        st->status = RunSteps(*plan, env, st->local);
        st->ran.store(true, std::memory_order_release);
        return Status();  // the error goes to Wait, not to the stream
      },
      label));
  MF_ASSIGN_OR_RETURN(st->done, comm.RecordEvent());
  return pending;
}

namespace {

// True when every plan is one all_reduce over the same mesh dims and reduction, and every tensor has
// one dtype: the bucket can be reduced by one all_reduce of the packed locals.
bool FusableAllReduce(const std::vector<std::shared_ptr<const Plan>>& plans) {
  if (plans.size() < 2) return false;
  const PlanStep* first = nullptr;
  for (const auto& p : plans) {
    if (p->steps.size() != 1 || p->steps[0].kind != StepKind::kAllReduce) return false;
    const PlanStep& s = p->steps[0];
    if (first == nullptr) {
      first = &s;
      continue;
    }
    if (s.mesh_dims != first->mesh_dims || s.from.partial_op() != first->from.partial_op() ||
        p->dtype != plans[0]->dtype) {
      return false;
    }
  }
  return true;
}

// One all_reduce of the packed locals (FusableAllReduce), written back into each local.
Status RunFusedAllReduce(const PlanStep& step, const Env& env, std::vector<std::shared_ptr<PendingTensorState>>& sts) {
  MF_ASSIGN_OR_RETURN(GroupInfo g, GetGroup(env, step.mesh_dims));
  const std::optional<ReduceOp> op = step.from.partial_op();
  if (!op) return InternalError("all_reduce step from a layout without Partial: " + step.from.ToString());
  const DType dtype = sts[0]->local.dtype();
  int64_t total = 0;
  for (const auto& st : sts) total += st->local.NumElements();
  const int64_t es = DTypeSize(dtype);
  MF_ASSIGN_OR_RETURN(TensorBuffer flat, env.pool->Take(total * es));
  int64_t pos = 0;
  for (const auto& st : sts) {
    MF_RETURN_IF_ERROR(env.rt->Copy(flat.data() + pos, st->local.raw(), st->local.NumBytes(), *env.stream));
    pos += st->local.NumBytes();
  }
  MF_RETURN_IF_ERROR(g.comm->AllReduce(flat.data(), flat.data(), total, dtype, *op, *env.stream));
  pos = 0;
  for (const auto& st : sts) {
    MF_RETURN_IF_ERROR(env.rt->Copy(st->local.raw(), flat.data() + pos, st->local.NumBytes(), *env.stream));
    pos += st->local.NumBytes();
  }
  env.pool->Give(std::move(flat));
  return Status();
}

}  // namespace

StatusOr<std::vector<PendingTensor>> ExecutePlansAsync(std::vector<std::shared_ptr<const Plan>> plans, RankContext& ctx,
                                                       std::vector<Tensor> locals) {
  if (plans.size() != locals.size()) {
    return InvalidArgumentError("ExecutePlansAsync: " + std::to_string(plans.size()) + " plans for " +
                                std::to_string(locals.size()) + " tensors");
  }
  std::vector<std::shared_ptr<PendingTensorState>> sts;
  std::vector<PendingTensor> out;
  for (size_t i = 0; i < plans.size(); ++i) {
    if (plans[i] == nullptr) return InvalidArgumentError("ExecutePlansAsync: null plan " + std::to_string(i));
    MF_RETURN_IF_ERROR(CheckPlanArgs(*plans[i], ctx, locals[i]));
    auto st = std::make_shared<PendingTensorState>();
    st->local = std::move(locals[i]);
    st->compute = ctx.compute_stream_ptr();
    UseOnComm(ctx, st->local);
    sts.push_back(st);
    out.emplace_back(st);
  }
  if (plans.empty()) return out;
  const Env env = MakeEnv(ctx);
  const bool fused = FusableAllReduce(plans);
  Stream& comm = ctx.comm_stream();
  MF_RETURN_IF_ERROR(StreamWaitStream(comm, ctx.compute_stream()));
  MF_RETURN_IF_ERROR(comm.Enqueue(
      [sts, plans, env, fused]() mutable {
        if (fused) {
          const Status s = RunFusedAllReduce(plans[0]->steps[0], env, sts).WithContext("bucket all_reduce");
          for (auto& st : sts) st->status = s;
        } else {
          for (size_t i = 0; i < sts.size(); ++i) sts[i]->status = RunSteps(*plans[i], env, sts[i]->local);
        }
        for (auto& st : sts) st->ran.store(true, std::memory_order_release);
        return Status();  // errors go to Wait
      },
      fused ? "bucket (fused all_reduce)" : "bucket"));
  MF_ASSIGN_OR_RETURN(std::shared_ptr<Event> done, comm.RecordEvent());
  for (auto& st : sts) st->done = done;
  return out;
}

}  // namespace meshflow
