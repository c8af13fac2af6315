// NcclCommunicator on every visible GPU of this process (NcclWorld, ncclCommInitAll): every
// collective through the host-buffer API (what the executor uses) and the device API, uneven and
// empty counts, all dtypes and ops (exact mode: bit-identical to ReduceBuffers; native mode on
// small integers), Split, NcclGroup, byte counters, argument errors and the timeout. With one GPU the
// world has size 1, which still runs every code path except the NCCL transfers between ranks.
// Without a device every test but the "no device" one skips.
#include "meshflow/collectives/nccl/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/cuda/cuda_status.h"
#include "meshflow/cuda/cuda_test_util.h"
#include "meshflow/collectives/reduce.h"

namespace meshflow {
namespace {

NcclWorld& World(NcclReduction reduction = NcclReduction::kExact) {
  static std::unique_ptr<NcclWorld>* worlds = new std::unique_ptr<NcclWorld>[2];
  auto& w = worlds[reduction == NcclReduction::kExact ? 0 : 1];
  if (!w) {
    NcclOptions opts;
    opts.timeout = std::chrono::seconds(120);
    opts.reduction = reduction;
    auto created = NcclWorld::Create({}, opts);
    EXPECT_TRUE(created.ok()) << created.status();
    if (created.ok()) w = std::move(*created);
  }
  return *w;
}

const DType kDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};

// Value of element j on rank r: a small integer, exact in every dtype and every reduction order.
double Value(int r, int64_t j) { return static_cast<double>((r * 7 + j) % 13 - 6); }

std::vector<std::byte> Fill(DType dtype, int64_t count, int r, int64_t offset = 0) {
  std::vector<std::byte> out(static_cast<size_t>(count * DTypeSize(dtype)));
  VisitDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = reinterpret_cast<T*>(out.data());
    for (int64_t i = 0; i < count; ++i) {
      if constexpr (std::is_same_v<T, BFloat16>) {
        p[i] = BFloat16(static_cast<float>(Value(r, offset + i)));
      } else {
        p[i] = static_cast<T>(Value(r, offset + i));
      }
    }
  });
  return out;
}

// Uneven counts with empty blocks: rank r gets (r * 3 + salt) % 5 elements (0 for some ranks).
std::vector<int64_t> UnevenCounts(int n, int salt) {
  std::vector<int64_t> c(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) c[static_cast<size_t>(r)] = (r * 3 + salt) % 5;
  return c;
}

// Reduce-scatter of every rank's Fill(dtype, total, r) with `counts` on rank comm.rank(), compared
// with ReduceBuffers of the ranks' blocks (EXPECT_EQ, message `label`). Returns every rank's input.
StatusOr<std::vector<std::vector<std::byte>>> ExpectReduceScatter(NcclCommunicator& comm,
                                                                  const std::vector<int64_t>& counts, DType dtype,
                                                                  ReduceOp op, const std::string& label) {
  const int n = comm.size(), me = comm.rank();
  const int64_t es = DTypeSize(dtype);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  int64_t off = 0;
  for (int r = 0; r < me; ++r) off += counts[static_cast<size_t>(r)];
  std::vector<std::vector<std::byte>> all;
  std::vector<const void*> inputs;
  for (int r = 0; r < n; ++r) all.push_back(Fill(dtype, total, r));
  for (int r = 0; r < n; ++r) inputs.push_back(all[static_cast<size_t>(r)].data() + off * es);
  const int64_t mine = counts[static_cast<size_t>(me)];
  std::vector<std::byte> want(static_cast<size_t>(mine * es)), got(want.size());
  MF_RETURN_IF_ERROR(ReduceBuffers(inputs, want.data(), mine, dtype, op));
  MF_RETURN_IF_ERROR(comm.ReduceScatterV(all[static_cast<size_t>(me)].data(), counts, got.data(), dtype, op));
  EXPECT_EQ(got, want) << label;
  return all;
}

// In-place all-reduce of the first `count` elements of in[comm.rank()] (every rank's input in `in`),
// compared with ReduceBuffers over all ranks (EXPECT_EQ, message `label`).
Status ExpectAllReduce(NcclCommunicator& comm, const std::vector<std::vector<std::byte>>& in, int64_t count,
                       DType dtype, ReduceOp op, const std::string& label) {
  std::vector<const void*> ptrs;
  for (const auto& v : in) ptrs.push_back(v.data());
  std::vector<std::byte> expect(static_cast<size_t>(count * DTypeSize(dtype)));
  MF_RETURN_IF_ERROR(ReduceBuffers(ptrs, expect.data(), count, dtype, op));
  std::vector<std::byte> buf = in[static_cast<size_t>(comm.rank())];
  MF_RETURN_IF_ERROR(comm.AllReduce(buf.data(), buf.data(), count, dtype, op));
  EXPECT_EQ(buf, expect) << label;
  return Status();
}

