// Checkpoint save/load throughput against plain file I/O of the same bytes, in one run.
//
//   bazel run --config=opt //bench:checkpoint_bench -- --benchmark_format=csv
//
// A 64 MiB f32 tensor [4096, 4096] is sharded S(0) over a 4-rank in-process world (16 MiB per
// rank). Times are wall clock on rank 0 between two barriers; bytes_per_second counts the
// tensor's 64 MiB per op.
//   BM_SaveCheckpoint   SaveCheckpoint into a fresh directory (CRC-32C, fsync of every file and
//                       the directory, rename into place); the previous one is removed untimed.
//   BM_PlainWrite       every rank write()s its 16 MiB into its own file and fsyncs it: the floor.
//   BM_LoadCheckpoint/0 load into the saved layout S(0) on 4 ranks (exact chunk reads + CRC).
//   BM_LoadCheckpoint/1 load resharded to S(0),S(1) on a 2x2 mesh: each rank needs half the
//                       columns of two chunks; with the 4 KiB checksum blocks of 16 MiB chunks
//                       (ChunkBlockBytes) it reads only the blocks of its half rows
//                       (bytes_read_per_op = 64 MiB; with 1 MiB blocks it read 128 MiB).
//   BM_PlainRead        every rank pread()s its 16 MiB (one call, into a reused buffer).
// Every row has the same counters (the CSV reporter requires one counter set for all rows):
//   bytes_read_per_op   bytes read from files by all ranks in one op (0 for the writes; the
//                       loads' LoadStats::bytes_read summed over ranks)
//   vs_plain            time of the plain op on the same bytes / time of this op, both timed in
//                       the same iterations, alternately (so under the same machine load): for
//                       the loads, every rank pread()s 16 MiB of the checkpoint's own data file
//                       into a reused buffer; for the save, BM_PlainWrite's op. 1 for the plain
//                       rows. Load >= 0.5 and resharded load >= 0.5 are the targets.
// Files live in a fresh directory per run (mkdtemp under $TEST_TMPDIR or the system temp
// directory, removed at exit), in the page cache after the first iteration, so these are
// memory-bandwidth + syscall + fsync figures, not disk figures.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "meshflow/bench/run_dir.h"
#include "meshflow/checkpoint/checkpoint.h"
#include "meshflow/checkpoint/format.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"

namespace meshflow {
namespace {

namespace fs = std::filesystem;

constexpr int kRanks = 4;
constexpr int64_t kRows = 4096, kCols = 4096;
constexpr int64_t kBytes = kRows * kCols * 4;
constexpr int64_t kPerRank = kBytes / kRanks;

// This run's private directory (set by main).
std::string& RunDir() {
  static auto* dir = new std::string();
  return *dir;
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

void SetCounters(benchmark::State& state, double bytes_read_per_op, double vs_plain) {
  state.counters["bytes_read_per_op"] = bytes_read_per_op;
  state.counters["vs_plain"] = vs_plain;
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

Status NoSetup(Communicator&) { return Status(); }

Status Save(const std::string& dir) {
  return World().Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, Mesh1D()));
    MF_ASSIGN_OR_RETURN(DTensor x, Distribute(Global(), SavedLayout(), comm.world_rank()));
    return SaveCheckpoint(dir, {{"w", &x}}, ctx);
  });
}

const std::vector<Tensor>& Locals() {
  static const auto* locals = [] {
    auto* v = new std::vector<Tensor>(kRanks);
    for (int r = 0; r < kRanks; ++r) (*v)[r] = Distribute(Global(), SavedLayout(), r)->local();
    return v;
  }();
  return *locals;
}

