// StagedCommunicator on the fake GPU (runtime/fake_device.h: device memory is host memory, every
// stream asynchronous). Every collective of a 2-4 rank ThreadWorld, with each rank's buffers on its
// own fake GPU or all ranks on one, is compared with the threads backend on host buffers (bytes and
// byte counters), and the wrapped communicator is checked to see only host scratch, never a device
// buffer. The plan executor on RankContexts over StagedCommunicators is compared with
// ReferenceLocal. A stream that mimics a device queue checks the scratch's lifetime (a wait after
// the copies in, an event after the copies out, waited for before the scratch is reused or freed).
#include "meshflow/collectives/staged/staged_communicator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/collectives/communicator.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/dtensor/placement.h"
#include "meshflow/dtensor/tensor.h"
#include "meshflow/mesh/device_mesh.h"
#include "meshflow/planner/plan.h"
#include "meshflow/planner/planner.h"
#include "meshflow/runtime/device.h"
#include "meshflow/runtime/device_runtime.h"
#include "meshflow/runtime/executor.h"
#include "meshflow/runtime/fake_device.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/runtime/stream.h"

namespace meshflow {
namespace {

// Forwards to a host communicator and remembers every buffer it was given (and, with a log, the
// collectives it ran), so that a test can check that no device buffer reached it.
class RecordingCommunicator final : public Communicator {
 public:
  explicit RecordingCommunicator(Communicator& inner, std::vector<std::string>* log = nullptr)
      : inner_(inner), log_(log) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  int world_rank() const override { return inner_.world_rank(); }
  const std::vector<int>& world_ranks() const override { return inner_.world_ranks(); }
  std::string backend() const override { return inner_.backend(); }
  Status AllGatherV(const void* send, int64_t n, void* recv, std::span<const int64_t> counts, DType dtype,
                    CallerSite where) override {
    Note("all_gather", {send, recv});
    return inner_.AllGatherV(send, n, recv, counts, dtype, where);
  }
  Status ReduceScatterV(const void* send, std::span<const int64_t> counts, void* recv, DType dtype, ReduceOp op,
                        CallerSite where) override {
    Note("reduce_scatter", {send, recv});
    return inner_.ReduceScatterV(send, counts, recv, dtype, op, where);
  }
  Status AllReduce(const void* send, void* recv, int64_t n, DType dtype, ReduceOp op, CallerSite where) override {
    Note("all_reduce", {send, recv});
    return inner_.AllReduce(send, recv, n, dtype, op, where);
  }
  Status AllToAllV(const void* send, std::span<const int64_t> sc, void* recv, std::span<const int64_t> rc, DType dtype,
                   CallerSite where) override {
    Note("all_to_all", {send, recv});
    return inner_.AllToAllV(send, sc, recv, rc, dtype, where);
  }
  Status Broadcast(void* buffer, int64_t n, DType dtype, int root, CallerSite where) override {
    Note("broadcast", {buffer});
    return inner_.Broadcast(buffer, n, dtype, root, where);
  }
  Status Barrier(CallerSite where) override { return inner_.Barrier(where); }
  Status SendRecv(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs, DType dtype) override {
    std::vector<const void*> p;
    for (const SendSpec& s : sends) p.push_back(s.buffer);
    for (const RecvSpec& r : recvs) p.push_back(r.buffer);
    Note("send_recv", p);
    return inner_.SendRecv(sends, recvs, dtype);
  }
  StatusOr<std::shared_ptr<Communicator>> Split(int color, int key, CallerSite where) override {
    return inner_.Split(color, key, where);
  }
  ByteCounters counters() const override { return inner_.counters(); }
  void ResetCounters() override { inner_.ResetCounters(); }

  const std::vector<const void*>& pointers() const { return pointers_; }

