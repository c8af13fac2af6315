// Multi-rank tests of SaveCheckpoint / LoadTensors on the in-process world.
//
// The reference for every load is ReferenceLocal(global, target, rank): the saved tensors are
// built with Distribute from known globals, so a load on any mesh must give, bit for bit, the
// target layout's local part of the same global (with the Replicate -> Partial rule for Partial
// targets). Values are small integers, exact in every dtype (including bf16 and Partial sums).
#include "meshflow/checkpoint/checkpoint.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/base/checksum.h"
#include "meshflow/checkpoint/format.h"
#include "meshflow/checkpoint/testing_hooks.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"

namespace meshflow {
namespace {

namespace fs = std::filesystem;

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path base = tmp != nullptr ? fs::path(tmp) : fs::temp_directory_path();
  const fs::path dir = base / ("ckpt_" + name);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(base, ec)) {
    if (e.path().filename().string().rfind(dir.filename().string(), 0) == 0) fs::remove_all(e.path(), ec);
  }
  return dir.string();
}

ThreadWorld& WorldOf(int n) {
  static auto* worlds = new std::map<int, std::unique_ptr<ThreadWorld>>();
  auto& w = (*worlds)[n];
  if (!w) w = std::move(ThreadWorld::Create(n).value());
  return *w;
}

Tensor GlobalFor(DType dtype, const std::vector<int64_t>& shape, int seed = 0) {
  Tensor t = Tensor::Zeros(dtype, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.SetFromDouble(i, static_cast<double>((i * 7 + seed) % 97) - 40);
  return t;
}

struct Spec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::string placements;
  std::string order;  // ParseShardOrder syntax; "" = default
};

// Several layouts over all dtypes on a 2x4 mesh: S, nested S (both orders), R, P(sum), P(max),
// uneven and zero-size shapes, more ranks than rows, a scalar.
const std::vector<Spec>& SavedSpecs() {
  static const auto* specs = new std::vector<Spec>{
      {"s_s", DType::kF32, {13, 6}, "S(0),S(1)", ""},
      {"nested", DType::kF64, {10, 3}, "S(0),S(0)", ""},
      {"nested_rev", DType::kI32, {9, 4}, "S(0),S(0)", "0:[1,0]"},
      {"rep", DType::kI32, {5, 7}, "R,R", ""},
      {"psum", DType::kBF16, {6, 4}, "P(sum),S(1)", ""},
      {"pmax", DType::kF32, {3, 5}, "R,P(max)", ""},
      {"mixed", DType::kI64, {3, 9, 2}, "S(1),R", ""},
      {"empty", DType::kF32, {0, 5}, "S(0),S(1)", ""},
      {"tiny", DType::kI64, {3}, "S(0),S(0)", ""},
      {"scalar", DType::kF64, {}, "R,R", ""},
  };
  return *specs;
}

Layout MakeLayout(const Spec& s, const DeviceMesh& mesh, const std::string& placements, const std::string& order) {
  return Layout::Create(s.shape, mesh, *ParsePlacements(placements), *ParseShardOrder(order)).value();
}

// Saves `specs` (global values GlobalFor(seed)) from the given mesh; returns the common status.
Status SaveSpecs(const std::string& dir, const std::vector<Spec>& specs, const DeviceMesh& mesh,
                 const SaveOptions& options = {}, int seed = 0, const SaveFaults& faults = {}) {
  return WorldOf(mesh.size()).Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    std::vector<DTensor> xs;
    for (const Spec& s : specs) {
      MF_ASSIGN_OR_RETURN(DTensor x, Distribute(GlobalFor(s.dtype, s.shape, seed), MakeLayout(s, mesh, s.placements, s.order),
                                                comm.world_rank()));
      xs.push_back(std::move(x));
    }
    std::vector<std::pair<std::string, const DTensor*>> named;
    for (size_t i = 0; i < specs.size(); ++i) named.emplace_back(specs[i].name, &xs[i]);
    return SaveCheckpointWithFaults(dir, named, ctx, options, faults);
  });
}

// Loads every spec that admits `placements` (on `mesh`) and compares with ReferenceLocal.
// Returns the first mismatch, "" when all match; load errors fail the test.
std::string LoadAndCompare(const std::string& dir, const std::vector<Spec>& specs, const DeviceMesh& mesh,
                           const std::string& placements, int seed = 0) {
  std::vector<LoadRequest> reqs;
  std::vector<const Spec*> used;
  for (const Spec& s : specs) {
    auto ps = ParsePlacements(placements);
    auto layout = Layout::Create(s.shape, mesh, *ps);
    if (!layout.ok()) continue;  // e.g. S(1) of a 1-D tensor
    reqs.push_back(LoadRequest{s.name, *layout, s.dtype});
    used.push_back(&s);
  }
  std::mutex mu;
  std::string failure;
  const Status st = WorldOf(mesh.size()).Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    MF_ASSIGN_OR_RETURN(std::vector<DTensor> got, LoadTensors(dir, reqs, ctx));
    for (size_t i = 0; i < reqs.size(); ++i) {
      MF_ASSIGN_OR_RETURN(Tensor want,
                          ReferenceLocal(GlobalFor(used[i]->dtype, used[i]->shape, seed), reqs[i].layout, comm.world_rank()));
      if (!(got[i].local() == want)) {
        std::lock_guard<std::mutex> lock(mu);
        if (failure.empty()) {
          failure = used[i]->name + " on " + mesh.ToString() + " " + placements + " rank " +
                    std::to_string(comm.world_rank()) + ": got " + got[i].local().ToString() + " want " + want.ToString();
        }
      }
    }
    return Status();
  });
  if (!st.ok()) return "load failed: " + st.ToString();
  return failure;
}

// Runs a load of one tensor on `mesh` (R everywhere unless given) and returns every rank's status.
std::vector<Status> LoadStatuses(const std::string& dir, const std::string& name, const std::vector<int64_t>& shape,
                                 const DeviceMesh& mesh, std::optional<DType> dtype = std::nullopt,
                                 const std::string& placements = "") {
  std::vector<Status> out(static_cast<size_t>(mesh.size()));
  std::string ps = placements;
  if (ps.empty()) {
    for (int m = 0; m < mesh.ndim(); ++m) ps += m ? ",R" : "R";
  }
  const Layout layout = Layout::Create(shape, mesh, *ParsePlacements(ps)).value();
  Status run = WorldOf(mesh.size()).Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    out[comm.world_rank()] = LoadTensor(dir, name, layout, ctx, dtype).status();
    return Status();
  });
  EXPECT_TRUE(run.ok()) << run;
  return out;
}