std::string OpLabel(const char* what, DType dtype, ReduceOp op) {
  return std::string(what) + " " + std::string(DTypeName(dtype)) + " " + std::string(ReduceOpName(op));
}

TEST(NcclCommunicatorTest, CreateWithoutDeviceIsUnavailable) {
  if (NoCudaDeviceReason().empty()) GTEST_SKIP() << "a CUDA device is present";
  auto world = NcclWorld::Create();
  ASSERT_FALSE(world.ok());
  EXPECT_EQ(world.status().code(), StatusCode::kUnavailable) << world.status();
  EXPECT_NE(world.status().message().find("no CUDA device"), std::string::npos) << world.status();
}

TEST(NcclCommunicatorTest, DuplicateDeviceIsRejected) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  auto world = NcclWorld::Create({0, 0});
  ASSERT_FALSE(world.ok());
  EXPECT_EQ(world.status().code(), StatusCode::kInvalidArgument) << world.status();
}

TEST(NcclCommunicatorTest, AllGatherVUnevenAndEmpty) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  NcclWorld& world = World();
  for (DType dtype : kDTypes) {
    for (int salt : {0, 1, 2}) {
      ASSERT_TRUE(world.Run([&](NcclCommunicator& comm) -> Status {
        const int n = comm.size();
        std::vector<int64_t> counts = salt == 2 ? std::vector<int64_t>(static_cast<size_t>(n), 3)
                                                : UnevenCounts(n, salt);
        const int me = comm.rank();
        int64_t off = 0;
        std::vector<std::byte> want;
        for (int r = 0; r < n; ++r) {
          const auto block = Fill(dtype, counts[static_cast<size_t>(r)], r);
          want.insert(want.end(), block.begin(), block.end());
          if (r < me) off += counts[static_cast<size_t>(r)];
        }
        const auto send = Fill(dtype, counts[static_cast<size_t>(me)], me);
        std::vector<std::byte> recv(want.size(), std::byte{0x5a});
        MF_RETURN_IF_ERROR(comm.AllGatherV(send.data(), counts[static_cast<size_t>(me)], recv.data(), counts, dtype));
        EXPECT_EQ(recv, want) << DTypeName(dtype) << " salt " << salt << " rank " << me;
        (void)off;
        return Status();
      }).ok());
    }
  }
}

TEST(NcclCommunicatorTest, ReduceScatterVAndAllReduceExactMatchReduceBuffers) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  NcclWorld& world = World();
  for (DType dtype : kDTypes) {
    for (ReduceOp op : kOps) {
      ASSERT_TRUE(world.Run([&](NcclCommunicator& comm) -> Status {
        const int n = comm.size();
        // Reduce-scatter with uneven counts.
        const std::vector<int64_t> counts = UnevenCounts(n, 1);
        MF_RETURN_IF_ERROR(ExpectReduceScatter(comm, counts, dtype, op, OpLabel("reduce_scatter", dtype, op)).status());
        // All-reduce, several counts (including 0 and counts not divisible by n), in place.
        for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1001}}) {
          std::vector<std::vector<std::byte>> in;
          for (int r = 0; r < n; ++r) in.push_back(Fill(dtype, count, r, 3));
          MF_RETURN_IF_ERROR(ExpectAllReduce(comm, in, count, dtype, op,
                                             OpLabel("all_reduce", dtype, op) + " count " + std::to_string(count)));
        }
        return Status();
      }).ok());
    }
  }
}

TEST(NcclCommunicatorTest, NativeReductionsOnSmallIntegers) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  NcclWorld& world = World(NcclReduction::kNative);
  for (DType dtype : {DType::kF32, DType::kF64, DType::kI32, DType::kI64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
      ASSERT_TRUE(world.Run([&](NcclCommunicator& comm) -> Status {
        const int n = comm.size();
        for (int salt : {0, 1}) {
          const std::vector<int64_t> counts = salt == 0 ? std::vector<int64_t>(static_cast<size_t>(n), 4)
                                                        : UnevenCounts(n, 2);
          const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
          MF_ASSIGN_OR_RETURN(
              std::vector<std::vector<std::byte>> all,
              ExpectReduceScatter(comm, counts, dtype, op, "native " + OpLabel("reduce_scatter", dtype, op)));
          MF_RETURN_IF_ERROR(
              ExpectAllReduce(comm, all, total, dtype, op, "native " + OpLabel("all_reduce", dtype, op)));
        }
        return Status();
      }).ok());
    }
  }
}