 private:
  void Note(const char* what, std::vector<const void*> p) {
    pointers_.insert(pointers_.end(), p.begin(), p.end());
    if (log_ != nullptr) log_->push_back(what);
  }
  Communicator& inner_;
  std::vector<std::string>* log_;
  std::vector<const void*> pointers_;
};

// `count` elements of `dtype` with small integer values (exact in every dtype), different per seed.
std::vector<std::byte> Values(DType dtype, int64_t count, int seed) {
  std::vector<std::byte> out(static_cast<size_t>(count * DTypeSize(dtype)));
  VisitDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = reinterpret_cast<T*>(out.data());
    for (int64_t i = 0; i < count; ++i) {
      const int v = static_cast<int>((seed * 31 + i * 7) % 23) - 11;
      if constexpr (std::is_same_v<T, BFloat16>) {
        p[i] = BFloat16(static_cast<float>(v));
      } else {
        p[i] = static_cast<T>(v);
      }
    }
  });
  return out;
}

// One collective: this rank's input and output sizes, and the call on a communicator with host
// buffers (stream null: the blocking form) or device buffers (a stream: the stream-ordered form).
struct Case {
  std::string name;
  DType dtype = DType::kF32;
  bool in_place = false;  // the input is the output buffer
  std::function<int64_t(int r, int n)> in_count, out_count;
  std::function<Status(Communicator& c, const void* in, void* out, Stream* s)> run;
};

std::vector<int64_t> UnevenCounts(int n) {  // includes an empty block for n >= 2
  std::vector<int64_t> c(static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) c[static_cast<size_t>(q)] = (q * 3 + 1) % 4;
  return c;
}

std::vector<Case> CollectiveCases(DType dtype) {
  std::vector<Case> cases;
  cases.push_back({"all_gather_v", dtype, false, [](int r, int n) { return UnevenCounts(n)[static_cast<size_t>(r)]; },
                   [](int, int n) {
                     const auto c = UnevenCounts(n);
                     return std::accumulate(c.begin(), c.end(), int64_t{0});
                   },
                   [dtype](Communicator& c, const void* in, void* out, Stream* s) {
                     const auto counts = UnevenCounts(c.size());
                     const int64_t mine = counts[static_cast<size_t>(c.rank())];
                     return s ? c.AllGatherV(in, mine, out, counts, dtype, *s)
                              : c.AllGatherV(in, mine, out, counts, dtype);
                   }});
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
    cases.push_back({"reduce_scatter_v " + std::string(ReduceOpName(op)), dtype, false,
                     [](int, int n) {
                       const auto c = UnevenCounts(n);
                       return std::accumulate(c.begin(), c.end(), int64_t{0});
                     },
                     [](int r, int n) { return UnevenCounts(n)[static_cast<size_t>(r)]; },
                     [dtype, op](Communicator& c, const void* in, void* out, Stream* s) {
                       const auto counts = UnevenCounts(c.size());
                       return s ? c.ReduceScatterV(in, counts, out, dtype, op, *s)
                                : c.ReduceScatterV(in, counts, out, dtype, op);
                     }});
  }
  for (bool in_place : {false, true}) {
    cases.push_back({in_place ? "all_reduce in place" : "all_reduce", dtype, in_place, [](int, int) { return 13; },
                     [](int, int) { return 13; },
                     [dtype](Communicator& c, const void* in, void* out, Stream* s) {
                       return s ? c.AllReduce(in, out, 13, dtype, ReduceOp::kMin, *s)
                                : c.AllReduce(in, out, 13, dtype, ReduceOp::kMin);
                     }});
  }
  // Rank r sends (r + 2s) % 3 elements to s, so it receives (s + 2r) % 3 from s.
  auto send_counts = [](int r, int n) {
    std::vector<int64_t> c;
    for (int s = 0; s < n; ++s) c.push_back((r + 2 * s) % 3);
    return c;
  };
  auto recv_counts = [](int r, int n) {
    std::vector<int64_t> c;
    for (int s = 0; s < n; ++s) c.push_back((s + 2 * r) % 3);
    return c;
  };
  cases.push_back({"all_to_all_v", dtype, false,
                   [=](int r, int n) {
                     const auto c = send_counts(r, n);
                     return std::accumulate(c.begin(), c.end(), int64_t{0});
                   },
                   [=](int r, int n) {
                     const auto c = recv_counts(r, n);
                     return std::accumulate(c.begin(), c.end(), int64_t{0});
                   },
                   [=](Communicator& c, const void* in, void* out, Stream* s) {
                     const auto sc = send_counts(c.rank(), c.size()), rc = recv_counts(c.rank(), c.size());
                     return s ? c.AllToAllV(in, sc, out, rc, dtype, *s) : c.AllToAllV(in, sc, out, rc, dtype);
                   }});
  cases.push_back({"broadcast", dtype, true, [](int, int) { return 9; }, [](int, int) { return 9; },
                   [dtype](Communicator& c, const void*, void* out, Stream* s) {
                     return s ? c.Broadcast(out, 9, dtype, c.size() - 1, *s) : c.Broadcast(out, 9, dtype, c.size() - 1);
                   }});
  // A ring (r + 1 elements to the next rank) plus 2 elements to self.
  cases.push_back({"send_recv", dtype, false, [](int r, int) { return r + 1 + 2; },
                   [](int r, int n) { return (r + n - 1) % n + 1 + 2; },
                   [dtype](Communicator& c, const void* in, void* out, Stream* s) {
                     const int r = c.rank(), n = c.size(), prev = (r + n - 1) % n;
                     const int64_t es = DTypeSize(dtype);
                     const auto* i = static_cast<const std::byte*>(in);
                     auto* o = static_cast<std::byte*>(out);
                     const SendSpec sends[] = {{(r + 1) % n, i, r + 1}, {r, i + (r + 1) * es, 2}};
                     const RecvSpec recvs[] = {{prev, o, prev + 1}, {r, o + (prev + 1) * es, 2}};
                     return s ? c.SendRecv(sends, recvs, dtype, *s) : c.SendRecv(sends, recvs, dtype);
                   }});
  return cases;
}