// Every rank fails with `code`, and the message names every needle (tensor, file, ...).
void ExpectAllFail(const std::vector<Status>& statuses, StatusCode code, const std::vector<std::string>& needles) {
  for (size_t r = 0; r < statuses.size(); ++r) {
    ASSERT_FALSE(statuses[r].ok()) << "rank " << r;
    EXPECT_EQ(statuses[r].code(), code) << "rank " << r << ": " << statuses[r];
    for (const std::string& n : needles) {
      EXPECT_NE(statuses[r].message().find(n), std::string::npos) << "rank " << r << " lacks '" << n << "': " << statuses[r];
    }
  }
}

DeviceMesh Mesh(std::vector<int64_t> shape) { return DeviceMesh::Create(std::move(shape)).value(); }

const DeviceMesh& Mesh2x4() {
  static const auto* m = new DeviceMesh(Mesh({2, 4}));
  return *m;
}

int64_t FileSize(const std::string& p) { return static_cast<int64_t>(fs::file_size(p)); }

TEST(CheckpointTest, ReshardsOnLoadToOtherMeshesAndPlacements) {
  const std::string dir = TestDir("reshard");
  ASSERT_TRUE(SaveSpecs(dir, SavedSpecs(), Mesh2x4()).ok());
  const std::vector<std::pair<DeviceMesh, std::vector<std::string>>> targets = {
      {Mesh({2, 4}), {"S(0),S(1)", "R,R"}},
      {Mesh({4, 2}), {"S(1),S(0)", "R,S(0)", "S(0),S(0)", "P(sum),R", "S(2),P(max)", "P(avg),S(0)"}},
      {Mesh({8}), {"S(0)", "S(1)", "R", "P(sum)"}},
      {Mesh({2}), {"S(0)", "P(sum)", "S(1)"}},
      {Mesh({1}), {"R", "S(0)"}},
  };
  for (const auto& [mesh, list] : targets) {
    for (const std::string& ps : list) EXPECT_EQ(LoadAndCompare(dir, SavedSpecs(), mesh, ps), "") << ps;
  }
}

TEST(CheckpointTest, ReplicatedChunksAreWrittenOnceByTheLowestRank) {
  const std::string dir = TestDir("unique");
  ASSERT_TRUE(SaveSpecs(dir, SavedSpecs(), Mesh2x4()).ok());
  auto md = ReadCheckpointMetadata(dir);
  ASSERT_TRUE(md.ok()) << md.status();
  int64_t unique_bytes = 0;
  for (const Spec& s : SavedSpecs()) unique_bytes += GlobalFor(s.dtype, s.shape).NumBytes();
  int64_t file_bytes = 0;
  ASSERT_EQ(md->file_sizes.size(), 8u);
  for (int f = 0; f < 8; ++f) {
    const int64_t size = FileSize(dir + "/" + DataFileName(f));
    EXPECT_EQ(size, md->file_sizes[f]) << f;
    file_bytes += size;
  }
  EXPECT_EQ(file_bytes, unique_bytes);
  // R,R: one chunk, on rank 0. R,P(max) reduces to R,R: one chunk. S(1),R on 2x4: the rows along
  // mesh dim 1... S(1) over mesh dim 0 (2 parts) replicated over dim 1: owners are ranks 0 and 4.
  const TensorRecord* rep = md->Find("rep");
  ASSERT_EQ(rep->chunks.size(), 1u);
  EXPECT_EQ(rep->chunks[0].file, 0);
  EXPECT_EQ(md->Find("pmax")->chunks.size(), 1u);
  const TensorRecord* mixed = md->Find("mixed");
  ASSERT_EQ(mixed->chunks.size(), 2u);
  EXPECT_EQ(mixed->chunks[0].file, 0);
  EXPECT_EQ(mixed->chunks[1].file, 4);
  EXPECT_TRUE(md->Find("empty")->chunks.empty());
  EXPECT_EQ(md->Find("tiny")->chunks.size(), 3u);  // 3 elements over 8 ranks: 5 empty boxes
  EXPECT_EQ(md->Find("psum")->chunks.size(), 4u);  // P(sum) reduced to R over mesh dim 0
  // No temporary or backup directory is left after a successful save; only the two lock files.
  for (const auto& e : fs::directory_iterator(fs::path(dir).parent_path())) {
    if (e.path() == CheckpointLockPath(dir) || e.path() == CheckpointCommitLockPath(dir)) continue;
    EXPECT_EQ(e.path().string().find(dir + "."), std::string::npos) << e.path();
  }
}

TEST(CheckpointTest, PartialReadsReadOnlyNeededBlocks) {
  // f32 [64, 8] saved S(0) on 8 ranks with one row per checksum block; loading S(0) on 4 or 8
  // ranks reads exactly the rank's rows; loading S(1) reads the whole span of each chunk.
  const std::string dir = TestDir("partial_reads");
  const Spec spec{"w", DType::kF32, {64, 8}, "S(0)", ""};
  SaveOptions opts;
  opts.checksum_block_bytes = 8 * 4;
  ASSERT_TRUE(SaveSpecs(dir, {spec}, Mesh({8}), opts).ok());
  for (int n : {8, 4, 2}) {
    for (const char* ps : {"S(0)", "S(1)"}) {
      const DeviceMesh mesh = Mesh({n});
      const Layout layout = Layout::Create(spec.shape, mesh, *ParsePlacements(ps)).value();
      std::vector<LoadStats> stats(static_cast<size_t>(n));
      Status st = WorldOf(n).Run([&](Communicator& comm) -> Status {
        MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
        MF_ASSIGN_OR_RETURN(auto got, LoadTensors(dir, {LoadRequest{"w", layout}}, ctx, &stats[comm.world_rank()]));
        MF_ASSIGN_OR_RETURN(Tensor want, ReferenceLocal(GlobalFor(spec.dtype, spec.shape), layout, comm.world_rank()));
        if (!(got[0].local() == want)) return InternalError("mismatch");
        return Status();
      });
      ASSERT_TRUE(st.ok()) << st;
      for (int r = 0; r < n; ++r) {
        const int64_t want = std::string(ps) == "S(0)" ? 64 * 8 * 4 / n : 64 * 8 * 4;  // S(1): every row's span
        EXPECT_EQ(stats[r].bytes_read, want) << n << " " << ps << " rank " << r;
      }
    }
  }
}