TEST(NcclCommunicatorTest, AllToAllVBroadcastSendRecvBarrier) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  NcclWorld& world = World();
  ASSERT_TRUE(world.Run([&](NcclCommunicator& comm) -> Status {
    const int n = comm.size(), me = comm.rank();
    const DType dt = DType::kI32;
    // all_to_all: rank r sends (r + s) % 3 elements to rank s, valued 100 * r + s.
    auto cnt = [](int r, int s) { return static_cast<int64_t>((r + s) % 3); };
    std::vector<int64_t> sc(static_cast<size_t>(n)), rc(static_cast<size_t>(n));
    std::vector<int32_t> send, want;
    for (int s = 0; s < n; ++s) {
      sc[static_cast<size_t>(s)] = cnt(me, s);
      rc[static_cast<size_t>(s)] = cnt(s, me);
      for (int64_t i = 0; i < cnt(me, s); ++i) send.push_back(100 * me + s);
      for (int64_t i = 0; i < cnt(s, me); ++i) want.push_back(100 * s + me);
    }
    std::vector<int32_t> recv(want.size(), -1);
    MF_RETURN_IF_ERROR(comm.AllToAllV(send.data(), sc, recv.data(), rc, dt));
    EXPECT_EQ(recv, want) << "all_to_all rank " << me;
    // broadcast from every root.
    for (int root = 0; root < n; ++root) {
      std::vector<int32_t> buf(5, me == root ? 42 + root : -1);
      MF_RETURN_IF_ERROR(comm.Broadcast(buf.data(), 5, dt, root));
      EXPECT_EQ(buf, std::vector<int32_t>(5, 42 + root)) << "broadcast root " << root;
    }
    // send_recv ring plus a transfer to self.
    const int next = (me + 1) % n, prev = (me + n - 1) % n;
    std::vector<int32_t> out(3, me), in(3, -1), self_out(2, 7 * me), self_in(2, -1);
    const SendSpec sends[] = {{next, out.data(), 3}, {me, self_out.data(), 2}};
    const RecvSpec recvs[] = {{prev, in.data(), 3}, {me, self_in.data(), 2}};
    MF_RETURN_IF_ERROR(comm.SendRecv(sends, recvs, dt));
    EXPECT_EQ(in, std::vector<int32_t>(3, prev));
    EXPECT_EQ(self_in, self_out);
    return comm.Barrier();
  }).ok());
}

TEST(NcclCommunicatorTest, SplitOrdersByKeyAndReducesInGroup) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  NcclWorld& world = World();
  ASSERT_TRUE(world.Run([&](NcclCommunicator& comm) -> Status {
    const int n = comm.size(), me = comm.rank();
    MF_ASSIGN_OR_RETURN(std::shared_ptr<Communicator> sub, comm.Split(me % 2, -me));
    if (!sub) return InternalError("split returned null for a non-negative color");
    std::vector<int> expected;
    for (int r = n - 1; r >= 0; --r) {
      if (r % 2 == me % 2) expected.push_back(r);
    }
    EXPECT_EQ(sub->world_ranks(), expected);
    EXPECT_EQ(sub->backend(), "nccl");
    int64_t x = me;
    MF_RETURN_IF_ERROR(sub->AllReduce(&x, &x, 1, DType::kI64, ReduceOp::kSum));
    int64_t sum = 0;
    for (int r : expected) sum += r;
    EXPECT_EQ(x, sum);
    MF_ASSIGN_OR_RETURN(std::shared_ptr<Communicator> none, comm.Split(me == 0 ? -1 : 0, 0));
    EXPECT_EQ(none == nullptr, me == 0);
    return Status();
  }).ok());
}

