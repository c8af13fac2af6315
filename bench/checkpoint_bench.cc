// Checkpoint save/load throughput against plain file I/O of the same bytes, in one run.
//
//   bazel run --config=opt //bench:checkpoint_bench
//
// A 64 MiB f32 tensor [4096, 4096] is sharded S(0) over a 4-rank in-process world (16 MiB per
// rank). Times are wall clock on rank 0 between two barriers; bytes_per_second counts the
// tensor's 64 MiB per op.
//   BM_SaveCheckpoint   SaveCheckpoint into a fresh directory (CRC-32C, fsync of every file and
//                       the directory, rename into place); the previous one is removed untimed.
//   BM_PlainWrite       every rank write()s its 16 MiB into its own file and fsyncs it: the floor.
//   BM_LoadCheckpoint/0 load into the saved layout S(0) on 4 ranks (exact chunk reads + CRC).
//   BM_LoadCheckpoint/1 load resharded to S(0),S(1) on a 2x2 mesh: each rank needs half the
//                       columns of two chunks and reads their whole row span (2x over-read;
//                       counter bytes_read_per_op).
//   BM_PlainRead        every rank pread()s its 16 MiB back from the BM_PlainWrite files.
// Files live under $TEST_TMPDIR or the system temp directory, in the page cache after the
// first iteration, so these are memory-bandwidth + syscall + fsync figures, not disk figures.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "meshflow/checkpoint/checkpoint.h"
#include "meshflow/collectives/mesh_comms.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"

namespace meshflow {
namespace {

namespace fs = std::filesystem;

constexpr int kRanks = 4;
constexpr int64_t kRows = 4096, kCols = 4096;
constexpr int64_t kBytes = kRows * kCols * 4;

std::string BenchDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return (t != nullptr ? fs::path(t) : fs::temp_directory_path()).string() + "/meshflow_checkpoint_bench";
}

ThreadWorld& World() {
  static ThreadWorld* w = ThreadWorld::Create(kRanks).value().release();
  return *w;
}

const DeviceMesh& Mesh1D() {
  static const auto* m = new DeviceMesh(*DeviceMesh::Create({kRanks}));
  return *m;
}

const Layout& SavedLayout() {
  static const auto* l = new Layout(*Layout::Create({kRows, kCols}, Mesh1D(), {Shard{0}}));
  return *l;
}

const Tensor& Global() {
  static const auto* t = new Tensor(Tensor::Iota(DType::kF32, {kRows, kCols}));
  return *t;
}

// Runs fn on every rank between two barriers; returns rank 0's wall time in seconds.
double TimedRun(benchmark::State& state, const std::function<Status(Communicator&)>& setup,
                const std::function<Status(Communicator&)>& fn) {
  double seconds = 0;
  Status s = World().Run([&](Communicator& comm) -> Status {
    MF_RETURN_IF_ERROR(setup(comm));
    MF_RETURN_IF_ERROR(comm.Barrier());
    const auto t0 = std::chrono::steady_clock::now();
    MF_RETURN_IF_ERROR(fn(comm));
    MF_RETURN_IF_ERROR(comm.Barrier());
    if (comm.rank() == 0) seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return Status();
  });
  if (!s.ok()) state.SkipWithError(s.ToString().c_str());
  return seconds;
}

Status Save(const std::string& dir) {
  return World().Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(MeshComms comms, MeshComms::Create(comm, Mesh1D()));
    MF_ASSIGN_OR_RETURN(DTensor x, Distribute(Global(), SavedLayout(), comm.world_rank()));
    return SaveCheckpoint(dir, {{"w", &x}}, comms);
  });
}

void BM_SaveCheckpoint(benchmark::State& state) {
  const std::string dir = BenchDir() + "/save";
  fs::create_directories(BenchDir());
  for (auto _ : state) {
    std::vector<std::unique_ptr<DTensor>> xs(kRanks);
    std::vector<std::unique_ptr<MeshComms>> cs(kRanks);
    const double t = TimedRun(
        state,
        [&](Communicator& comm) -> Status {
          if (comm.rank() == 0) fs::remove_all(dir);
          MF_ASSIGN_OR_RETURN(MeshComms comms, MeshComms::Create(comm, Mesh1D()));
          cs[comm.rank()] = std::make_unique<MeshComms>(std::move(comms));
          MF_ASSIGN_OR_RETURN(DTensor x, Distribute(Global(), SavedLayout(), comm.world_rank()));
          xs[comm.rank()] = std::make_unique<DTensor>(std::move(x));
          return Status();
        },
        [&](Communicator& comm) -> Status {
          return SaveCheckpoint(dir, {{"w", xs[comm.rank()].get()}}, *cs[comm.rank()]);
        });
    state.SetIterationTime(t);
  }
  state.SetBytesProcessed(state.iterations() * kBytes);
}

