// Data-loading benchmarks: samples/s of the token-file DataLoader vs a plain sequential read of
// the same file, in the same run.
//
//   bazel run --config=opt //bench:data_bench
//
// The file (16 Mi uint16 tokens = 32 MiB, written at every run into a fresh directory of its own,
// mkdtemp under $TEST_TMPDIR or the system temp dir, removed at exit, so concurrent runs never
// share it; it is in the page cache for both readers) is cut into
// sequences of 1024+1 tokens (16383 samples) read as i32. BM_SequentialRead is the floor: fread
// of the whole file in 1 MiB chunks plus the uint16 -> i32 widening, counted as the same number of
// samples. BM_TokenLoader yields global batches of 64 on a 1-rank mesh (shuffled or not, with or
// without the prefetch thread); BM_TokenLoaderDp2 is rank 0 of a 2x2 dp x tp mesh (32 local
// samples per batch). items_per_second is samples/s of wall-clock time (UseRealTime: the
// prefetch thread's work is not in the main thread's CPU time).
//
// Issue #16 additions:
//   BM_SlowSourceReaders/readers:N   a source that sleeps 200 us per sample (a remote or
//                                    decompressing reader), B = 16, prefetch_depth 4, N reader
//                                    threads: samples/s should scale with N (sleeps need no CPU)
//   BM_MixtureLoader                 three views of the token file mixed 0.5 / 0.3 / 0.2 (the
//                                    overhead measured is Locate: a SampleOrder per sample, and
//                                    one more indirection)
//   BM_PackedLoader                  the same tokens packed with eos_token 17 (documents of ~50 k
//                                    tokens on average): each sample also carries the position
//                                    and segment rows, [3, 1025] instead of [1025]
// Compare BM_MixtureLoader and BM_PackedLoader with BM_TokenLoader/shuffle:1/prefetch:4 (same
// batch, same shuffle, same prefetch) of the same run.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "meshflow/bench/run_dir.h"
#include <chrono>
#include <cstring>
#include <thread>

#include "meshflow/data/loader.h"
#include "meshflow/data/mixture.h"
#include "meshflow/data/packed.h"
#include "meshflow/data/token_file.h"
#include "meshflow/mesh/device_mesh.h"

namespace meshflow {
namespace {

constexpr int64_t kNumTokens = int64_t{1} << 24;
constexpr int64_t kSeqLen = 1024;

// This run's private directory (set by main).
std::string& RunDir() {
  static auto* dir = new std::string();
  return *dir;
}

const std::string& TokenFilePath() {
  static const std::string* path = [] {
    auto* p = new std::string((std::filesystem::path(RunDir()) / "tokens.bin").string());
    std::vector<uint32_t> tokens(static_cast<size_t>(kNumTokens));
    uint64_t x = 88172645463325252ull;
    for (uint32_t& t : tokens) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      t = static_cast<uint32_t>(x % 50257);
    }
    const Status s = WriteTokenFile(*p, tokens, TokenWidth::kU16);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      std::abort();
    }
    return p;
  }();
  return *path;
}

std::shared_ptr<TokenFileDataset> OpenDataset() {
  auto ds = TokenFileDataset::Open(TokenFilePath(), {.seq_len = kSeqLen, .width = TokenWidth::kU16, .dtype = DType::kI32});
  if (!ds.ok()) {
    std::fprintf(stderr, "%s\n", ds.status().ToString().c_str());
    std::abort();
  }
  return *ds;
}

void BM_SequentialRead(benchmark::State& state) {
  const std::string& path = TokenFilePath();
  const int64_t samples = (kNumTokens - 1) / kSeqLen;
  std::vector<uint16_t> chunk(size_t{1} << 19);  // 1 MiB
  std::vector<int32_t> widened(chunk.size());
  for (auto _ : state) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) {
      state.SkipWithError("cannot open token file");
      return;
    }
    size_t got = 0;
    while ((got = std::fread(chunk.data(), sizeof(uint16_t), chunk.size(), f)) > 0) {
      for (size_t i = 0; i < got; ++i) widened[i] = chunk[i];
      benchmark::DoNotOptimize(widened.data());
    }
    std::fclose(f);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * samples);
  state.SetBytesProcessed(state.iterations() * kNumTokens * 2);
}
BENCHMARK(BM_SequentialRead)->UseRealTime()->Unit(benchmark::kMillisecond);

// range(0): shuffle, range(1): prefetch depth.
void BM_TokenLoader(benchmark::State& state) {
  auto ds = OpenDataset();
  const int64_t batch = 64;
  auto loader = DataLoader::Create(ds, *DeviceMesh::Create({1}, {"dp"}), 0,
                                   {.dp_dims = {"dp"},
                                    .global_batch_size = batch,
                                    .seed = 1,
                                    .shuffle = state.range(0) != 0,
                                    .prefetch_depth = static_cast<int>(state.range(1))});
  if (!loader.ok()) {
    state.SkipWithError(loader.status().ToString().c_str());
    return;
  }
  for (auto _ : state) {
    auto b = (*loader)->Next();
    if (!b.ok()) {
      state.SkipWithError(b.status().ToString().c_str());
      return;
    }
    benchmark::DoNotOptimize(b->local().raw());
  }
  state.SetItemsProcessed(state.iterations() * batch);
  state.SetBytesProcessed(state.iterations() * batch * (kSeqLen + 1) * 2);
}
BENCHMARK(BM_TokenLoader)
    ->ArgNames({"shuffle", "prefetch"})
    ->Args({0, 0})
    ->Args({1, 0})
    ->Args({0, 4})
    ->Args({1, 4})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