TEST(NcclCommunicatorTest, DeviceApiAndGroups) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  NcclWorld& world = World();
  ASSERT_TRUE(world.Run([&](NcclCommunicator& comm) -> Status {
    const int n = comm.size(), me = comm.rank();
    cudaStream_t stream = nullptr;
    MF_RETURN_IF_ERROR(CheckCuda(cudaStreamCreate(&stream), "cudaStreamCreate", "test"));
    const int64_t count = 1 << 16;
    float *a = nullptr, *b = nullptr, *c = nullptr;
    MF_RETURN_IF_ERROR(CheckCuda(cudaMalloc(&a, count * sizeof(float)), "cudaMalloc", "test"));
    MF_RETURN_IF_ERROR(CheckCuda(cudaMalloc(&b, n * count * sizeof(float)), "cudaMalloc", "test"));
    MF_RETURN_IF_ERROR(CheckCuda(cudaMalloc(&c, n * count * sizeof(float)), "cudaMalloc", "test"));
    std::vector<float> host(static_cast<size_t>(count), static_cast<float>(me + 1));
    MF_RETURN_IF_ERROR(CheckCuda(cudaMemcpy(a, host.data(), count * sizeof(float), cudaMemcpyHostToDevice), "memcpy", ""));
    // Exact all-reduce on the device, in place.
    MF_RETURN_IF_ERROR(comm.DeviceAllReduce(a, a, count, DType::kF32, ReduceOp::kSum, stream));
    MF_RETURN_IF_ERROR(comm.Synchronize(stream));
    MF_RETURN_IF_ERROR(CheckCuda(cudaMemcpy(host.data(), a, count * sizeof(float), cudaMemcpyDeviceToHost), "memcpy", ""));
    EXPECT_EQ(host[0], static_cast<float>(n * (n + 1) / 2));
    EXPECT_EQ(host[static_cast<size_t>(count - 1)], static_cast<float>(n * (n + 1) / 2));
    // Two all-gathers fused in one group.
    {
      NcclGroup group;
      MF_RETURN_IF_ERROR(comm.DeviceAllGather(a, b, count, DType::kF32, stream));
      MF_RETURN_IF_ERROR(comm.DeviceAllGather(a, c, count, DType::kF32, stream));
      // Inside a group: exact reductions and the host API are refused.
      Status refused = comm.DeviceAllReduce(a, a, count, DType::kF32, ReduceOp::kSum, stream);
      EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition) << refused;
      int32_t x = 0;
      refused = comm.AllReduce(&x, &x, 1, DType::kI32, ReduceOp::kSum);
      EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition) << refused;
      MF_RETURN_IF_ERROR(group.End());
      EXPECT_EQ(group.End().code(), StatusCode::kFailedPrecondition);
    }
    MF_RETURN_IF_ERROR(comm.Synchronize(stream));
    std::vector<float> gathered(static_cast<size_t>(n * count));
    MF_RETURN_IF_ERROR(CheckCuda(cudaMemcpy(gathered.data(), c, n * count * sizeof(float), cudaMemcpyDeviceToHost), "memcpy", ""));
    EXPECT_EQ(gathered.back(), static_cast<float>(n * (n + 1) / 2));
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    cudaStreamDestroy(stream);
    return Status();
  }).ok());
}

TEST(NcclCommunicatorTest, CountersAndArgumentErrors) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  NcclWorld& world = World();
  world.ResetCounters();
  ASSERT_TRUE(world.Run([&](NcclCommunicator& comm) -> Status {
    const int n = comm.size();
    std::vector<float> send(4, 1.0f), recv(static_cast<size_t>(4 * n));
    MF_RETURN_IF_ERROR(comm.AllGather(send.data(), recv.data(), 4, DType::kF32));
    EXPECT_EQ(comm.counters(), (ByteCounters{(n - 1) * 16, (n - 1) * 16}));
    const std::vector<int64_t> wrong_size(static_cast<size_t>(n + 1), 1);
    Status s = comm.AllGatherV(send.data(), 1, recv.data(), wrong_size, DType::kF32);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("nccl all_gather"), std::string::npos) << s;
    s = comm.Broadcast(send.data(), 1, DType::kF32, n);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
    return Status();
  }).ok());
}

TEST(NcclCommunicatorTest, MissingPeerTimesOutAndAborts) {
  MF_SKIP_WITHOUT_CUDA_DEVICE();
  auto count = CudaDeviceCount();
  ASSERT_TRUE(count.ok());
  if (*count < 2) GTEST_SKIP() << "needs 2 GPUs (one process cannot hold two ranks on one GPU)";
  NcclOptions opts;
  opts.timeout = std::chrono::seconds(3);
  auto world = NcclWorld::Create({0, 1}, opts);
  ASSERT_TRUE(world.ok()) << world.status();
  Status run = (*world)->Run([&](NcclCommunicator& comm) -> Status {
    if (comm.rank() == 1) return Status();  // never joins
    float x = 1;
    Status s = comm.AllReduce(&x, &x, 1, DType::kF32, ReduceOp::kSum);
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
    EXPECT_NE(s.message().find("all_reduce"), std::string::npos) << s;
    EXPECT_NE(s.message().find("group rank 0"), std::string::npos) << s;
    EXPECT_EQ(comm.Barrier().code(), StatusCode::kAborted);
    return Status();
  });
  EXPECT_TRUE(run.ok()) << run;
}

}  // namespace
}  // namespace meshflow