ByteCounters Minus(ByteCounters a, ByteCounters b) {
  return {a.bytes_sent - b.bytes_sent, a.bytes_received - b.bytes_received};
}

// This rank's part of one case: the reference on `comm` (host buffers), then the staged call on
// device buffers. Returns "" or what differed.
StatusOr<std::string> RunCase(Communicator& comm, StagedCommunicator& staged, const RecordingCommunicator& rec,
                              DeviceRuntime& rt, Stream& stream, const Case& c) {
  const int r = comm.rank(), n = comm.size();
  const int64_t es = DTypeSize(c.dtype);
  const std::vector<std::byte> in = Values(c.dtype, c.in_count(r, n), r + 1);
  const int64_t out_bytes = c.out_count(r, n) * es;
  std::vector<std::byte> want =
      c.in_place ? in : std::vector<std::byte>(static_cast<size_t>(out_bytes), std::byte{0xAB});
  MF_RETURN_IF_ERROR(comm.Barrier());
  const ByteCounters c0 = comm.counters();
  MF_RETURN_IF_ERROR(c.run(comm, c.in_place ? want.data() : in.data(), want.data(), nullptr));
  MF_RETURN_IF_ERROR(comm.Barrier());
  const ByteCounters c1 = comm.counters();

  const int64_t in_bytes = static_cast<int64_t>(in.size());
  MF_ASSIGN_OR_RETURN(void* din, rt.allocator().Allocate(in_bytes, &stream));
  MF_ASSIGN_OR_RETURN(void* dout, rt.allocator().Allocate(out_bytes, &stream));
  const std::byte pattern{0xAB};
  MF_RETURN_IF_ERROR(stream.Enqueue([&]() -> Status {
    MF_RETURN_IF_ERROR(rt.Copy(din, in.data(), in_bytes, stream));
    if (c.in_place) return rt.Copy(dout, in.data(), in_bytes, stream);
    return rt.Fill(dout, out_bytes, &pattern, 1, stream);
  }));
  const size_t seen = rec.pointers().size();
  MF_RETURN_IF_ERROR(stream.RunNow([&]() { return c.run(staged, c.in_place ? dout : din, dout, &stream); }));
  std::vector<std::byte> got(static_cast<size_t>(out_bytes));
  MF_RETURN_IF_ERROR(stream.Enqueue([&]() { return rt.Copy(got.data(), dout, out_bytes, stream); }));
  MF_RETURN_IF_ERROR(stream.Synchronize());
  MF_RETURN_IF_ERROR(comm.Barrier());
  const ByteCounters c2 = comm.counters();

  std::string failure;
  if (got != want) failure += " result differs from the threads backend's;";
  if (!(Minus(c2, c1) == Minus(c1, c0))) failure += " byte counters differ;";
  auto inside = [](const void* p, const void* base, int64_t bytes) {
    return p != nullptr && p >= base && static_cast<const std::byte*>(p) < static_cast<const std::byte*>(base) + bytes;
  };
  for (size_t i = seen; i < rec.pointers().size(); ++i) {
    const void* p = rec.pointers()[i];
    if (inside(p, din, in_bytes) || inside(p, dout, out_bytes)) failure += " a device buffer reached the host backend;";
  }
  rt.allocator().Deallocate(din, in_bytes, &stream);
  rt.allocator().Deallocate(dout, out_bytes, &stream);
  return failure;
}

