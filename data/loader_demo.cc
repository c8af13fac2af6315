// loader_demo: the data-loading quick start.
//
// Writes a small uint16 token file to a temp dir, opens it as fixed-length sequences, and runs
// one epoch on a 2x2 mesh (dims "dp" x "tp") with one loader per rank (each on its own thread,
// as in a multi-rank job). Prints a progress line per rank (samples/s), then checks:
//   - coverage: the union over dp ranks of each global batch covers every sample exactly once
//     per epoch, plus exactly the reported wrap-around repeats;
//   - tp ranks (same dp coordinate) received identical batches;
//   - every row holds the right tokens;
//   - a state saved mid-epoch and restored on a 1-D mesh of 3 dp ranks continues the same stream.
// Exit code 0 (and "all checks passed") only when every check passes.
//
//   bazel run //data:loader_demo
//
// It takes no arguments; --help (-h) prints a short description, any other argument exits 2.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "meshflow/base/cli.h"
#include "meshflow/data/loader.h"
#include "meshflow/data/token_file.h"
#include "meshflow/mesh/device_mesh.h"

namespace meshflow {
namespace {

constexpr const char* kUsage =
    "usage: loader_demo\n"
    "\n"
    "The data-loading quick start: writes a small token file, loads one epoch on a 2x2 (dp x tp)\n"
    "mesh with one loader per rank, checks coverage, tp identity and row contents, then resumes a\n"
    "mid-epoch state on 3 dp ranks and checks that the stream continues unchanged.\n"
    "\n"
    "flags:\n"
    "  -h, --help   print this help and exit\n"
    "\n"
    "exit codes: 0 every check passed, 1 a check or a step failed, 2 bad input (message on stderr).\n";

constexpr int64_t kNumTokens = 200003;
constexpr int64_t kSeqLen = 64;
constexpr int64_t kBatch = 36;  // does not divide the 3125 samples: the last batch wraps
constexpr uint64_t kSeed = 2024;

int failures = 0;
void Check(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::printf("CHECK FAILED: %s\n", what.c_str());
  }
}

struct RankRun {
  std::vector<Batch> batches;
  double seconds = 0;
  Status status;
};

RankRun RunRank(std::shared_ptr<const Dataset> ds, const DeviceMesh& mesh, int rank, int64_t steps,
                const LoaderState* restore) {
  RankRun out;
  auto loader = DataLoader::Create(ds, mesh, rank, {.dp_dims = {"dp"}, .global_batch_size = kBatch, .seed = kSeed,
                                                    .prefetch_depth = 4});
  if (!loader.ok()) {
    out.status = loader.status();
    return out;
  }
  if (restore != nullptr) {
    out.status = (*loader)->Restore(*restore);
    if (!out.status.ok()) return out;
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < steps; ++s) {
    auto b = (*loader)->NextBatch();
    if (!b.ok()) {
      out.status = b.status();
      return out;
    }
    out.batches.push_back(std::move(*b));
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

// The demo's "text": kNumTokens deterministic pseudo-random tokens of the GPT-2 vocabulary.
std::vector<uint32_t> MakeTokens() {
  std::vector<uint32_t> tokens(kNumTokens);
  uint64_t x = 88172645463325252ull;  // xorshift64: any deterministic "text" will do
  for (uint32_t& t : tokens) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    t = static_cast<uint32_t>(x % 50257);  // GPT-2 vocabulary size
  }
  return tokens;
}

// One epoch (`steps` batches) on the 2x2 mesh, one loader thread per rank; prints a line per
// rank. False (after printing the error) when a rank failed.
bool RunEpoch(const std::shared_ptr<TokenFileDataset>& ds, const DeviceMesh& mesh, int64_t steps,
              std::vector<RankRun>& runs) {
  runs.resize(4);
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] { runs[r] = RunRank(ds, mesh, r, steps, nullptr); });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 4; ++r) {
    if (!runs[r].status.ok()) {
      std::printf("rank %d: %s\n", r, runs[r].status.ToString().c_str());
      return false;
    }
    int64_t samples = 0;
    for (const Batch& b : runs[r].batches) samples += static_cast<int64_t>(b.sample_indices.size());
    std::printf("rank %d (dp %d, tp %d): %lld batches, %lld samples in %.3f s = %.0f samples/s\n", r, r / 2, r % 2,
                static_cast<long long>(runs[r].batches.size()), static_cast<long long>(samples), runs[r].seconds,
                runs[r].seconds > 0 ? static_cast<double>(samples) / runs[r].seconds : 0.0);
  }
  return true;
}