// The read paths of a load: one contiguous run read straight into the result in several
// kPieceBytes pieces (S(0) -> S(0)), runs of >= 2 KiB read straight into the result with the
// unneeded row parts in scratch (S(0) -> S(1) on 2 ranks, S(0),S(1) on 2x2: 2 KiB runs), short
// runs staged and copied (S(1) on 4 and 8 ranks: 1 KiB and 512 B runs), uneven shapes with empty
// shards; with the default 1 MiB checksum blocks and with odd-sized blocks (4100 bytes) that end
// inside runs and rows.
TEST(CheckpointTest, ReshardedLoadsOnEveryReadPath) {
  const std::vector<Spec> specs = {
      {"big", DType::kF32, {256, 1024}, "S(0)", ""},   // 1 MiB, 4 KiB rows
      {"uneven", DType::kF32, {13, 1030}, "S(0)", ""},  // 4120-byte rows, shards of 4/3/3/3 rows
      {"thin", DType::kI64, {3, 700}, "S(0)", ""},      // rank 3 has an empty shard
  };
  for (int64_t block : {int64_t{1} << 20, int64_t{4100}}) {
    const std::string dir = TestDir("read_paths_" + std::to_string(block));
    SaveOptions opts;
    opts.checksum_block_bytes = block;
    ASSERT_TRUE(SaveSpecs(dir, specs, Mesh({4}), opts).ok());
    const std::vector<std::pair<DeviceMesh, std::vector<std::string>>> targets = {
        {Mesh({4}), {"S(0)", "S(1)", "R"}},
        {Mesh({2}), {"S(0)", "S(1)"}},
        {Mesh({2, 2}), {"S(0),S(1)", "S(1),S(0)", "S(1),S(1)", "R,S(1)", "P(sum),S(1)"}},
        {Mesh({8}), {"S(0)", "S(1)"}},
        {Mesh({1}), {"R"}},
    };
    for (const auto& [mesh, list] : targets) {
      for (const std::string& ps : list) EXPECT_EQ(LoadAndCompare(dir, specs, mesh, ps), "") << block << " " << ps;
    }
  }
}

// Loads tensor "w" of `spec` from `dir` as `ps` on `mesh`, checks every rank's values against
// the reference, and that every rank read `want` bytes from the data files.
void ExpectBytesRead(const std::string& dir, const Spec& spec, const DeviceMesh& mesh, const std::string& ps,
                     int64_t want) {
  const Layout layout = Layout::Create(spec.shape, mesh, *ParsePlacements(ps)).value();
  std::vector<LoadStats> stats(static_cast<size_t>(mesh.size()));
  ASSERT_TRUE(WorldOf(mesh.size())
                  .Run([&](Communicator& comm) -> Status {
                    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
                    MF_ASSIGN_OR_RETURN(auto got,
                                        LoadTensors(dir, {LoadRequest{"w", layout}}, ctx, &stats[comm.world_rank()]));
                    MF_ASSIGN_OR_RETURN(Tensor expected, ReferenceLocal(GlobalFor(spec.dtype, spec.shape), layout,
                                                                        comm.world_rank()));
                    if (!(got[0].local() == expected)) return InternalError("mismatch");
                    return Status();
                  })
                  .ok());
  for (size_t r = 0; r < stats.size(); ++r) EXPECT_EQ(stats[r].bytes_read, want) << ps << " rank " << r;
}

// Loads that need only some checksum blocks of a chunk read only those (and each once): f32
// [64, 4096] (16 KiB rows) saved S(0) on 2 ranks: 512 KiB chunks, 4 KiB blocks (ChunkBlockBytes),
// four per row. S(0),S(1) on 2x2 needs 8 KiB of each of 32 rows (2 blocks of 4): 256 KiB read,
// exactly the result. S(1) on 4: one block per row, 256 KiB. S(1) on 8: 2 KiB per row, inside one
// block: the block is read whole, 256 KiB for 128 KiB of result.
TEST(CheckpointTest, LoadSkipsTheBlocksItDoesNotNeed) {
  const std::string dir = TestDir("skip_blocks");
  const Spec spec{"w", DType::kF32, {64, 4096}, "S(0)", ""};
  ASSERT_TRUE(SaveSpecs(dir, {spec}, Mesh({2})).ok());
  ASSERT_EQ(ReadCheckpointMetadata(dir).value().Find("w")->chunks[0].block_bytes, 4096);
  for (const auto& [mesh, ps, want] : std::vector<std::tuple<DeviceMesh, std::string, int64_t>>{
           {Mesh({2, 2}), "S(0),S(1)", 256 << 10}, {Mesh({4}), "S(1)", 256 << 10}, {Mesh({8}), "S(1)", 256 << 10}}) {
    ExpectBytesRead(dir, spec, mesh, ps, want);
  }
}

// A version 1 checkpoint (one checksum block size for the whole checkpoint, before per-chunk
// block sizes) still loads, same-layout and resharded: the metadata of a save with 4 KiB blocks
// (then every chunk's block is the cap) rewritten in version 1.
TEST(CheckpointTest, VersionOneCheckpointStillLoads) {
  const std::string dir = TestDir("version1");
  const std::vector<Spec> specs = {{"big", DType::kF32, {256, 1024}, "S(0)", ""},
                                   {"uneven", DType::kF32, {13, 1030}, "S(0)", ""}};
  SaveOptions opts;
  opts.checksum_block_bytes = 4096;
  ASSERT_TRUE(SaveSpecs(dir, specs, Mesh({4}), opts).ok());
  const CheckpointMetadata md = ReadCheckpointMetadata(dir).value();
  StatusOr<std::string> v1 = EncodeMetadataVersion(md, 1);
  ASSERT_TRUE(v1.ok()) << v1.status();
  const std::string meta = dir + "/" + std::string(kMetadataFileName);
  {
    std::ofstream f(meta, std::ios::binary | std::ios::trunc);
    f.write(v1->data(), static_cast<std::streamsize>(v1->size()));
  }
  ASSERT_EQ(ReadCheckpointMetadata(dir).value(), md);
  for (const auto& [mesh, ps] : std::vector<std::pair<DeviceMesh, std::string>>{
           {Mesh({4}), "S(0)"}, {Mesh({2, 2}), "S(0),S(1)"}, {Mesh({8}), "S(1)"}, {Mesh({1}), "R"}}) {
    EXPECT_EQ(LoadAndCompare(dir, specs, mesh, ps), "") << ps;
  }
}