// Each rank on its own fake GPU (cuda:rank), or every rank on cuda:0.
enum class Devices { kOwn, kShared };

std::string RunAllCases(int n, Devices where) {
  std::unique_ptr<ThreadWorld> world = std::move(ThreadWorld::Create(n).value());
  std::mutex mu;
  std::string failures;
  const Status run = world->Run([&](Communicator& comm) -> Status {
    const Device device = Device::Cuda(where == Devices::kOwn ? comm.rank() : 0);
    RecordingCommunicator rec(comm);
    MF_ASSIGN_OR_RETURN(std::shared_ptr<StagedCommunicator> staged, StagedCommunicator::Create(rec, device));
    MF_ASSIGN_OR_RETURN(DeviceRuntime * rt, GetDeviceRuntime(device));
    MF_ASSIGN_OR_RETURN(std::shared_ptr<Stream> stream, rt->NewStream("comm " + std::to_string(comm.rank())));
    for (DType dtype : {DType::kF32, DType::kI32, DType::kBF16}) {
      for (const Case& c : CollectiveCases(dtype)) {
        MF_ASSIGN_OR_RETURN(std::string f, RunCase(comm, *staged, rec, *rt, *stream, c));
        if (!f.empty()) {
          std::lock_guard<std::mutex> lock(mu);
          failures +=
              "\n  rank " + std::to_string(comm.rank()) + " " + c.name + " " + std::string(DTypeName(dtype)) + ":" + f;
        }
      }
    }
    return Status::Ok();
  });
  if (!run.ok()) return run.ToString();
  return failures;
}

TEST(StagedCommunicatorTest, EveryCollectiveMatchesTheThreadsBackend) {
  ASSERT_TRUE(InstallFakeCudaDevices());
  for (int n : {2, 3, 4}) {
    EXPECT_EQ(RunAllCases(n, Devices::kOwn), "") << n << " ranks, one fake GPU each";
    EXPECT_EQ(RunAllCases(n, Devices::kShared), "") << n << " ranks on fake cuda:0";
  }
}

// The blocking forms take host buffers and forward, AllToAllStrided included; the executor is told
// to pack strided pieces (the stream-ordered AllToAllStrided is not staged).
TEST(StagedCommunicatorTest, BlockingFormsForwardHostBuffers) {
  ASSERT_TRUE(InstallFakeCudaDevices());
  std::unique_ptr<ThreadWorld> world = std::move(ThreadWorld::Create(2).value());
  EXPECT_EQ(world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(std::shared_ptr<StagedCommunicator> staged, StagedCommunicator::Create(comm, Device::Cuda(0)));
    EXPECT_FALSE(staged->strided_all_to_all_is_direct());
    EXPECT_EQ(staged->backend(), "threads+staged");
    EXPECT_EQ(staged->device(), Device::Cuda(0));
    // 2x4 row-major; rank r sends column block [2q, 2q+2) to q; receives 2 rows x 2 from each.
    std::vector<int32_t> send(8), got(8, -1), want(8, -1);
    for (int i = 0; i < 8; ++i) send[static_cast<size_t>(i)] = 10 * comm.rank() + i;
    const StridedBlock sb[] = {{0, 2, 2, 4}, {2, 2, 2, 4}}, rb[] = {{0, 2, 2, 4}, {2, 2, 2, 4}};
    MF_RETURN_IF_ERROR(comm.AllToAllStrided(send.data(), sb, want.data(), rb, DType::kI32));
    MF_RETURN_IF_ERROR(staged->AllToAllStrided(send.data(), sb, got.data(), rb, DType::kI32));
    EXPECT_EQ(got, want);
    int64_t x = comm.rank() + 1;
    MF_RETURN_IF_ERROR(staged->AllReduce(&x, &x, 1, DType::kI64, ReduceOp::kSum));
    EXPECT_EQ(x, 3);
    return staged->Barrier();
  }),
            Status::Ok());
}