// Checks the batches of step s: tp twins identical, every dp row holding its sample's tokens; puts
// the sample of each global row into `global`.
void CheckStep(const std::vector<RankRun>& runs, const std::vector<uint32_t>& tokens, int64_t s,
               std::vector<int64_t>& global) {
  for (int r = 0; r < 4; ++r) {
    const Batch& b = runs[r].batches[static_cast<size_t>(s)];
    if (r % 2 == 1) {
      const Batch& twin = runs[r - 1].batches[static_cast<size_t>(s)];
      Check(b.sample_indices == twin.sample_indices && b.data.local() == twin.data.local(),
            "tp ranks " + std::to_string(r - 1) + "," + std::to_string(r) + " differ at step " + std::to_string(s));
      continue;
    }
    for (size_t i = 0; i < b.sample_indices.size(); ++i) {
      const int64_t sample = b.sample_indices[i];
      global[static_cast<size_t>(b.row_offset) + i] = sample;
      for (int64_t j = 0; j <= kSeqLen; ++j) {
        const int32_t got = b.data.local().data<int32_t>()[i * static_cast<size_t>(kSeqLen + 1) + static_cast<size_t>(j)];
        if (got != static_cast<int32_t>(tokens[static_cast<size_t>(sample * kSeqLen + j)])) {
          Check(false, "wrong token in sample " + std::to_string(sample));
          break;
        }
      }
    }
  }
}

// Global stream, tp identity, row contents and coverage of the epoch; returns the global stream
// (the sample of every row of every global batch, in order).
std::vector<int64_t> CheckEpoch(const std::vector<RankRun>& runs, const std::vector<uint32_t>& tokens, int64_t n,
                                int64_t steps) {
  std::vector<int64_t> stream;
  int64_t repeated = 0;
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<int64_t> global(static_cast<size_t>(kBatch), -1);
    CheckStep(runs, tokens, s, global);
    repeated += runs[0].batches[static_cast<size_t>(s)].num_repeated;
    stream.insert(stream.end(), global.begin(), global.end());
  }
  std::map<int64_t, int> count;
  for (int64_t sample : stream) ++count[sample];
  int64_t extra = 0;
  bool all_seen = static_cast<int64_t>(count.size()) == n && count.begin()->first == 0 && count.rbegin()->first == n - 1;
  for (const auto& [sample, c] : count) extra += c - 1;
  Check(all_seen, "every sample seen at least once");
  Check(extra == repeated && repeated == steps * kBatch - n, "repeats == reported wrap-around count");
  std::printf("coverage: %zu distinct samples of %lld, %lld repeated (reported %lld)\n", count.size(),
              static_cast<long long>(n), static_cast<long long>(extra), static_cast<long long>(repeated));
  return stream;
}