void BM_TokenLoaderDp2(benchmark::State& state) {
  auto ds = OpenDataset();
  auto loader = DataLoader::Create(ds, *DeviceMesh::Create({2, 2}, {"dp", "tp"}), 0,
                                   {.dp_dims = {"dp"}, .global_batch_size = 64, .seed = 1, .prefetch_depth = 4});
  if (!loader.ok()) {
    state.SkipWithError(loader.status().ToString().c_str());
    return;
  }
  const int64_t local = (*loader)->local_rows().size();
  for (auto _ : state) {
    auto b = (*loader)->Next();
    if (!b.ok()) {
      state.SkipWithError(b.status().ToString().c_str());
      return;
    }
    benchmark::DoNotOptimize(b->local().raw());
  }
  state.SetItemsProcessed(state.iterations() * local);
}
BENCHMARK(BM_TokenLoaderDp2)->UseRealTime()->Unit(benchmark::kMicrosecond);

// A source that sleeps 200 us per sample.
class SlowSource final : public Dataset {
 public:
  int64_t size() const override { return 1 << 20; }
  DType dtype() const override { return DType::kI64; }
  const std::vector<int64_t>& sample_shape() const override { return shape_; }
  std::string name() const override { return "slow source"; }

 protected:
  Status ReadUnchecked(int64_t index, std::span<std::byte> dst) const override {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    std::memcpy(dst.data(), &index, sizeof(index));
    return Status::Ok();
  }

 private:
  std::vector<int64_t> shape_ = {1};
};

void BM_SlowSourceReaders(benchmark::State& state) {
  const int64_t batch = 16;
  auto loader = DataLoader::Create(std::make_shared<SlowSource>(), *DeviceMesh::Create({1}, {"dp"}), 0,
                                   {.global_batch_size = batch,
                                    .seed = 1,
                                    .prefetch_depth = 4,
                                    .num_readers = static_cast<int>(state.range(0))});
  if (!loader.ok()) {
    state.SkipWithError(loader.status().ToString().c_str());
    return;
  }
  for (auto _ : state) {
    auto b = (*loader)->Next();
    if (!b.ok()) {
      state.SkipWithError(b.status().ToString().c_str());
      return;
    }
    benchmark::DoNotOptimize(b->local().raw());
  }
  state.SetItemsProcessed(state.iterations() * batch);
}
BENCHMARK(BM_SlowSourceReaders)->ArgName("readers")->Arg(1)->Arg(2)->Arg(4)->UseRealTime()->Unit(benchmark::kMillisecond);

void RunLoader(benchmark::State& state, std::shared_ptr<const Dataset> ds) {
  const int64_t batch = 64;
  auto loader = DataLoader::Create(std::move(ds), *DeviceMesh::Create({1}, {"dp"}), 0,
                                   {.global_batch_size = batch, .seed = 1, .prefetch_depth = 4});
  if (!loader.ok()) {
    state.SkipWithError(loader.status().ToString().c_str());
    return;
  }
  for (auto _ : state) {
    auto b = (*loader)->Next();
    if (!b.ok()) {
      state.SkipWithError(b.status().ToString().c_str());
      return;
    }
    benchmark::DoNotOptimize(b->local().raw());
  }
  state.SetItemsProcessed(state.iterations() * batch);
}

void BM_MixtureLoader(benchmark::State& state) {
  auto a = OpenDataset(), b = OpenDataset(), c = OpenDataset();
  auto mix = MixtureDataset::Create({{a, 0.5}, {b, 0.3}, {c, 0.2}}, {.seed = 3});
  if (!mix.ok()) {
    state.SkipWithError(mix.status().ToString().c_str());
    return;
  }
  RunLoader(state, *mix);
}
BENCHMARK(BM_MixtureLoader)->UseRealTime()->Unit(benchmark::kMicrosecond);

void BM_PackedLoader(benchmark::State& state) {
  auto packed = PackedTokenDataset::Create(OpenDataset(), {.seq_len = kSeqLen, .eos_token = 17});
  if (!packed.ok()) {
    state.SkipWithError(packed.status().ToString().c_str());
    return;
  }
  RunLoader(state, *packed);
}
BENCHMARK(BM_PackedLoader)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace meshflow

int main(int argc, char** argv) {
  return meshflow::RunBenchmarksInFreshDir(argc, argv, "data_bench", meshflow::RunDir());
}