TEST(StagedCommunicatorTest, SplitWrapsTheSubCommunicator) {
  ASSERT_TRUE(InstallFakeCudaDevices());
  std::unique_ptr<ThreadWorld> world = std::move(ThreadWorld::Create(4).value());
  EXPECT_EQ(world->Run([&](Communicator& comm) -> Status {
    const Device device = Device::Cuda(comm.rank() % 2);
    MF_ASSIGN_OR_RETURN(std::shared_ptr<StagedCommunicator> staged, StagedCommunicator::Create(comm, device));
    MF_ASSIGN_OR_RETURN(std::shared_ptr<Communicator> row, staged->Split(comm.rank() / 2, comm.rank()));
    auto* staged_row = dynamic_cast<StagedCommunicator*>(row.get());
    EXPECT_NE(staged_row, nullptr);
    EXPECT_EQ(row->device(), device);
    EXPECT_EQ(row->size(), 2);
    MF_ASSIGN_OR_RETURN(DeviceRuntime * rt, GetDeviceRuntime(device));
    MF_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, rt->NewStream("row"));
    MF_ASSIGN_OR_RETURN(void* d, rt->allocator().Allocate(sizeof(int64_t), s.get()));
    int64_t x = comm.rank(), y = 0;
    MF_RETURN_IF_ERROR(s->RunNow([&]() -> Status {
      MF_RETURN_IF_ERROR(rt->Copy(d, &x, sizeof(x), *s));
      MF_RETURN_IF_ERROR(row->AllReduce(d, d, 1, DType::kI64, ReduceOp::kSum, *s));
      return rt->Copy(&y, d, sizeof(y), *s);
    }));
    MF_RETURN_IF_ERROR(s->Synchronize());
    EXPECT_EQ(y, comm.rank() < 2 ? 1 : 5);
    EXPECT_EQ(staged_row->scratch_bytes(), 8);  // the row's own scratch
    EXPECT_EQ(staged->scratch_bytes(), 0);
    rt->allocator().Deallocate(d, sizeof(int64_t), s.get());
    MF_ASSIGN_OR_RETURN(std::shared_ptr<Communicator> none, staged->Split(-1, 0));
    EXPECT_EQ(none, nullptr);
    return Status::Ok();
  }),
            Status::Ok());
}

TEST(StagedCommunicatorTest, CreateErrorsNameTheProblem) {
  ASSERT_TRUE(InstallFakeCudaDevices());
  std::unique_ptr<ThreadWorld> world = std::move(ThreadWorld::Create(1).value());
  EXPECT_EQ(world->Run([&](Communicator& comm) -> Status {
    StatusOr<std::shared_ptr<StagedCommunicator>> s = StagedCommunicator::Create(nullptr, Device::Cuda(0));
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    s = StagedCommunicator::Create(comm, Device::Host());
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("device host needs no staging"), std::string::npos) << s.status();
    FakeDeviceCommunicator on_gpu(comm, Device::Cuda(0));  // a communicator of device buffers
    s = StagedCommunicator::Create(on_gpu, Device::Cuda(0));
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("threads+fake-device communicator moves cuda:0 buffers"), std::string::npos)
        << s.status();
    return Status::Ok();
  }),
            Status::Ok());
}