TEST(CheckpointTest, LoadReadsEachNeededBlockOnceAndWholeBlocksOnly) {
  // f32 [256, 1024] saved S(0) on 4 ranks (256 KiB chunks, 4 KiB rows), 4 KiB checksum blocks
  // (ChunkBlockBytes under the 64 KiB cap). S(0),S(1) on 2x2: each rank needs the left or right
  // half of 128 rows = 2 chunks; every block (a row) of both holds needed bytes, so it reads both
  // chunks whole. S(0) on 8: half a chunk.
  const std::string dir = TestDir("read_bytes");
  const Spec spec{"w", DType::kF32, {256, 1024}, "S(0)", ""};
  SaveOptions opts;
  opts.checksum_block_bytes = 64 << 10;
  ASSERT_TRUE(SaveSpecs(dir, {spec}, Mesh({4}), opts).ok());
  for (const auto& [mesh, ps, want] : std::vector<std::tuple<DeviceMesh, std::string, int64_t>>{
           {Mesh({2, 2}), "S(0),S(1)", 2 * (256 << 10)}, {Mesh({8}), "S(0)", 128 << 10}}) {
    ExpectBytesRead(dir, spec, mesh, ps, want);
  }
}

TEST(CheckpointTest, CorruptionInsideDirectReadsIsRefusedAndNothingIsReturned) {
  // f32 [256, 1024] saved S(0) on 2 ranks: two 512 KiB chunks (several read pieces each), 4 KiB
  // checksum blocks (ChunkBlockBytes: one row each). A flipped byte deep inside chunk 1 is read straight into the result by S(0) on 2
  // ranks (one run), S(0),S(1) on 2x2 (2 KiB runs, the byte in a needed run or in an unneeded
  // row half read to scratch) and R (the whole tensor): every rank must fail with DATA_LOSS
  // naming the tensor, the chunk, the file, the block and its byte range, and return no tensor.
  const Spec spec{"w", DType::kF32, {256, 1024}, "S(0)", ""};
  for (const auto& [ps, mesh_shape, row_byte] : std::vector<std::tuple<std::string, std::vector<int64_t>, int64_t>>{
           {"S(0)", {2}, 100}, {"S(0),S(1)", {2, 2}, 100}, {"S(0),S(1)", {2, 2}, 3000}, {"R", {2}, 4000}}) {
    const std::string dir = TestDir("direct_corrupt");
    ASSERT_TRUE(SaveSpecs(dir, {spec}, Mesh({2})).ok());
    const CheckpointMetadata md = ReadCheckpointMetadata(dir).value();
    const ChunkRecord& c = md.Find("w")->chunks[1];
    ASSERT_EQ(c.file, 1);
    const int64_t at = c.byte_offset + 100 * 4096 + row_byte;  // row 100 of the chunk (past 256 KiB)
    const std::string path = dir + "/" + DataFileName(1);
    {
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(at);
      char ch = 0;
      f.read(&ch, 1);
      ch ^= 0x10;
      f.seekp(at);
      f.write(&ch, 1);
    }
    const DeviceMesh mesh = Mesh(mesh_shape);
    const Layout layout = Layout::Create(spec.shape, mesh, *ParsePlacements(ps)).value();
    std::vector<Status> out(static_cast<size_t>(mesh.size()));
    std::vector<int> returned(static_cast<size_t>(mesh.size()), 0);
    ASSERT_TRUE(WorldOf(mesh.size())
                    .Run([&](Communicator& comm) -> Status {
                      MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
                      StatusOr<std::vector<DTensor>> got = LoadTensors(dir, {LoadRequest{"w", layout}}, ctx);
                      out[comm.world_rank()] = got.status();
                      returned[comm.world_rank()] = got.ok() ? static_cast<int>(got->size()) : 0;
                      return Status();
                    })
                    .ok());
    ASSERT_EQ(c.block_bytes, 4096);
    const int64_t b_begin = c.byte_offset + 100 * 4096, b_end = b_begin + 4096;  // block 100: row 100
    ExpectAllFail(out, StatusCode::kDataLoss,
                  {"'w'", c.box.ToString(), path, "CRC-32C mismatch", "checksum block 100",
                   "[" + std::to_string(b_begin) + ", " + std::to_string(b_end) + ")"});
    // Including the ranks that never read chunk 1 (rank 0 of S(0)): the error is agreed.
    for (size_t r = 0; r < returned.size(); ++r) EXPECT_EQ(returned[r], 0) << ps << " rank " << r;
  }
}

TEST(CheckpointTest, CrashMidSaveKeepsThePreviousCheckpoint) {
  const std::string dir = TestDir("crash");
  const std::vector<Spec> specs = {SavedSpecs()[0], SavedSpecs()[4]};
  SaveOptions v1;
  v1.extra_state = "state-v1";
  ASSERT_TRUE(SaveSpecs(dir, specs, Mesh2x4(), v1, /*seed=*/1).ok());

  struct Crash {
    int files;
    SaveCrashPoint point;
  };
  for (const Crash c : {Crash{0, SaveCrashPoint::kNone}, Crash{1, SaveCrashPoint::kNone}, Crash{2, SaveCrashPoint::kNone},
                        Crash{-1, SaveCrashPoint::kBeforeRename}, Crash{-1, SaveCrashPoint::kBetweenRenames}}) {
    SaveOptions v2;
    v2.extra_state = "state-v2";
    const Status st =
        SaveSpecs(dir, specs, Mesh2x4(), v2, /*seed=*/2, SaveFaults{.fail_after_files = c.files, .crash_point = c.point});
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kAborted) << st;
    EXPECT_NE(st.message().find("injected crash"), std::string::npos) << st;
    EXPECT_EQ(fs::exists(dir), c.point != SaveCrashPoint::kBetweenRenames);
    EXPECT_EQ(LoadAndCompare(dir, specs, Mesh({4, 2}), "S(1),R", /*seed=*/1), "") << c.files;
    EXPECT_EQ(*LoadExtraState(dir), "state-v1");
  }
  // The next save restores the backup first, then commits; nothing stale remains but the
  // temporary directories of the crashed saves.
  SaveOptions v3;
  v3.extra_state = "state-v3";
  ASSERT_TRUE(SaveSpecs(dir, specs, Mesh2x4(), v3, /*seed=*/3).ok());
  EXPECT_FALSE(fs::exists(dir + ".old"));
  EXPECT_EQ(LoadAndCompare(dir, specs, Mesh({8}), "S(0)", /*seed=*/3), "");
  EXPECT_EQ(*LoadExtraState(dir), "state-v3");
}

