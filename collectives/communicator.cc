#include "meshflow/collectives/communicator.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace meshflow {

namespace {
Status CheckStridedBlock(const StridedBlock& b, const std::string& what) {
  if (b.offset < 0 || b.rows < 0 || b.run < 0 || b.stride < 0) {
    return InvalidArgumentError(what + " has a negative field (offset " + std::to_string(b.offset) + ", rows " +
                                std::to_string(b.rows) + ", run " + std::to_string(b.run) + ", stride " +
                                std::to_string(b.stride) + ")");
  }
  if (b.rows > 1 && b.run > b.stride) {
    return InvalidArgumentError(what + " has overlapping runs: run " + std::to_string(b.run) + " > stride " +
                                std::to_string(b.stride));
  }
  return Status();
}
}  // namespace

Status CheckStridedBlocks(std::span<const StridedBlock> send_blocks, std::span<const StridedBlock> recv_blocks,
                          int group_size, std::vector<int64_t>& send_counts, std::vector<int64_t>& recv_counts) {
  const size_t n = static_cast<size_t>(group_size);
  if (send_blocks.size() != n || recv_blocks.size() != n) {
    return InvalidArgumentError("all_to_all (strided): " + std::to_string(send_blocks.size()) + " send blocks and " +
                                std::to_string(recv_blocks.size()) + " recv blocks for a group of " +
                                std::to_string(n));
  }
  send_counts.resize(n);
  recv_counts.resize(n);
  for (size_t q = 0; q < n; ++q) {
    MF_RETURN_IF_ERROR(CheckStridedBlock(send_blocks[q], "all_to_all (strided): send_blocks[" + std::to_string(q) + "]"));
    MF_RETURN_IF_ERROR(CheckStridedBlock(recv_blocks[q], "all_to_all (strided): recv_blocks[" + std::to_string(q) + "]"));
    send_counts[q] = send_blocks[q].count();
    recv_counts[q] = recv_blocks[q].count();
  }
  return Status();
}

void CopyStridedBlock(const void* src, const StridedBlock& from, void* dst, const StridedBlock& to, int64_t es) {
  const auto* s = static_cast<const std::byte*>(src);
  auto* d = static_cast<std::byte*>(dst);
  if (from.run == to.run) {  // row by row
    for (int64_t r = 0; r < from.rows; ++r) {
      std::memcpy(d + (to.offset + r * to.stride) * es, s + (from.offset + r * from.stride) * es,
                  static_cast<size_t>(from.run * es));
    }
    return;
  }
  // Walk both blocks at once, copying the longest piece that stays inside a run of each.
  int64_t left = from.count();
  int64_t sr = 0, so = 0, dr = 0, dof = 0;  // row and offset within the row, source and target
  while (left > 0) {
    const int64_t n = std::min({from.run - so, to.run - dof, left});
    std::memcpy(d + (to.offset + dr * to.stride + dof) * es, s + (from.offset + sr * from.stride + so) * es,
                static_cast<size_t>(n * es));
    left -= n;
    if ((so += n) == from.run) so = 0, ++sr;
    if ((dof += n) == to.run) dof = 0, ++dr;
  }
}

Status Communicator::AllToAllStrided(const void* send, std::span<const StridedBlock> send_blocks, void* recv,
                                     std::span<const StridedBlock> recv_blocks, DType dtype, CallerSite where) {
  const size_t n = static_cast<size_t>(size());
  std::vector<int64_t> send_counts, recv_counts;
  MF_RETURN_IF_ERROR(CheckStridedBlocks(send_blocks, recv_blocks, size(), send_counts, recv_counts));
  const int64_t es = DTypeSize(dtype);
  int64_t send_total = 0, recv_total = 0;
  for (size_t q = 0; q < n; ++q) send_total += send_counts[q], recv_total += recv_counts[q];
  std::vector<std::byte> packed(static_cast<size_t>(send_total * es)), unpacked(static_cast<size_t>(recv_total * es));
  int64_t pos = 0;
  for (size_t q = 0; q < n; ++q) {
    if (send_counts[q] > 0) {
      CopyStridedBlock(send, send_blocks[q], packed.data(), StridedBlock{pos, 1, send_counts[q], send_counts[q]}, es);
    }
    pos += send_counts[q];
  }
  MF_RETURN_IF_ERROR(AllToAllV(packed.data(), send_counts, unpacked.data(), recv_counts, dtype, where));
  pos = 0;
  for (size_t q = 0; q < n; ++q) {
    if (recv_counts[q] > 0) {
      CopyStridedBlock(unpacked.data(), StridedBlock{pos, 1, recv_counts[q], recv_counts[q]}, recv, recv_blocks[q], es);
    }
    pos += recv_counts[q];
  }
  return Status();
}

Status Communicator::CheckStream(const Stream& stream, const char* what) const {
  if (stream.device() == device()) return Status::Ok();
  return InvalidArgumentError(std::string(what) + " on the " + backend() + " backend (buffers on " +
                              device().ToString() + ") was given stream '" + stream.name() + "' of " +
                              stream.device().ToString());
}

Status Communicator::AllGatherVOnStream(const void* send, int64_t send_count, void* recv,
                                        std::span<const int64_t> recv_counts, DType dtype, Stream& stream,
                                        CallerSite where) {
  MF_RETURN_IF_ERROR(CheckStream(stream, "all_gather"));
  return AllGatherV(send, send_count, recv, recv_counts, dtype, where);
}

Status Communicator::ReduceScatterVOnStream(const void* send, std::span<const int64_t> counts, void* recv, DType dtype,
                                            ReduceOp op, Stream& stream, CallerSite where) {
  MF_RETURN_IF_ERROR(CheckStream(stream, "reduce_scatter"));
  return ReduceScatterV(send, counts, recv, dtype, op, where);
}

Status Communicator::AllReduceOnStream(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                                       Stream& stream, CallerSite where) {
  MF_RETURN_IF_ERROR(CheckStream(stream, "all_reduce"));
  return AllReduce(send, recv, count, dtype, op, where);
}

Status Communicator::AllToAllVOnStream(const void* send, std::span<const int64_t> send_counts, void* recv,
                                       std::span<const int64_t> recv_counts, DType dtype, Stream& stream,
                                       CallerSite where) {
  MF_RETURN_IF_ERROR(CheckStream(stream, "all_to_all"));
  return AllToAllV(send, send_counts, recv, recv_counts, dtype, where);
}

Status Communicator::BroadcastOnStream(void* buffer, int64_t count, DType dtype, int root, Stream& stream,
                                       CallerSite where) {
  MF_RETURN_IF_ERROR(CheckStream(stream, "broadcast"));
  return Broadcast(buffer, count, dtype, root, where);
}

Status Communicator::SendRecvOnStream(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs, DType dtype,
                                      Stream& stream) {
  MF_RETURN_IF_ERROR(CheckStream(stream, "send_recv"));
  return SendRecv(sends, recvs, dtype);
}

}  // namespace meshflow