void BM_PlainWrite(benchmark::State& state) {
  const std::string dir = BenchDir() + "/plain";
  std::vector<Tensor> locals(kRanks);
  for (int r = 0; r < kRanks; ++r) locals[r] = Distribute(Global(), SavedLayout(), r)->local();
  for (auto _ : state) {
    const double t = TimedRun(
        state,
        [&](Communicator& comm) -> Status {
          if (comm.rank() == 0) {
            fs::remove_all(dir);
            fs::create_directories(dir);
          }
          return Status();
        },
        [&](Communicator& comm) -> Status {
          const std::string path = dir + "/part-" + std::to_string(comm.rank());
          const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
          if (fd < 0) return UnavailableError("cannot create " + path);
          const Tensor& t = locals[comm.rank()];
          int64_t done = 0;
          while (done < t.NumBytes()) {
            const ssize_t w = ::write(fd, t.raw() + done, static_cast<size_t>(t.NumBytes() - done));
            if (w <= 0) break;
            done += w;
          }
          const bool ok = done == t.NumBytes() && ::fsync(fd) == 0;
          ::close(fd);
          return ok ? Status() : UnavailableError("write of " + path + " failed");
        });
    state.SetIterationTime(t);
  }
  state.SetBytesProcessed(state.iterations() * kBytes);
}

void BM_LoadCheckpoint(benchmark::State& state) {
  const std::string dir = BenchDir() + "/load";
  fs::create_directories(BenchDir());
  if (!fs::exists(dir)) {
    const Status s = Save(dir);
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      return;
    }
  }
  const bool reshard = state.range(0) == 1;
  const DeviceMesh mesh = reshard ? *DeviceMesh::Create({2, 2}) : Mesh1D();
  const Layout target = reshard ? *Layout::Create({kRows, kCols}, mesh, {Shard{0}, Shard{1}}) : SavedLayout();
  std::vector<LoadStats> stats(kRanks);
  std::vector<std::unique_ptr<MeshComms>> cs(kRanks);
  for (auto _ : state) {
    const double t = TimedRun(
        state,
        [&](Communicator& comm) -> Status {
          MF_ASSIGN_OR_RETURN(MeshComms comms, MeshComms::Create(comm, mesh));
          cs[comm.rank()] = std::make_unique<MeshComms>(std::move(comms));
          stats[comm.rank()] = LoadStats{};
          return Status();
        },
        [&](Communicator& comm) -> Status {
          MF_ASSIGN_OR_RETURN(auto got, LoadTensors(dir, {LoadRequest{"w", target}}, *cs[comm.rank()], &stats[comm.rank()]));
          benchmark::DoNotOptimize(got.front().local().raw());
          return Status();
        });
    state.SetIterationTime(t);
  }
  int64_t read = 0;
  for (const LoadStats& s : stats) read += s.bytes_read;
  state.counters["bytes_read_per_op"] = static_cast<double>(read);
  state.SetBytesProcessed(state.iterations() * kBytes);
}

void BM_PlainRead(benchmark::State& state) {
  const std::string dir = BenchDir() + "/plain";
  const int64_t per_rank = kBytes / kRanks;
  std::vector<std::vector<std::byte>> bufs(kRanks, std::vector<std::byte>(static_cast<size_t>(per_rank)));
  for (auto _ : state) {
    const double t = TimedRun(
        state, [](Communicator&) -> Status { return Status(); },
        [&](Communicator& comm) -> Status {
          const std::string path = dir + "/part-" + std::to_string(comm.rank());
          const int fd = ::open(path.c_str(), O_RDONLY);
          if (fd < 0) return UnavailableError("cannot open " + path + " (run BM_PlainWrite first)");
          int64_t done = 0;
          while (done < per_rank) {
            const ssize_t r = ::pread(fd, bufs[comm.rank()].data() + done, static_cast<size_t>(per_rank - done), done);
            if (r <= 0) break;
            done += r;
          }
          ::close(fd);
          return done == per_rank ? Status() : UnavailableError("short read of " + path);
        });
    state.SetIterationTime(t);
  }
  state.SetBytesProcessed(state.iterations() * kBytes);
}

BENCHMARK(BM_SaveCheckpoint)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PlainWrite)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LoadCheckpoint)->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PlainRead)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace meshflow

BENCHMARK_MAIN();