TEST(CheckpointTest, ExtraStateRoundTripsIncludingBinaryAndEmpty) {
  const std::string dir = TestDir("extra");
  SaveOptions opts;
  opts.extra_state = std::string("loader\0\xff state", 14);
  ASSERT_TRUE(SaveSpecs(dir, {SavedSpecs()[3]}, Mesh2x4(), opts).ok());
  EXPECT_EQ(*LoadExtraState(dir), opts.extra_state);
  ASSERT_TRUE(SaveSpecs(dir, {SavedSpecs()[3]}, Mesh2x4()).ok());
  EXPECT_EQ(*LoadExtraState(dir), "");
  auto missing = LoadExtraState(dir + "_nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

class CheckpointErrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(SaveSpecs(dir_, SavedSpecs(), Mesh2x4()).ok());
    md_ = ReadCheckpointMetadata(dir_).value();
  }
  // The first chunk of `tensor` stored in data file `file`.
  const ChunkRecord& ChunkIn(const std::string& tensor, int file) {
    for (const ChunkRecord& c : md_.Find(tensor)->chunks) {
      if (c.file == file) return c;
    }
    ADD_FAILURE() << "no chunk of " << tensor << " in file " << file;
    return md_.Find(tensor)->chunks[0];
  }
  std::string DataPath(int f) const { return dir_ + "/" + DataFileName(f); }
  std::string MetaPath() const { return dir_ + "/" + std::string(kMetadataFileName); }
  static std::string Read(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  static void Write(const std::string& p, const std::string& bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << bytes;
  }

  std::string dir_;
  CheckpointMetadata md_;
};

TEST_F(CheckpointErrorTest, TruncatedDataFile) {
  fs::resize_file(DataPath(1), static_cast<uintmax_t>(md_.file_sizes[1] - 1));
  ExpectAllFail(LoadStatuses(dir_, "s_s", {13, 6}, Mesh({2})), StatusCode::kDataLoss,
                {"'s_s'", DataPath(1), "truncated"});
  // Tensors whose chunks live elsewhere still load.
  EXPECT_EQ(LoadAndCompare(dir_, {SavedSpecs()[3]}, Mesh({2}), "S(0)"), "");
}

TEST_F(CheckpointErrorTest, FlippedByteInDataFile) {
  const ChunkRecord& c = ChunkIn("nested", 2);
  std::string bytes = Read(DataPath(2));
  bytes[static_cast<size_t>(c.byte_offset + 3)] ^= 0x01;
  Write(DataPath(2), bytes);
  ExpectAllFail(LoadStatuses(dir_, "nested", {10, 3}, Mesh({4, 2}), std::nullopt, "S(0),R"), StatusCode::kDataLoss,
                {"'nested'", DataPath(2), "CRC-32C mismatch"});
}

TEST_F(CheckpointErrorTest, MissingRankFile) {
  // Rank 5 of the 2x4 save holds rows [7,13) x cols [2,4) of s_s (rank 3's box is empty).
  ASSERT_GT(md_.file_sizes[5], 0);
  fs::remove(DataPath(5));
  ExpectAllFail(LoadStatuses(dir_, "s_s", {13, 6}, Mesh({8})), StatusCode::kNotFound, {"'s_s'", DataPath(5), "missing"});
}

TEST_F(CheckpointErrorTest, DirectoryInPlaceOfADataFileOrTheMetadata) {
  fs::remove(DataPath(5));
  fs::create_directory(DataPath(5));
  ExpectAllFail(LoadStatuses(dir_, "s_s", {13, 6}, Mesh({8})), StatusCode::kDataLoss,
                {"'s_s'", DataPath(5), "is a directory"});
  fs::remove(MetaPath());
  fs::create_directory(MetaPath());
  ExpectAllFail(LoadStatuses(dir_, "s_s", {13, 6}, Mesh({2})), StatusCode::kDataLoss, {MetaPath(), "is a directory"});
}

TEST_F(CheckpointErrorTest, CorruptedMetadata) {
  std::string bytes = Read(MetaPath());
  bytes[bytes.size() / 2] ^= 0x40;
  Write(MetaPath(), bytes);
  ExpectAllFail(LoadStatuses(dir_, "rep", {5, 7}, Mesh({2})), StatusCode::kDataLoss, {MetaPath(), "corrupted"});
  fs::resize_file(MetaPath(), 10);
  ExpectAllFail(LoadStatuses(dir_, "rep", {5, 7}, Mesh({2})), StatusCode::kDataLoss, {MetaPath(), "corrupted"});
  EXPECT_EQ(LoadExtraState(dir_).status().code(), StatusCode::kDataLoss);
}

TEST_F(CheckpointErrorTest, UnknownVersion) {
  std::string bytes = Read(MetaPath());
  bytes[8] = 9;  // version field; the CRC is resealed so only the version is wrong
  const uint32_t crc = Crc32c(std::as_bytes(std::span<const char>(bytes.data(), bytes.size() - 4)));
  std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
  Write(MetaPath(), bytes);
  ExpectAllFail(LoadStatuses(dir_, "rep", {5, 7}, Mesh({2})), StatusCode::kUnimplemented,
                {MetaPath(), "version 9", "reads versions 1 to 2"});
}

TEST_F(CheckpointErrorTest, UnknownNameShapeAndDTypeMismatch) {
  ExpectAllFail(LoadStatuses(dir_, "nope", {5, 7}, Mesh({2})), StatusCode::kNotFound, {"'nope'", MetaPath()});
  ExpectAllFail(LoadStatuses(dir_, "rep", {7, 5}, Mesh({2})), StatusCode::kInvalidArgument,
                {"'rep'", MetaPath(), "[5,7]", "[7,5]"});
  ExpectAllFail(LoadStatuses(dir_, "rep", {5, 7}, Mesh({2}), DType::kF32), StatusCode::kInvalidArgument,
                {"'rep'", MetaPath(), "i32", "f32"});
}

TEST(CheckpointTest, SaveRejectsBadInputsOnEveryRank) {
  const std::string dir = TestDir("bad_inputs");
  const DeviceMesh mesh = Mesh({2});
  const Layout layout = Layout::Create({4}, mesh, {Shard{0}}).value();
  std::vector<Status> out(2);
  ASSERT_TRUE(WorldOf(2)
                  .Run([&](Communicator& comm) -> Status {
                    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
                    MF_ASSIGN_OR_RETURN(DTensor x, Distribute(GlobalFor(DType::kF32, {4}), layout, comm.world_rank()));
                    // Only rank 1 passes a duplicate name: both ranks must fail.
                    std::vector<std::pair<std::string, const DTensor*>> named = {{"a", &x}};
                    if (comm.world_rank() == 1) named.push_back({"a", &x});
                    out[comm.world_rank()] = SaveCheckpoint(dir, named, ctx);
                    return Status();
                  })
                  .ok());
  ExpectAllFail(out, StatusCode::kInvalidArgument, {"duplicate tensor name 'a'"});
  EXPECT_FALSE(fs::exists(dir));
  // A non-checkpoint directory is never replaced.
  fs::create_directories(dir);
  std::ofstream(dir + "/precious.txt") << "x";
  ASSERT_TRUE(WorldOf(2)
                  .Run([&](Communicator& comm) -> Status {
                    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
                    MF_ASSIGN_OR_RETURN(DTensor x, Distribute(GlobalFor(DType::kF32, {4}), layout, comm.world_rank()));
                    out[comm.world_rank()] = SaveCheckpoint(dir, {{"a", &x}}, ctx);
                    return Status();
                  })
                  .ok());
  ExpectAllFail(out, StatusCode::kFailedPrecondition, {"refusing to replace"});
  EXPECT_TRUE(fs::exists(dir + "/precious.txt"));
}


// ---------------------------------------------------------------------------------------------
// Concurrency: the save lock, pinned loads, cleanup and unambiguous save results.

// Removes the test hook when it goes out of scope.
struct HookGuard {
  explicit HookGuard(CheckpointTestHook h) { SetCheckpointTestHook(std::move(h)); }
  ~HookGuard() { SetCheckpointTestHook({}); }
};

// Entries of dir's parent named `<dir>.tmp-*`.
std::vector<std::string> TempDirsOf(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(fs::path(dir).parent_path())) {
    if (e.path().string().rfind(dir + ".tmp-", 0) == 0) out.push_back(e.path().string());
  }
  return out;
}