TEST(StagedCommunicatorTest, StreamOrderedArgumentErrors) {
  ASSERT_TRUE(InstallFakeCudaDevices());
  std::unique_ptr<ThreadWorld> world = std::move(ThreadWorld::Create(1).value());
  EXPECT_EQ(world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(std::shared_ptr<StagedCommunicator> staged, StagedCommunicator::Create(comm, Device::Cuda(0)));
    MF_ASSIGN_OR_RETURN(DeviceRuntime * rt1, GetDeviceRuntime(Device::Cuda(1)));
    MF_ASSIGN_OR_RETURN(std::shared_ptr<Stream> other, rt1->NewStream("other"));
    float x[4] = {};
    Status s = other->RunNow([&]() { return staged->AllReduce(x, x, 4, DType::kF32, ReduceOp::kSum, *other); });
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("was given stream 'other' of cuda:1"), std::string::npos) << s;
    MF_ASSIGN_OR_RETURN(DeviceRuntime * rt0, GetDeviceRuntime(Device::Cuda(0)));
    MF_ASSIGN_OR_RETURN(std::shared_ptr<Stream> mine, rt0->NewStream("mine"));
    const int64_t two_counts[] = {2, 2};  // a group of 1 needs one count
    s = mine->RunNow([&]() { return staged->AllGatherV(x, 2, x, two_counts, DType::kF32, *mine); });
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("staged all_gather on group [0]"), std::string::npos) << s;
    return Status::Ok();
  }),
            Status::Ok());
}

// A stream that behaves like a device queue for the staged path: it has a native handle and runs
// work at once on the caller's thread (as a CUDA stream does), on fake cuda:0 (whose byte operations
// run at once). It logs its synchronizations and the events it hands out, into the log the
// wrapped communicator writes its collectives to.
class QueueLikeStream final : public Stream {
 public:
  explicit QueueLikeStream(std::vector<std::string>* log) : log_(log) {}
  Device device() const override { return Device::Cuda(0); }
  const std::string& name() const override { return name_; }
  Status Enqueue(std::function<Status()> work, const char*) override { return work(); }
  Status RunNow(std::function<Status()> work, const char*) override { return work(); }
  StatusOr<std::shared_ptr<Event>> RecordEvent() override {
    const std::string id = "event " + std::to_string(events_++);
    log_->push_back("record " + id);
    return std::shared_ptr<Event>(std::make_shared<LoggedEvent>(log_, id));
  }
  Status WaitEvent(std::shared_ptr<Event> e) override { return e->Synchronize(); }
  bool Query() override { return true; }
  Status Synchronize() override {
    log_->push_back("synchronize stream");
    return Status::Ok();
  }
  Status status() const override { return Status::Ok(); }
  void* native_handle() const override { return const_cast<QueueLikeStream*>(this); }
  void set_record_timeline(bool) override {}
  std::vector<StreamRecord> TakeTimeline() override { return {}; }
  StreamStats stats() const override { return {}; }

 private:
  class LoggedEvent final : public Event {
   public:
    LoggedEvent(std::vector<std::string>* log, std::string id) : log_(log), id_(std::move(id)) {}
    Device device() const override { return Device::Cuda(0); }
    bool Query() const override { return false; }  // never done unless waited for
    Status Synchronize() const override {
      log_->push_back("wait " + id_);
      return Status::Ok();
    }

   private:
    std::vector<std::string>* log_;
    std::string id_;
  };
  std::vector<std::string>* log_;
  std::string name_ = "queue-like";
  int events_ = 0;
};