// The plain write of one op: every rank writes its 16 MiB into dir/part-<rank> and fsyncs it
// (rank 0 recreates dir first, untimed).
double PlainWriteOnce(benchmark::State& state, const std::string& dir) {
  return TimedRun(
      state,
      [&](Communicator& comm) -> Status {
        if (comm.rank() == 0) {
          std::error_code ec;
          fs::remove_all(dir, ec);
          fs::create_directories(dir, ec);
          if (ec) return UnavailableError("cannot create " + dir + ": " + ec.message());
        }
        return Status();
      },
      [&](Communicator& comm) -> Status {
        const std::string path = dir + "/part-" + std::to_string(comm.rank());
        const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) return UnavailableError("cannot create " + path);
        const Tensor& t = Locals()[comm.rank()];
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
}

// The plain read of one op: every rank pread()s kPerRank bytes of path_of(rank) from offset 0
// into its reused buffer in one call (the kernel copies up to 2 GiB per call).
double PlainReadOnce(benchmark::State& state, const std::function<std::string(int)>& path_of,
                     std::vector<std::vector<std::byte>>& bufs) {
  return TimedRun(state, NoSetup, [&](Communicator& comm) -> Status {
    const std::string path = path_of(comm.rank());
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return UnavailableError("cannot open " + path);
    int64_t done = 0;
    while (done < kPerRank) {
      const ssize_t r = ::pread(fd, bufs[comm.rank()].data() + done, static_cast<size_t>(kPerRank - done), done);
      if (r <= 0) break;
      done += r;
    }
    ::close(fd);
    return done == kPerRank ? Status() : UnavailableError("short read of " + path);
  });
}

std::vector<std::vector<std::byte>> ReadBuffers() {
  // Touched once here, so the timed reads do not page-fault.
  return std::vector<std::vector<std::byte>>(kRanks, std::vector<std::byte>(static_cast<size_t>(kPerRank)));
}

void BM_SaveCheckpoint(benchmark::State& state) {
  const std::string dir = RunDir() + "/save", plain = RunDir() + "/save_plain";
  double save_s = 0, plain_s = 0;
  for (auto _ : state) {
    std::vector<std::unique_ptr<DTensor>> xs(kRanks);
    std::vector<std::unique_ptr<RankContext>> cs(kRanks);
    const double t = TimedRun(
        state,
        [&](Communicator& comm) -> Status {
          if (comm.rank() == 0) {
            std::error_code ec;
            fs::remove_all(dir, ec);
          }
          MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, Mesh1D()));
          cs[comm.rank()] = std::make_unique<RankContext>(std::move(ctx));
          MF_ASSIGN_OR_RETURN(DTensor x, Distribute(Global(), SavedLayout(), comm.world_rank()));
          xs[comm.rank()] = std::make_unique<DTensor>(std::move(x));
          return Status();
        },
        [&](Communicator& comm) -> Status {
          return SaveCheckpoint(dir, {{"w", xs[comm.rank()].get()}}, *cs[comm.rank()]);
        });
    state.SetIterationTime(t);
    save_s += t;
    state.PauseTiming();
    plain_s += PlainWriteOnce(state, plain);
    state.ResumeTiming();
  }
  state.SetBytesProcessed(state.iterations() * kBytes);
  SetCounters(state, 0, save_s > 0 ? plain_s / save_s : 0);
}

void BM_PlainWrite(benchmark::State& state) {
  const std::string dir = RunDir() + "/plain";
  for (auto _ : state) state.SetIterationTime(PlainWriteOnce(state, dir));
  state.SetBytesProcessed(state.iterations() * kBytes);
  SetCounters(state, 0, 1);
}

void BM_LoadCheckpoint(benchmark::State& state) {
  const std::string dir = RunDir() + "/load";
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
  std::vector<std::unique_ptr<RankContext>> cs(kRanks);
  std::vector<std::vector<std::byte>> bufs = ReadBuffers();
  // The baseline reads the same files: S(0) on 4 ranks stores rank r's rows in data file r.
  const auto data_file = [&](int rank) { return dir + "/" + DataFileName(rank); };
  double load_s = 0, plain_s = 0;
  for (auto _ : state) {
    const double t = TimedRun(
        state,
        [&](Communicator& comm) -> Status {
          MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
          cs[comm.rank()] = std::make_unique<RankContext>(std::move(ctx));
          stats[comm.rank()] = LoadStats{};
          return Status();
        },
        [&](Communicator& comm) -> Status {
          MF_ASSIGN_OR_RETURN(auto got, LoadTensors(dir, {LoadRequest{"w", target}}, *cs[comm.rank()], &stats[comm.rank()]));
          benchmark::DoNotOptimize(got.front().local().raw());
          return Status();
        });
    state.SetIterationTime(t);
    load_s += t;
    state.PauseTiming();
    plain_s += PlainReadOnce(state, data_file, bufs);
    state.ResumeTiming();
  }
  int64_t read = 0;
  for (const LoadStats& s : stats) read += s.bytes_read;
  state.SetBytesProcessed(state.iterations() * kBytes);
  SetCounters(state, static_cast<double>(read), load_s > 0 ? plain_s / load_s : 0);
}

void BM_PlainRead(benchmark::State& state) {
  const std::string dir = RunDir() + "/plain_read";
  if (!fs::exists(dir + "/part-0")) PlainWriteOnce(state, dir);
  std::vector<std::vector<std::byte>> bufs = ReadBuffers();
  const auto part = [&](int rank) { return dir + "/part-" + std::to_string(rank); };
  for (auto _ : state) state.SetIterationTime(PlainReadOnce(state, part, bufs));
  state.SetBytesProcessed(state.iterations() * kBytes);
  SetCounters(state, static_cast<double>(kBytes), 1);
}

BENCHMARK(BM_SaveCheckpoint)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PlainWrite)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LoadCheckpoint)->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PlainRead)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace meshflow

int main(int argc, char** argv) {
  return meshflow::RunBenchmarksInFreshDir(argc, argv, "checkpoint_bench", meshflow::RunDir());
}