// Saves "w" (f32 [24,10], GlobalFor(seed = step)) and "step" (i64 scalar = step) from `world`
// on `mesh`; returns every rank's status (per-rank SaveInfo in `infos` when given).
std::vector<Status> SaveStep(ThreadWorld& world, const std::string& dir, const DeviceMesh& mesh, int step,
                             SaveOptions options = {}, std::vector<SaveInfo>* infos = nullptr,
                             Status* run_status = nullptr, SaveFaults faults = {}) {
  std::vector<Status> out(static_cast<size_t>(mesh.size()));
  if (infos != nullptr) infos->assign(static_cast<size_t>(mesh.size()), SaveInfo{});
  const Status run = world.Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    const Layout wl = Layout::Create({24, 10}, mesh, *ParsePlacements(mesh.ndim() == 2 ? "S(0),S(1)" : "S(0)")).value();
    const Layout sl = Layout::Create({}, mesh, *ParsePlacements(mesh.ndim() == 2 ? "R,R" : "R")).value();
    MF_ASSIGN_OR_RETURN(DTensor w, Distribute(GlobalFor(DType::kF32, {24, 10}, step), wl, comm.world_rank()));
    Tensor st = Tensor::Zeros(DType::kI64, {});
    st.SetFromDouble(0, step);
    MF_ASSIGN_OR_RETURN(DTensor stp, Distribute(st, sl, comm.world_rank()));
    SaveOptions o = options;
    o.extra_state = "step " + std::to_string(step);
    if (infos != nullptr) o.info = &(*infos)[comm.world_rank()];
    Status& mine = out[comm.world_rank()];
    mine = SaveCheckpointWithFaults(dir, {{"w", &w}, {"step", &stp}}, ctx, o, faults);
    return mine;
  });
  if (run_status != nullptr) *run_status = run;
  return out;
}

// One load of "w" (S(1)) and "step" on `mesh`: the step every rank got (-1 on error), and whether
// each rank's "w" equals the saved global of that step.
struct LoadOutcome {
  Status status;
  std::vector<int64_t> steps;
  std::vector<int> data_ok;  // not vector<bool>: ranks write their entries concurrently
};

LoadOutcome LoadStep(ThreadWorld& world, const std::string& dir, const DeviceMesh& mesh) {
  LoadOutcome o;
  o.steps.assign(static_cast<size_t>(mesh.size()), -1);
  o.data_ok.assign(static_cast<size_t>(mesh.size()), 0);
  const Layout wl = Layout::Create({24, 10}, mesh, *ParsePlacements("S(1)")).value();
  const Layout sl = Layout::Create({}, mesh, *ParsePlacements("R")).value();
  o.status = world.Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    MF_ASSIGN_OR_RETURN(std::vector<DTensor> got,
                        LoadTensors(dir, {LoadRequest{"w", wl, DType::kF32}, LoadRequest{"step", sl, DType::kI64}}, ctx));
    const int r = comm.world_rank();
    const int64_t step = static_cast<int64_t>(got[1].local().GetAsDouble(0));
    o.steps[r] = step;
    MF_ASSIGN_OR_RETURN(Tensor want, ReferenceLocal(GlobalFor(DType::kF32, {24, 10}, static_cast<int>(step)), wl, r));
    o.data_ok[r] = got[0].local() == want ? 1 : 0;
    return Status();
  });
  return o;
}

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : fallback;
}

// Counts the loads that overlap a save, through the test hook: a save is in progress on its
// rank 0 from "save:locked" to "save:committed" (or until SaveStep returns), and a load overlaps
// when its rank 0 pins the checkpoint ("load:pinned") during one. To make overlaps certain, not
// a matter of timing, the rank 0 of every odd save waits at "save:data-written" (its data
// written, nothing committed) until a load has pinned during that save; the wait is bounded
// (kMaxWait), so a load that cannot overlap fails the assertion instead of hanging the test.
class SaveLoadOverlap {
 public:
  // Well below the in-process world's collective timeout (30 s), which the other saver ranks wait
  // under meanwhile.
  static constexpr std::chrono::seconds kMaxWait{10};