TEST(StagedCommunicatorTest, ScratchOutlivesTheCopiesThatReadIt) {
  ASSERT_TRUE(InstallFakeCudaDevices());
  std::unique_ptr<ThreadWorld> world = std::move(ThreadWorld::Create(1).value());
  std::vector<std::string> log;
  EXPECT_EQ(world->Run([&](Communicator& comm) -> Status {
    RecordingCommunicator rec(comm, &log);
    QueueLikeStream stream(&log);
    {
      MF_ASSIGN_OR_RETURN(std::shared_ptr<StagedCommunicator> staged, StagedCommunicator::Create(rec, Device::Cuda(0)));
      float x[13] = {1, 2, 3}, y[13] = {};
      const int64_t counts[] = {13};
      MF_RETURN_IF_ERROR(staged->AllReduce(x, y, 13, DType::kF32, ReduceOp::kSum, stream));
      EXPECT_EQ(y[2], 3.0f);
      EXPECT_EQ(staged->scratch_bytes(), 13 * 4);
      MF_RETURN_IF_ERROR(staged->AllReduce(x, y, 13, DType::kF32, ReduceOp::kSum, stream));  // reuses it
      MF_RETURN_IF_ERROR(staged->ReleaseScratch());
      EXPECT_EQ(staged->scratch_bytes(), 0);
      MF_RETURN_IF_ERROR(staged->AllGatherV(x, 13, y, counts, DType::kF32, stream));
      EXPECT_EQ(staged->scratch_bytes(), 2 * 13 * 4);
      MF_RETURN_IF_ERROR(staged->Broadcast(y, 13, DType::kF32, 0, stream));
      MF_RETURN_IF_ERROR(staged->AllReduce(x, y, 13, DType::kF32, ReduceOp::kSum, stream));
    }
    return Status::Ok();
  }),
            Status::Ok());
  const std::vector<std::string> want = {
      // copies in, a wait for them, the collective on the scratch, copies out, an event after them
      "synchronize stream", "all_reduce", "record event 0",
      // the next call waits for that event before it writes the scratch again
      "wait event 0", "synchronize stream", "all_reduce", "record event 1",
      "wait event 1",  // ReleaseScratch
      "synchronize stream", "all_gather", "record event 2", "wait event 2", "synchronize stream",
      "broadcast",  // the root copies nothing out: no event
      "synchronize stream", "all_reduce", "record event 3",
      "wait event 3",  // the destructor
  };
  EXPECT_EQ(log, want);
}

// ---- The plan executor on RankContexts over StagedCommunicators ----

struct PlanCase {
  std::vector<int64_t> shape;
  std::string from, to;
  DType dtype;
  std::shared_ptr<const Plan> plan;
  Layout from_layout, to_layout;
};

std::vector<PlanCase> PlanCases(const DeviceMesh& mesh) {
  std::vector<std::pair<std::vector<int64_t>, std::vector<std::pair<std::string, std::string>>>> specs;
  if (mesh.ndim() == 1) {
    specs = {
        {{7, 5},
         {{"S(0)", "R"}, {"R", "S(1)"}, {"S(0)", "S(1)"}, {"P(sum)", "R"}, {"P(sum)", "S(0)"}, {"P(max)", "S(1)"}}},
        {{0, 3}, {{"S(0)", "R"}, {"S(1)", "S(0)"}}},
        {{3, 4, 5}, {{"S(2)", "S(0)"}, {"P(avg)", "R"}, {"R", "S(1)"}}}};
  } else {
    specs = {{{7, 5}, {{"S(0),S(1)", "S(1),S(0)"}, {"R,S(0)", "S(1),R"}, {"P(sum),S(0)", "R,R"}}},
             {{6, 4}, {{"S(0),S(0)", "R,S(1)"}, {"S(1),P(sum)", "S(0),R"}}}};
  }
  std::vector<PlanCase> cases;
  for (const auto& [shape, transitions] : specs) {
    for (const auto& [from, to] : transitions) {
      for (DType dtype : {DType::kF32, DType::kI32, DType::kBF16}) {
        const Layout f = *Layout::Create(shape, mesh, *ParsePlacements(from));
        const Layout t = *Layout::Create(shape, mesh, *ParsePlacements(to));
        cases.push_back({shape, from, to, dtype, *PlanFor(f, t, dtype), f, t});
      }
    }
  }
  return cases;
}