// Save mid-epoch (dp=2), resume with 3 dp ranks; the remaining global batches must match `stream`.
void CheckResume(const std::shared_ptr<TokenFileDataset>& ds, const std::vector<RankRun>& runs,
                 const std::vector<int64_t>& stream, int64_t steps) {
  const int64_t stop = steps / 3;
  const LoaderState saved = runs[0].batches[static_cast<size_t>(stop - 1)].state_after;
  auto parsed = LoaderState::Parse(saved.ToString());
  Check(parsed.ok() && *parsed == saved, "state round trip");
  const DeviceMesh mesh3 = *DeviceMesh::Create({3}, {"dp"});
  std::vector<std::vector<int64_t>> resumed(static_cast<size_t>(steps - stop),
                                            std::vector<int64_t>(static_cast<size_t>(kBatch), -1));
  for (int r = 0; r < 3; ++r) {
    RankRun run = RunRank(ds, mesh3, r, steps - stop, &saved);
    Check(run.status.ok(), "resume on rank " + std::to_string(r) + ": " + run.status.ToString());
    for (size_t s = 0; s < run.batches.size(); ++s) {
      for (size_t i = 0; i < run.batches[s].sample_indices.size(); ++i) {
        resumed[s][static_cast<size_t>(run.batches[s].row_offset) + i] = run.batches[s].sample_indices[i];
      }
    }
  }
  bool same = true;
  for (size_t s = 0; s < resumed.size(); ++s) {
    for (size_t i = 0; i < resumed[s].size(); ++i) {
      same = same && resumed[s][i] == stream[(static_cast<size_t>(stop) + s) * static_cast<size_t>(kBatch) + i];
    }
  }
  Check(same, "resumed stream on 3 dp ranks == uninterrupted stream");
  std::printf("saved at step %lld: \"%s\"; resumed on %s: %s\n", static_cast<long long>(stop),
              saved.ToString().c_str(), mesh3.ToString().c_str(), same ? "same stream" : "DIFFERENT stream");
}

int Main() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::filesystem::path dir = std::filesystem::path(tmp != nullptr ? tmp : std::filesystem::temp_directory_path().string()) /
                                    ("meshflow_loader_demo_" + std::to_string(::getpid()));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path = (dir / "train.bin").string();
  const std::vector<uint32_t> tokens = MakeTokens();
  if (Status s = WriteTokenFile(path, tokens, TokenWidth::kU16); !s.ok()) {
    std::printf("%s\n", s.ToString().c_str());
    return 1;
  }
  auto ds = TokenFileDataset::Open(path, {.seq_len = kSeqLen, .width = TokenWidth::kU16, .dtype = DType::kI32});
  if (!ds.ok()) {
    std::printf("%s\n", ds.status().ToString().c_str());
    return 1;
  }
  const int64_t n = (*ds)->size();
  const DeviceMesh mesh = *DeviceMesh::Create({2, 2}, {"dp", "tp"});
  const int64_t steps = (n + kBatch - 1) / kBatch;
  std::printf("token file %s: %lld tokens -> %lld samples of %lld+1 tokens; mesh %s, global batch %lld, %lld steps\n",
              path.c_str(), static_cast<long long>(kNumTokens), static_cast<long long>(n),
              static_cast<long long>(kSeqLen), mesh.ToString().c_str(), static_cast<long long>(kBatch),
              static_cast<long long>(steps));

  std::vector<RankRun> runs;
  if (!RunEpoch(*ds, mesh, steps, runs)) return 1;
  const std::vector<int64_t> stream = CheckEpoch(runs, tokens, n, steps);
  CheckResume(*ds, runs, stream, steps);

  std::filesystem::remove_all(dir, ec);
  if (failures > 0) {
    std::printf("%d check(s) failed\n", failures);
    return 1;
  }
  std::printf("all checks passed\n");
  return 0;
}

}  // namespace
}  // namespace meshflow

int main(int argc, char** argv) {
  if (meshflow::HasHelpFlag(argc, argv)) {
    std::fputs(meshflow::kUsage, stdout);
    return 0;
  }
  if (argc > 1) {
    std::fprintf(stderr, "loader_demo: %s\n",
                 meshflow::UnknownArgumentError("loader_demo", argv[1]).message().c_str());
    return 2;
  }
  return meshflow::Main();
}