  Status OnHook(std::string_view point, int world_rank) {
    if (world_rank != 0) return Status();
    std::unique_lock<std::mutex> lock(mu_);
    if (point == "save:locked") {
      saving_ = true;
      ++save_index_;
    } else if (point == "save:committed") {
      saving_ = false;
    } else if (point == "load:pinned" && saving_) {
      ++overlaps_;
      overlapped_save_ = save_index_;
      cv_.notify_all();
    } else if (point == "save:data-written" && save_index_ % 2 == 1 && !gave_up_) {
      if (!cv_.wait_for(lock, kMaxWait, [&] { return overlapped_save_ == save_index_; })) gave_up_ = true;
    }
    return Status();
  }
  void SaveReturned() {
    std::lock_guard<std::mutex> lock(mu_);
    saving_ = false;
  }
  int overlaps() {
    std::lock_guard<std::mutex> lock(mu_);
    return overlaps_;
  }
  bool gave_up() {
    std::lock_guard<std::mutex> lock(mu_);
    return gave_up_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool saving_ = false;
  int save_index_ = 0;        // saves that took the lock so far
  int overlapped_save_ = -1;  // the last save a load overlapped
  int overlaps_ = 0;
  bool gave_up_ = false;
};

// A saver replaces the checkpoint again and again while a job on another mesh loads it in a loop:
// every load returns OK with all ranks on one step and that step's exact data, and loads do
// overlap saves (SaveLoadOverlap: at least one per odd save). The trial size is
// MF_CKPT_TRIAL_SAVES (default 12 saves); the counts are printed (bench/README.md quotes them).
TEST(CheckpointConcurrencyTest, LoadsDuringSavesAreNeverTornNorFalselyFail) {
  const std::string dir = TestDir("concurrent");
  const int saves = EnvInt("MF_CKPT_TRIAL_SAVES", 12);
  auto saver = ThreadWorld::Create(4).value();
  auto loader = ThreadWorld::Create(3).value();
  const DeviceMesh save_mesh = Mesh({2, 2}), load_mesh = Mesh({3});
  SaveOptions opts;
  opts.checksum_block_bytes = 64;
  for (const Status& st : SaveStep(*saver, dir, save_mesh, 0, opts)) ASSERT_TRUE(st.ok()) << st;

  SaveLoadOverlap overlap;
  HookGuard guard([&](std::string_view point, int rank) { return overlap.OnHook(point, rank); });
  std::atomic<bool> saving{true};
  std::vector<Status> save_failures;
  std::thread save_thread([&] {
    for (int step = 1; step <= saves; ++step) {
      for (const Status& st : SaveStep(*saver, dir, save_mesh, step, opts)) {
        if (!st.ok()) save_failures.push_back(st);
      }
      overlap.SaveReturned();
    }
    saving = false;
  });
  int loads = 0, during = 0, torn = 0, data_loss = 0, other_errors = 0;
  std::set<int64_t> seen;
  std::string first_problem;
  for (bool last = false; !last;) {
    last = !saving;  // one more load after the saver has finished
    const bool overlapped = !last;
    LoadOutcome o = LoadStep(*loader, dir, load_mesh);
    ++loads;
    during += overlapped;
    if (!o.status.ok()) {
      (o.status.code() == StatusCode::kDataLoss ? data_loss : other_errors)++;
      if (first_problem.empty()) first_problem = o.status.ToString();
      continue;
    }
    bool bad = false;
    for (size_t r = 0; r < o.steps.size(); ++r) bad = bad || o.steps[r] != o.steps[0] || !o.data_ok[r];
    if (bad) {
      ++torn;
      if (first_problem.empty()) {
        first_problem = "torn load: steps";
        for (int64_t st : o.steps) first_problem += " " + std::to_string(st);
      }
    }
    seen.insert(o.steps[0]);
  }
  save_thread.join();
  std::printf("concurrent save/load trial: %d saves, %d loads (%d during saves, %d pinned inside a save), %zu "
              "distinct steps loaded, %d torn, %d DATA_LOSS, %d other errors\n",
              saves, loads, during, overlap.overlaps(), seen.size(), torn, data_loss, other_errors);
  EXPECT_GE(overlap.overlaps(), (saves + 1) / 2) << "loads that pinned the checkpoint while a save was in progress";
  EXPECT_FALSE(overlap.gave_up()) << "an odd save waited " << SaveLoadOverlap::kMaxWait.count()
                                  << " s at save:data-written and no load pinned meanwhile";
  EXPECT_TRUE(save_failures.empty()) << save_failures.front();
  EXPECT_EQ(torn, 0) << first_problem;
  EXPECT_EQ(data_loss, 0) << first_problem;
  EXPECT_EQ(other_errors, 0) << first_problem;
  EXPECT_EQ(*LoadExtraState(dir), "step " + std::to_string(saves));
}

TEST(CheckpointConcurrencyTest, SecondSaverIsRefusedNamingTheHolder) {
  const std::string dir = TestDir("second_saver");
  auto first = ThreadWorld::Create(2).value();
  auto second = ThreadWorld::Create(2).value();
  const DeviceMesh mesh = Mesh({2});
  std::vector<Status> refused;
  int calls = 0;
  {
    // While the first save holds the lock, a second job saves the same directory.
    HookGuard guard([&](std::string_view point, int rank) -> Status {
      if (point == "save:locked" && calls++ == 0) refused = SaveStep(*second, dir, mesh, 2);
      return Status();
    });
    for (const Status& st : SaveStep(*first, dir, mesh, 1)) EXPECT_TRUE(st.ok()) << st;
  }
  EXPECT_EQ(calls, 1);  // the refused save never got the lock
  ExpectAllFail(refused, StatusCode::kAborted,
                {"is being saved by another save", CheckpointLockPath(dir), "pid " + std::to_string(::getpid()),
                 "host ", "this save wrote nothing"});
  EXPECT_TRUE(TempDirsOf(dir).empty());
  EXPECT_EQ(*LoadExtraState(dir), "step 1");
  // The lock is released with the save: the next save succeeds.
  for (const Status& st : SaveStep(*second, dir, mesh, 3)) EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(*LoadExtraState(dir), "step 3");
}

TEST(CheckpointConcurrencyTest, FailedSaveRemovesItsTemporaryDirectoryAndStaleOnesAreRemoved) {
  const std::string dir = TestDir("cleanup");
  auto world = ThreadWorld::Create(2).value();
  const DeviceMesh mesh = Mesh({2});
  for (const Status& st : SaveStep(*world, dir, mesh, 1)) ASSERT_TRUE(st.ok()) << st;
  std::vector<SaveInfo> infos;
  {
    HookGuard guard([](std::string_view point, int rank) -> Status {
      if (point == "save:data-written" && rank == 1) return UnavailableError("injected: disk full on rank 1");
      return Status();
    });
    ExpectAllFail(SaveStep(*world, dir, mesh, 2, {}, &infos), StatusCode::kUnavailable,
                  {"rank 1", "injected: disk full"});
  }
  for (const SaveInfo& i : infos) EXPECT_FALSE(i.committed);
  EXPECT_TRUE(TempDirsOf(dir).empty());
  EXPECT_EQ(*LoadExtraState(dir), "step 1");
  // A crashed save leaves its temporary directory; the next save removes it (and only
  // `<dir>.tmp-<16 hex digits>` names).
  const SaveFaults crash{.crash_point = SaveCrashPoint::kBeforeRename};
  for (const Status& st : SaveStep(*world, dir, mesh, 3, {}, nullptr, nullptr, crash)) EXPECT_EQ(st.code(), StatusCode::kAborted) << st;
  EXPECT_EQ(TempDirsOf(dir).size(), 1u);
  fs::create_directories(dir + ".tmp-keep");
  for (const Status& st : SaveStep(*world, dir, mesh, 4, {}, &infos)) EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(infos[0].stale_temp_dirs_removed, 1);
  EXPECT_EQ(TempDirsOf(dir), std::vector<std::string>{dir + ".tmp-keep"});
  EXPECT_EQ(*LoadExtraState(dir), "step 4");
}

TEST(CheckpointConcurrencyTest, SaveResultIsUnambiguousAroundTheCommit) {
  const std::string dir = TestDir("unambiguous");
  auto world = ThreadWorld::Create(2).value();
  const DeviceMesh mesh = Mesh({2});
  std::vector<SaveInfo> infos;
  for (const Status& st : SaveStep(*world, dir, mesh, 1, {}, &infos)) ASSERT_TRUE(st.ok()) << st;
  for (const SaveInfo& i : infos) EXPECT_TRUE(i.committed);
  EXPECT_EQ(infos[0].warning, "");
  // A failure after the commit point is a warning: every rank returns OK.
  const SaveFaults late{.fail_after_commit = true};
  for (const Status& st : SaveStep(*world, dir, mesh, 2, {}, &infos, nullptr, late)) EXPECT_TRUE(st.ok()) << st;
  for (const SaveInfo& i : infos) EXPECT_TRUE(i.committed);
  EXPECT_NE(infos[0].warning.find("injected failure after the commit"), std::string::npos) << infos[0].warning;
  EXPECT_EQ(*LoadExtraState(dir), "step 2");
  // Rank 0 dies right after committing: the other ranks cannot know the outcome and say so.
  Status run;
  std::vector<Status> out;
  {
    HookGuard guard([](std::string_view point, int rank) -> Status {
      return point == "save:committed" ? AbortedError("injected death of rank 0 after the commit") : Status();
    });
    out = SaveStep(*world, dir, mesh, 3, {}, nullptr, &run);
  }
  EXPECT_FALSE(run.ok());
  EXPECT_NE(out[0].message().find("injected death"), std::string::npos) << out[0];
  ASSERT_FALSE(out[1].ok());
  EXPECT_NE(out[1].message().find("may or may not have committed"), std::string::npos) << out[1];
  EXPECT_NE(out[1].message().find(dir), std::string::npos) << out[1];
  EXPECT_EQ(*LoadExtraState(dir), "step 3");  // it had committed
}

// Where the commit lock does not reach (another host), a checkpoint replaced between rank 0's
// open and the others' is detected and the load retried; a checkpoint replaced every time fails.
TEST(CheckpointConcurrencyTest, RanksThatOpenDifferentCheckpointsRetryAndNeverMix) {
  const std::string dir = TestDir("mismatch");
  const std::string other = dir + "_other";
  auto world = ThreadWorld::Create(3).value();
  const DeviceMesh mesh = Mesh({3});
  for (const Status& st : SaveStep(*world, dir, mesh, 1)) ASSERT_TRUE(st.ok()) << st;
  for (const Status& st : SaveStep(*world, other, mesh, 2)) ASSERT_TRUE(st.ok()) << st;
  auto swap = [&] {
    fs::rename(dir, dir + "_swap");
    fs::rename(other, dir);
    fs::rename(dir + "_swap", other);
  };
  int pins = 0;
  int swaps_left = 1;
  HookGuard guard([&](std::string_view point, int rank) -> Status {
    if (point != "load:pinned") return Status();
    ++pins;
    if (swaps_left-- > 0) swap();
    return Status();
  });
  LoadOutcome o = LoadStep(*world, dir, mesh);
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(pins, 2);
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(o.steps[r], 2) << r;  // the second attempt pinned the checkpoint now at dir
    EXPECT_TRUE(o.data_ok[r]) << r;
  }
  pins = 0;
  swaps_left = 1 << 20;
  std::vector<Status> statuses = LoadStatuses(dir, "w", {24, 10}, mesh);
  EXPECT_EQ(pins, kLoadPinAttempts);
  ExpectAllFail(statuses, StatusCode::kAborted,
                {"opened different checkpoints in each of " + std::to_string(kLoadPinAttempts) + " attempts",
                 "opened another checkpoint than rank 0", CheckpointCommitLockPath(dir)});
}

TEST(CheckpointConcurrencyTest, UnusableLockFileAndUnstatablePathsAreNamed) {
  const std::string dir = TestDir("badlock");
  auto world = ThreadWorld::Create(2).value();
  const DeviceMesh mesh = Mesh({2});
  fs::create_directories(CheckpointLockPath(dir));  // a directory cannot be opened for writing
  ExpectAllFail(SaveStep(*world, dir, mesh, 1), StatusCode::kUnavailable,
                {"cannot open the lock file", CheckpointLockPath(dir)});
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_TRUE(TempDirsOf(dir).empty());
  // A path under a regular file: stat fails with ENOTDIR, which is not "no checkpoint".
  std::ofstream(dir + "_file") << "x";
  const StatusOr<std::string> r = ResolveCheckpointDir(dir + "_file/ckpt");
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status();
  EXPECT_NE(r.status().message().find("cannot stat " + dir + "_file/ckpt"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace meshflow