// Runs every case on this rank (alternating ExecutePlan and ExecutePlanAsync); returns what failed.
StatusOr<std::string> RunPlans(const std::vector<PlanCase>& cases, RankContext& ctx, const DeviceMesh& mesh) {
  const int rank = ctx.world_rank();
  std::string failures;
  for (size_t i = 0; i < cases.size(); ++i) {
    const PlanCase& c = cases[i];
    const std::string name =
        c.from + " -> " + c.to + " " + std::string(DTypeName(c.dtype)) + (i % 2 ? " async" : " sync");
    const Tensor global = Tensor::Iota(c.dtype, c.shape);
    MF_ASSIGN_OR_RETURN(DTensor x, Distribute(global, c.from_layout, rank));
    MF_ASSIGN_OR_RETURN(Tensor dev, x.local().CopyTo(ctx.device(), ctx.compute_stream_ptr()));
    MF_RETURN_IF_ERROR(ctx.world().Barrier());
    const ByteCounters before = ctx.world().counters();
    if (i % 2 == 0) {
      MF_RETURN_IF_ERROR(ExecutePlan(*c.plan, ctx, dev));
    } else {
      MF_ASSIGN_OR_RETURN(PendingTensor pending, ExecutePlanAsync(c.plan, ctx, std::move(dev)));
      MF_ASSIGN_OR_RETURN(dev, pending.Wait());
    }
    if (dev.device() != ctx.device()) failures += "\n  " + name + ": the result left " + ctx.device().ToString();
    MF_ASSIGN_OR_RETURN(Tensor got, dev.ToHost());
    MF_RETURN_IF_ERROR(ctx.SyncComm());
    MF_RETURN_IF_ERROR(ctx.world().Barrier());
    const int64_t received = ctx.world().counters().bytes_received - before.bytes_received;
    const int64_t modeled = c.plan->bytes_received_per_rank[static_cast<size_t>(*mesh.IndexOf(rank))];
    if (received != modeled) {
      failures +=
          "\n  " + name + ": received " + std::to_string(received) + " bytes, plan says " + std::to_string(modeled);
    }
    if (!c.to_layout.HasPartial()) {
      MF_ASSIGN_OR_RETURN(Tensor want, ReferenceLocal(global, c.to_layout, rank));
      if (!(got == want)) failures += "\n  " + name + ": got " + got.ToString() + " want " + want.ToString();
    }
  }
  return failures;
}

std::string RunPlansOnStagedRanks(const std::vector<int64_t>& mesh_shape, Devices where) {
  const DeviceMesh mesh = *DeviceMesh::Create(mesh_shape);
  const std::vector<PlanCase> cases = PlanCases(mesh);
  std::unique_ptr<ThreadWorld> world = std::move(ThreadWorld::Create(mesh.size()).value());
  std::mutex mu;
  std::string failures;
  const Status run = world->Run([&](Communicator& comm) -> Status {
    const Device device = Device::Cuda(where == Devices::kOwn ? comm.world_rank() : 0);
    MF_ASSIGN_OR_RETURN(std::shared_ptr<StagedCommunicator> staged, StagedCommunicator::Create(comm, device));
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(staged, mesh));
    if (ctx.device() != device || ctx.compute_stream().is_inline()) return InternalError("not a device context");
    MF_ASSIGN_OR_RETURN(std::string f, RunPlans(cases, ctx, mesh));
    std::lock_guard<std::mutex> lock(mu);
    if (!f.empty()) failures += "\n rank " + std::to_string(comm.world_rank()) + ":" + f;
    return Status::Ok();
  });
  if (!run.ok()) return run.ToString();
  return failures;
}

TEST(StagedCommunicatorTest, ExecutorOnStagedRanksMatchesReference) {
  ASSERT_TRUE(InstallFakeCudaDevices());
  for (const std::vector<int64_t>& mesh : std::vector<std::vector<int64_t>>{{2}, {3}, {4}, {2, 2}}) {
    EXPECT_EQ(RunPlansOnStagedRanks(mesh, Devices::kOwn), "") << "mesh of " << mesh.size() << " dims, own GPUs";
    EXPECT_EQ(RunPlansOnStagedRanks(mesh, Devices::kShared), "") << "mesh of " << mesh.size() << " dims, cuda:0";
  }
}

}  // namespace
}  // namespace meshflow
