// Error behaviour of every public entry point on bad input: one TEST per row of docs/errors.md
// (the row names the test). Each test asserts the status code and a key phrase of the message, so
// the table and the library cannot drift apart silently.
//
//   bazel test //tests:errors_test
//
// Multi-rank rows run on a small ThreadWorld (RunRanks) with a short timeout, so a hang would be a
// DeadlineExceeded failure here, not a stuck test.
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/checkpoint/checkpoint.h"
#include "meshflow/checkpoint/format.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/executor.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/collectives/mpi/mpi_communicator.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/data/dataset.h"
#include "meshflow/data/loader.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/dtensor/placement.h"
#include "meshflow/mesh/device_mesh.h"
#include "meshflow/runtime/eager.h"
#include "meshflow/compiler/graph.h"
#include "meshflow/compiler/program.h"
#include "meshflow/compiler/propagation.h"
#include "meshflow/planner/cost_model.h"
#include "meshflow/planner/greedy_reference.h"
#include "meshflow/planner/planner.h"
#include "meshflow/planner/search.h"

namespace meshflow {
namespace {

const Status& StatusOf(const Status& s) { return s; }
template <typename T>
const Status& StatusOf(const StatusOr<T>& s) {
  return s.status();
}

#define EXPECT_ERROR(expr, want_code, want_substr)                                            \
  do {                                                                                       \
    const Status mf_s = StatusOf(expr);                                                      \
    EXPECT_EQ(mf_s.code(), (want_code)) << mf_s;                                             \
    EXPECT_NE(mf_s.message().find(want_substr), std::string::npos)                           \
        << "missing '" << (want_substr) << "' in: " << mf_s;                                 \
  } while (0)

DeviceMesh Mesh(std::vector<int64_t> shape) { return *DeviceMesh::Create(std::move(shape)); }
Layout MakeLayout(std::vector<int64_t> shape, const DeviceMesh& mesh, std::string_view placements) {
  return *Layout::Create(std::move(shape), mesh, *ParsePlacements(placements));
}

// Runs fn on every rank of an n-rank ThreadWorld (timeout `ms`); returns the per-rank statuses
// (what each fn returned is recorded, and fn's result is not propagated, so one rank's error does
// not abort the others) and stores Run's own status in *run.
std::vector<Status> RunRanks(int n, const std::function<Status(Communicator&)>& fn, int ms = 2000,
                             Status* run = nullptr) {
  ThreadWorldOptions opts;
  opts.timeout = std::chrono::milliseconds(ms);
  auto world = ThreadWorld::Create(n, opts);
  EXPECT_TRUE(world.ok()) << world.status();
  std::vector<Status> out(static_cast<size_t>(n));
  std::mutex mu;
  Status s = (*world)->Run([&](Communicator& c) -> Status {
    Status r = fn(c);
    std::lock_guard<std::mutex> lock(mu);
    out[static_cast<size_t>(c.world_rank())] = r;
    return Status();
  });
  if (run != nullptr) *run = s;
  return out;
}

std::string FreshDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::filesystem::path p = std::filesystem::path(base ? base : "/tmp") / ("errors_test_" + name);
  std::filesystem::remove_all(p);
  std::filesystem::remove_all(p.string() + ".old");
  return p.string();
}

// ---- DeviceMesh ----

TEST(ErrorsTest, DeviceMeshCreate_ZeroSizeDim) {
  EXPECT_ERROR(DeviceMesh::Create({2, 0}), StatusCode::kInvalidArgument, "mesh dim 1 has size 0");
}

TEST(ErrorsTest, DeviceMeshCreate_TooManyRanks) {
  EXPECT_ERROR(DeviceMesh::Create({int64_t{1} << 40, int64_t{1} << 40}), StatusCode::kInvalidArgument,
               "is too large");
}

TEST(ErrorsTest, DeviceMeshCreate_NameCountMismatch) {
  EXPECT_ERROR(DeviceMesh::Create({2, 2}, {"dp"}), StatusCode::kInvalidArgument, "2 dims but 1 names");
}

TEST(ErrorsTest, DeviceMeshCreateWithRanks_WrongRankCount) {
  EXPECT_ERROR(DeviceMesh::CreateWithRanks({2, 2}, {0, 1, 2}), StatusCode::kInvalidArgument,
               "has 4 ranks but 3 ranks were given");
}

// ---- Parsing ----

TEST(ErrorsTest, ParsePlacements_BadShardDim) {
  EXPECT_ERROR(ParsePlacements("S(x),R"), StatusCode::kInvalidArgument, "bad placement 'S(x)'");
  EXPECT_ERROR(ParsePlacements("S(x),R"), StatusCode::kInvalidArgument,
               "expected one of S(<dim>), R, P, P(sum|avg|max|min)");
}

TEST(ErrorsTest, ParsePlacements_Empty) {
  EXPECT_ERROR(ParsePlacements(" "), StatusCode::kInvalidArgument, "empty placements list");
}

TEST(ErrorsTest, ParsePlacement_UnknownReduceOp) {
  EXPECT_ERROR(ParsePlacement("P(prod)"), StatusCode::kInvalidArgument,
               "unknown reduce op 'prod'; expected one of sum, avg, max, min");
}

TEST(ErrorsTest, ParseShardOrder_Malformed) {
  EXPECT_ERROR(ParseShardOrder("0:1,0"), StatusCode::kInvalidArgument, "bad shard order '0:1,0'");
}

TEST(ErrorsTest, ParseTopology_UnknownKey) {
  EXPECT_ERROR(ParseTopology("bw=3"), StatusCode::kInvalidArgument,
               "unknown key 'bw'; expected one of intra, bw_intra, bw_inter, lat_intra, lat_inter");
}

TEST(ErrorsTest, ParseTopology_NonPositiveBandwidth) {
  EXPECT_ERROR(ParseTopology("bw_inter=0"), StatusCode::kInvalidArgument, "bw_inter=0 must be > 0");
}

TEST(ErrorsTest, ParseDType_Unsupported) {
  EXPECT_ERROR(ParseDType("f16"), StatusCode::kInvalidArgument,
               "unknown dtype 'f16'; expected one of f32, f64, bf16, i32, i64");
}

TEST(ErrorsTest, ParsePlannerKind_Unknown) {
  EXPECT_ERROR(ParsePlannerKind("fastest"), StatusCode::kInvalidArgument,
               "unknown planner 'fastest'; expected one of optimal, greedy, direct");
}

// ---- Layout::Create ----

TEST(ErrorsTest, LayoutCreate_ShardDimOutOfRange) {
  EXPECT_ERROR(Layout::Create({8}, Mesh({2}), {Shard{1}}), StatusCode::kInvalidArgument,
               "out of range for a rank-1 tensor");
}

TEST(ErrorsTest, LayoutCreate_PlacementCountMismatch) {
  EXPECT_ERROR(Layout::Create({8}, Mesh({2, 2}), {Shard{0}}), StatusCode::kInvalidArgument,
               "have 1 entries but the mesh has 2 dims");
}

TEST(ErrorsTest, LayoutCreate_MixedPartialOps) {
  EXPECT_ERROR(Layout::Create({8}, Mesh({2, 2}), {Partial{ReduceOp::kSum}, Partial{ReduceOp::kMax}}),
               StatusCode::kInvalidArgument, "mix Partial reduce ops");
}

TEST(ErrorsTest, LayoutCreate_NegativeSize) {
  EXPECT_ERROR(Layout::Create({8, -1}, Mesh({2}), {Shard{0}}), StatusCode::kInvalidArgument,
               "has negative size at dim 1");
}

TEST(ErrorsTest, LayoutCreate_HugeShape) {
  EXPECT_ERROR(Layout::Create({std::numeric_limits<int64_t>::max()}, Mesh({2}), {Shard{0}}),
               StatusCode::kInvalidArgument, "is too large");
}

TEST(ErrorsTest, LayoutCreate_BadShardOrder) {
  EXPECT_ERROR(Layout::Create({8, 6}, Mesh({2, 2}), {Shard{0}, Shard{1}}, {{1, 0}}), StatusCode::kInvalidArgument,
               "shard order for tensor dim 0 is [1,0] but the mesh dims sharding it are [0]");
}

TEST(ErrorsTest, LayoutCreate_ZeroSizeDimIsLegal) {
  auto l = Layout::Create({0, 3}, Mesh({2, 2}), {Shard{0}, Shard{1}});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_TRUE(l->AllLocalBoxes()[3].empty());
}

// ---- DTensor: Distribute / FromLocal ----

TEST(ErrorsTest, Distribute_GlobalShapeMismatch) {
  const Layout l = MakeLayout({4, 4}, Mesh({2}), "S(0)");
  EXPECT_ERROR(Distribute(Tensor::Iota(DType::kF32, {4, 5}), l, 0), StatusCode::kInvalidArgument,
               "global tensor has shape [4,5]");
}

TEST(ErrorsTest, Distribute_RankNotInMesh) {
  const Layout l = MakeLayout({4}, Mesh({2}), "S(0)");
  EXPECT_ERROR(Distribute(Tensor::Iota(DType::kF32, {4}), l, 2), StatusCode::kOutOfRange, "rank 2 is not in");
}

TEST(ErrorsTest, FromLocal_WrongLocalShape) {
  const Layout l = MakeLayout({5}, Mesh({2}), "S(0)");
  EXPECT_ERROR(DTensor::FromLocal(Tensor::Zeros(DType::kF32, {3}), l, 1), StatusCode::kInvalidArgument,
               "FromLocal: rank 1 passed a local tensor of shape [3]");
}

// ---- Planner ----

TEST(ErrorsTest, PlanRedistribution_DifferentShapes) {
  const DeviceMesh m = Mesh({2});
  EXPECT_ERROR(PlanRedistribution(MakeLayout({4}, m, "S(0)"), MakeLayout({6}, m, "R"), DType::kF32, Topology()),
               StatusCode::kInvalidArgument, "different global shapes");
}

TEST(ErrorsTest, PlanRedistribution_NegativeLatencyTopology) {
  const DeviceMesh m = Mesh({2});
  Topology topo;
  topo.lat_intra_us = -1;  // built in code, bypassing ParseTopology
  EXPECT_ERROR(PlanRedistribution(MakeLayout({4}, m, "S(0)"), MakeLayout({4}, m, "R"), DType::kF32, topo),
               StatusCode::kInvalidArgument, "topology lat_intra=-1 must be >= 0");
}

TEST(ErrorsTest, PlanRedistribution_PartialToOtherPartial) {
  const DeviceMesh m = Mesh({2});
  EXPECT_ERROR(PlanRedistribution(MakeLayout({4}, m, "P(sum)"), MakeLayout({4}, m, "P(max)"), DType::kF32,
                                  Topology()),
               StatusCode::kInvalidArgument, "Partial(sum) -> Partial(max) is not supported");
}

TEST(ErrorsTest, PlanFor_GreedyNeedsDefaultShardOrder) {
  const DeviceMesh m = Mesh({2, 2});
  const Layout from = *Layout::Create({8}, m, {Shard{0}, Shard{0}}, {{1, 0}});
  RedistributeOptions o;
  o.planner = PlannerKind::kGreedy;
  EXPECT_ERROR(PlanFor(from, MakeLayout({8}, m, "R,R"), DType::kF32, o), StatusCode::kInvalidArgument,
               "needs default shard orders");
}

TEST(ErrorsTest, PlanFor_DirectFromPartial) {
  const DeviceMesh m = Mesh({2});
  RedistributeOptions o;
  o.planner = PlannerKind::kDirect;
  EXPECT_ERROR(PlanFor(MakeLayout({4}, m, "P"), MakeLayout({4}, m, "R"), DType::kF32, o),
               StatusCode::kInvalidArgument, "cannot start from a Partial layout");
}

// ---- Redistribute / FullTensor / ExecutePlan / RankContext (threads world) ----

TEST(ErrorsTest, Redistribute_TargetOnOtherMesh) {
  const DeviceMesh m = Mesh({2});
  const Layout other = *Layout::Create({4}, *DeviceMesh::Create({2}, {"tp"}), {Replicate{}});
  std::vector<Status> st = RunRanks(2, [&](Communicator& c) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(c, m));
    MF_ASSIGN_OR_RETURN(DTensor x, Distribute(Tensor::Iota(DType::kF32, {4}), MakeLayout({4}, m, "S(0)"),
                                              c.world_rank()));
    return Redistribute(x, other, ctx).status();
  });
  for (const Status& s : st) EXPECT_ERROR(s, StatusCode::kInvalidArgument, "different meshes");
}

TEST(ErrorsTest, Redistribute_MismatchedShapesAcrossRanks) {
  const DeviceMesh m = Mesh({2});
  std::vector<Status> st = RunRanks(2, [&](Communicator& c) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(c, m));
    const int64_t n = c.world_rank() == 0 ? 4 : 6;  // the ranks disagree on the global shape
    MF_ASSIGN_OR_RETURN(DTensor x, Distribute(Tensor::Iota(DType::kF32, {n}), MakeLayout({n}, m, "S(0)"),
                                              c.world_rank()));
    return Redistribute(x, MakeLayout({n}, m, "R"), ctx).status();
  });
  for (const Status& s : st) EXPECT_ERROR(s, StatusCode::kFailedPrecondition, "all_gather");
}

TEST(ErrorsTest, FullTensor_ZeroSizeDimIsLegal) {
  const DeviceMesh m = Mesh({2, 2});
  std::vector<Status> st = RunRanks(4, [&](Communicator& c) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(c, m));
    const Tensor g = Tensor::Iota(DType::kI32, {3, 0});
    MF_ASSIGN_OR_RETURN(DTensor x, Distribute(g, MakeLayout({3, 0}, m, "S(0),S(1)"), c.world_rank()));
    MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(x, ctx));
    return full == g ? Status() : InternalError("FullTensor differs");
  });
  for (const Status& s : st) EXPECT_TRUE(s.ok()) << s;
}

TEST(ErrorsTest, ExecutePlan_WrongDtype) {
  const DeviceMesh m = Mesh({2});
  auto plan = PlanFor(MakeLayout({4}, m, "S(0)"), MakeLayout({4}, m, "R"), DType::kF32);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<Status> st = RunRanks(2, [&](Communicator& c) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(c, m));
    Tensor local = Tensor::Zeros(DType::kI32, {2});
    return ExecutePlan(**plan, ctx, local);
  });
  for (const Status& s : st) {
    EXPECT_ERROR(s, StatusCode::kInvalidArgument, "plan is for dtype f32 but the local tensor is i32");
  }
}

TEST(ErrorsTest, ExecutePlan_WrongLocalShapeOnOneRank) {
  const DeviceMesh m = Mesh({2});
  auto plan = PlanFor(MakeLayout({4}, m, "S(0)"), MakeLayout({4}, m, "R"), DType::kF32);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ThreadWorldOptions o;
  o.timeout = std::chrono::milliseconds(20000);
  auto world = ThreadWorld::Create(2, o);
  ASSERT_TRUE(world.ok());
  std::vector<Status> st(2);
  const auto start = std::chrono::steady_clock::now();
  // Each rank returns its error, so Run aborts the world: rank 0, already waiting in the
  // all_gather for rank 1, gets Aborted at once instead of waiting for the 20 s timeout.
  Status run = (*world)->Run([&](Communicator& c) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(c, m));
    Tensor local = Tensor::Zeros(DType::kF32, {c.world_rank() == 1 ? 3 : 2});
    st[static_cast<size_t>(c.world_rank())] = ExecutePlan(**plan, ctx, local);
    return st[static_cast<size_t>(c.world_rank())];
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_ERROR(st[1], StatusCode::kInvalidArgument, "ExecutePlan: rank 1 holds a local tensor of shape [3]");
  EXPECT_ERROR(st[0], StatusCode::kAborted, "rank 1 failed");
  EXPECT_FALSE(run.ok());
}

TEST(ErrorsTest, ExecutePlan_PlanForOtherMesh) {
  const DeviceMesh m = Mesh({2});
  const DeviceMesh named = *DeviceMesh::Create({2}, {"tp"});
  auto plan = PlanFor(MakeLayout({4}, named, "S(0)"), MakeLayout({4}, named, "R"), DType::kF32);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<Status> st = RunRanks(2, [&](Communicator& c) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(c, m));
    Tensor local = Tensor::Zeros(DType::kF32, {2});
    return ExecutePlan(**plan, ctx, local);
  });
  for (const Status& s : st) EXPECT_ERROR(s, StatusCode::kInvalidArgument, "but the communicators are for");
}

TEST(ErrorsTest, ExecutePlan_RankSkipsCollective) {
  const DeviceMesh m = Mesh({3});
  auto plan = PlanFor(MakeLayout({6}, m, "S(0)"), MakeLayout({6}, m, "R"), DType::kF32);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const auto start = std::chrono::steady_clock::now();
  std::vector<Status> st = RunRanks(
      3,
      [&](Communicator& c) -> Status {
        if (c.world_rank() == 2) return Status();  // never joins the all_gather
        MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(c, m));
        Tensor local = Tensor::Zeros(DType::kF32, {2});
        return ExecutePlan(**plan, ctx, local);
      },
      /*ms=*/200);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  // Rank 2 returned: the others are told at once (a late rank would time out instead; see
  // threads_world_test TimeoutNamesTheCollectiveGroupAndMissingRank). A rank that reaches the
  // all_gather after the group broke gets ABORTED with the same cause.
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(st[r].code() == StatusCode::kFailedPrecondition || st[r].code() == StatusCode::kAborted) << st[r];
    EXPECT_NE(st[r].message().find("all_gather on group [0,1,2] (world ranks): group rank 2 (world 2) returned from "
                                   "its rank function while world ranks ["),
              std::string::npos)
        << st[r];
  }
}

TEST(ErrorsTest, ThreadWorldCreate_ZeroRanks) {
  EXPECT_ERROR(ThreadWorld::Create(0), StatusCode::kInvalidArgument, "world size 0 must be >= 1");
}

TEST(ErrorsTest, ThreadWorldCreate_NonPositiveTimeout) {
  ThreadWorldOptions o;
  o.timeout = std::chrono::milliseconds(0);
  EXPECT_ERROR(ThreadWorld::Create(2, o), StatusCode::kInvalidArgument, "timeout 0");
}

TEST(ErrorsTest, ThreadWorldRun_EmptyFunction) {
  auto w = ThreadWorld::Create(2);
  ASSERT_TRUE(w.ok());
  EXPECT_ERROR((*w)->Run(nullptr), StatusCode::kInvalidArgument, "empty function");
}

TEST(ErrorsTest, ThreadWorldRun_FailingRankAbortsPeers) {
  ThreadWorldOptions o;
  o.timeout = std::chrono::milliseconds(20000);
  auto w = ThreadWorld::Create(2, o);
  ASSERT_TRUE(w.ok());
  const auto start = std::chrono::steady_clock::now();
  Status s = (*w)->Run([](Communicator& c) -> Status {
    if (c.rank() == 1) return InvalidArgumentError("bad input on rank 1");
    return c.Barrier();  // would wait 20 s for rank 1 without the abort
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_ERROR(s, StatusCode::kAborted, "rank 1 failed: INVALID_ARGUMENT: bad input on rank 1");
}

TEST(ErrorsTest, MeshCommsCreate_MeshSizeNotWorldSize) {
  std::vector<Status> st = RunRanks(2, [](Communicator& c) -> Status {
    return RankContext::Create(c, Mesh({4})).status();
  });
  for (const Status& s : st) EXPECT_ERROR(s, StatusCode::kInvalidArgument, "the mesh must cover the world exactly");
}

TEST(ErrorsTest, MpiCommunicatorCreate_BeforeMpiInit) {
  EXPECT_ERROR(MpiCommunicator::Create(MPI_COMM_WORLD), StatusCode::kFailedPrecondition,
               "MPI is not initialized or already finalized");
}

// ---- Checkpoint ----

// Saves tensor "w" (f32 [6,4], S(0) on a 2-rank mesh) into dir; returns the save status.
Status SaveW(const std::string& dir) {
  const DeviceMesh m = Mesh({2});
  std::vector<Status> st = RunRanks(2, [&](Communicator& c) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(c, m));
    MF_ASSIGN_OR_RETURN(DTensor w, Distribute(Tensor::Iota(DType::kF32, {6, 4}), MakeLayout({6, 4}, m, "S(0)"),
                                              c.world_rank()));
    return SaveCheckpoint(dir, {{"w", &w}}, ctx);
  });
  return st[0].ok() ? st[1] : st[0];
}

// Loads "w" with `shape` as R on a 2-rank mesh; returns rank 0's status.
Status LoadW(const std::string& dir, std::vector<int64_t> shape = {6, 4}, std::string name = "w") {
  const DeviceMesh m = Mesh({2});
  std::vector<Status> st = RunRanks(2, [&](Communicator& c) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(c, m));
    return LoadTensor(dir, name, MakeLayout(shape, m, "R"), ctx).status();
  });
  return st[0];
}

void Corrupt(const std::string& path, bool truncate) {
  const auto size = std::filesystem::file_size(path);
  if (truncate) {
    std::filesystem::resize_file(path, size - 5);
    return;
  }
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(size / 2));
  char c = 0;
  f.read(&c, 1);
  f.seekp(static_cast<std::streamoff>(size / 2));
  c = static_cast<char>(c ^ 0x5a);
  f.write(&c, 1);
}

TEST(ErrorsTest, LoadTensor_MissingCheckpoint) {
  EXPECT_ERROR(LoadW(FreshDir("missing")), StatusCode::kNotFound, "no checkpoint at");
}

TEST(ErrorsTest, LoadTensor_UnknownName) {
  const std::string dir = FreshDir("unknown_name");
  ASSERT_TRUE(SaveW(dir).ok());
  EXPECT_ERROR(LoadW(dir, {6, 4}, "v"), StatusCode::kNotFound, "tensor 'v' is not in checkpoint");
}

TEST(ErrorsTest, LoadTensor_ShapeMismatch) {
  const std::string dir = FreshDir("shape");
  ASSERT_TRUE(SaveW(dir).ok());
  EXPECT_ERROR(LoadW(dir, {4, 6}), StatusCode::kInvalidArgument, "tensor 'w' has shape [6,4] in checkpoint");
}

TEST(ErrorsTest, LoadTensor_CorruptMetadata) {
  const std::string dir = FreshDir("corrupt_md");
  ASSERT_TRUE(SaveW(dir).ok());
  Corrupt(dir + "/" + std::string(kMetadataFileName), /*truncate=*/false);
  EXPECT_ERROR(LoadW(dir), StatusCode::kDataLoss, "is corrupted");
}

TEST(ErrorsTest, LoadTensor_TruncatedMetadata) {
  const std::string dir = FreshDir("truncated_md");
  ASSERT_TRUE(SaveW(dir).ok());
  Corrupt(dir + "/" + std::string(kMetadataFileName), /*truncate=*/true);
  EXPECT_EQ(LoadW(dir).code(), StatusCode::kDataLoss) << LoadW(dir);
}

TEST(ErrorsTest, LoadTensor_MissingDataFile) {
  const std::string dir = FreshDir("missing_data");
  ASSERT_TRUE(SaveW(dir).ok());
  std::filesystem::remove(dir + "/" + DataFileName(1));
  EXPECT_ERROR(LoadW(dir), StatusCode::kNotFound, "is missing from the checkpoint");
}

TEST(ErrorsTest, LoadTensor_TruncatedDataFile) {
  const std::string dir = FreshDir("truncated_data");
  ASSERT_TRUE(SaveW(dir).ok());
  Corrupt(dir + "/" + DataFileName(0), /*truncate=*/true);
  EXPECT_ERROR(LoadW(dir), StatusCode::kDataLoss, "(truncated)");
}

TEST(ErrorsTest, LoadTensor_CorruptDataFile) {
  const std::string dir = FreshDir("corrupt_data");
  ASSERT_TRUE(SaveW(dir).ok());
  Corrupt(dir + "/" + DataFileName(0), /*truncate=*/false);
  EXPECT_ERROR(LoadW(dir), StatusCode::kDataLoss, "CRC-32C mismatch");
}

TEST(ErrorsTest, SaveCheckpoint_DuplicateName) {
  const DeviceMesh m = Mesh({1});
  std::vector<Status> st = RunRanks(1, [&](Communicator& c) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(c, m));
    MF_ASSIGN_OR_RETURN(DTensor w, Distribute(Tensor::Iota(DType::kF32, {2}), MakeLayout({2}, m, "R"), 0));
    return SaveCheckpoint(FreshDir("dup"), {{"w", &w}, {"w", &w}}, ctx);
  });
  EXPECT_ERROR(st[0], StatusCode::kInvalidArgument, "duplicate tensor name 'w'");
}

TEST(ErrorsTest, SaveCheckpoint_DifferentTensorListsAcrossRanks) {
  const DeviceMesh m = Mesh({2});
  const std::string dir = FreshDir("lists");
  std::vector<Status> st = RunRanks(2, [&](Communicator& c) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(c, m));
    MF_ASSIGN_OR_RETURN(DTensor w, Distribute(Tensor::Iota(DType::kF32, {4}), MakeLayout({4}, m, "S(0)"),
                                              c.world_rank()));
    return SaveCheckpoint(dir, {{c.world_rank() == 0 ? "w" : "v", &w}}, ctx);
  });
  for (const Status& s : st) EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
}

// ---- Data loader ----

std::shared_ptr<const Dataset> TenSamples() {
  return *InMemoryDataset::FromTensor(Tensor::Iota(DType::kI32, {10, 3}));
}

TEST(ErrorsTest, DataLoaderCreate_RankNotInMesh) {
  DataLoaderOptions o;
  o.global_batch_size = 4;
  EXPECT_ERROR(DataLoader::Create(TenSamples(), Mesh({2}), 5, o), StatusCode::kInvalidArgument,
               "rank 5 is not in");
}

TEST(ErrorsTest, DataLoaderCreate_ZeroBatchSize) {
  DataLoaderOptions o;
  EXPECT_ERROR(DataLoader::Create(TenSamples(), Mesh({2}), 0, o), StatusCode::kInvalidArgument,
               "global_batch_size must be >= 1, got 0");
}

TEST(ErrorsTest, DataLoaderCreate_UnknownDpDim) {
  DataLoaderOptions o;
  o.global_batch_size = 4;
  o.dp_dims = {"dp"};
  EXPECT_ERROR(DataLoader::Create(TenSamples(), Mesh({2}), 0, o), StatusCode::kNotFound, "no dim named 'dp'");
}

TEST(ErrorsTest, DataLoaderCreate_NullDataset) {
  DataLoaderOptions o;
  o.global_batch_size = 4;
  EXPECT_ERROR(DataLoader::Create(nullptr, Mesh({2}), 0, o), StatusCode::kInvalidArgument, "dataset is null");
}

TEST(ErrorsTest, LoaderStateParse_Malformed) {
  EXPECT_ERROR(LoaderState::Parse("seed=1"), StatusCode::kInvalidArgument, "bad loader state");
}

TEST(ErrorsTest, DataLoaderRestore_OtherSeed) {
  DataLoaderOptions o;
  o.global_batch_size = 4;
  o.seed = 1;
  o.dp_dims = {0};  // an unnamed mesh has no default data-parallel dim
  auto loader = DataLoader::Create(TenSamples(), Mesh({2}), 0, o);
  ASSERT_TRUE(loader.ok()) << loader.status();
  LoaderState st = (*loader)->state();
  st.seed = 2;
  EXPECT_ERROR((*loader)->Restore(st), StatusCode::kFailedPrecondition, "state seed 2 != loader seed 1");
}

// ---- Ops (eager) ----

TEST(ErrorsTest, EagerExp_IntegerDtypeUnimplemented) {
  const DeviceMesh m = Mesh({2});
  std::vector<Status> st = RunRanks(2, [&](Communicator& c) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(c, m));
    MF_ASSIGN_OR_RETURN(DTensor x, Distribute(Tensor::Iota(DType::kI32, {4}), MakeLayout({4}, m, "S(0)"),
                                              c.world_rank()));
    return Exp(x, ctx).status();
  });
  for (const Status& s : st) EXPECT_ERROR(s, StatusCode::kUnimplemented, "dtype i32 not supported");
}

TEST(ErrorsTest, EagerMatmul_ContractingSizesDiffer) {
  const DeviceMesh m = Mesh({2});
  std::vector<Status> st = RunRanks(2, [&](Communicator& c) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(c, m));
    MF_ASSIGN_OR_RETURN(DTensor a, Distribute(Tensor::Iota(DType::kF32, {4, 3}), MakeLayout({4, 3}, m, "S(0)"),
                                              c.world_rank()));
    MF_ASSIGN_OR_RETURN(DTensor b, Distribute(Tensor::Iota(DType::kF32, {4, 2}), MakeLayout({4, 2}, m, "R"),
                                              c.world_rank()));
    return Matmul(a, b, ctx).status();
  });
  for (const Status& s : st) EXPECT_ERROR(s, StatusCode::kInvalidArgument, "contracting sizes differ");
}

TEST(ErrorsTest, EagerAdd_OperandsOnDifferentMeshes) {
  const DeviceMesh m = Mesh({2});
  const DeviceMesh named = *DeviceMesh::Create({2}, {"tp"});
  std::vector<Status> st = RunRanks(2, [&](Communicator& c) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(c, m));
    MF_ASSIGN_OR_RETURN(DTensor a, Distribute(Tensor::Iota(DType::kF32, {4}), MakeLayout({4}, m, "R"),
                                              c.world_rank()));
    MF_ASSIGN_OR_RETURN(DTensor b, Distribute(Tensor::Iota(DType::kF32, {4}), MakeLayout({4}, named, "R"),
                                              c.world_rank()));
    return Add(a, b, ctx).status();
  });
  for (const Status& s : st) EXPECT_ERROR(s, StatusCode::kInvalidArgument, "operands on different meshes");
}

// Runs `op` on a 2-rank mesh; every rank gets the same inputs (built by make_inputs from the
// mesh and the rank) and the per-rank statuses come back.
std::vector<Status> RunEager2(
    const std::function<StatusOr<std::vector<DTensor>>(const DeviceMesh&, int)>& make_inputs,
    const std::function<Status(const std::vector<DTensor>&, RankContext&)>& op) {
  const DeviceMesh m = Mesh({2});
  return RunRanks(2, [&](Communicator& c) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(c, m));
    MF_ASSIGN_OR_RETURN(std::vector<DTensor> in, make_inputs(m, c.world_rank()));
    return op(in, ctx);
  });
}

StatusOr<DTensor> Dist(const Tensor& t, const DeviceMesh& m, std::string_view placements, int rank) {
  return Distribute(t, MakeLayout(t.shape(), m, placements), rank);
}

TEST(ErrorsTest, EagerReshape_ElementCountMismatch) {
  auto st = RunEager2(
      [](const DeviceMesh& m, int r) -> StatusOr<std::vector<DTensor>> {
        MF_ASSIGN_OR_RETURN(DTensor x, Dist(Tensor::Iota(DType::kF32, {4, 6}), m, "S(0)", r));
        return std::vector<DTensor>{x};
      },
      [](const std::vector<DTensor>& in, RankContext& ctx) { return Reshape(in[0], {5, 5}, ctx).status(); });
  for (const Status& s : st) EXPECT_ERROR(s, StatusCode::kInvalidArgument, "(24 elements) cannot become [5,5]");
}

TEST(ErrorsTest, EagerPermute_NotAPermutation) {
  auto st = RunEager2(
      [](const DeviceMesh& m, int r) -> StatusOr<std::vector<DTensor>> {
        MF_ASSIGN_OR_RETURN(DTensor x, Dist(Tensor::Iota(DType::kF32, {4, 6}), m, "S(0)", r));
        return std::vector<DTensor>{x};
      },
      [](const std::vector<DTensor>& in, RankContext& ctx) { return Permute(in[0], {0, 0}, ctx).status(); });
  for (const Status& s : st) EXPECT_ERROR(s, StatusCode::kInvalidArgument, "is not a permutation of the dims");
}

TEST(ErrorsTest, EagerEmbedding_FloatIds) {
  auto st = RunEager2(
      [](const DeviceMesh& m, int r) -> StatusOr<std::vector<DTensor>> {
        MF_ASSIGN_OR_RETURN(DTensor table, Dist(Tensor::Iota(DType::kF32, {4, 3}), m, "S(0)", r));
        MF_ASSIGN_OR_RETURN(DTensor ids, Dist(Tensor::Zeros(DType::kF32, {2}), m, "R", r));
        return std::vector<DTensor>{table, ids};
      },
      [](const std::vector<DTensor>& in, RankContext& ctx) { return Embedding(in[0], in[1], ctx).status(); });
  for (const Status& s : st) EXPECT_ERROR(s, StatusCode::kInvalidArgument, "ids dtype f32 must be i32 or i64");
}

TEST(ErrorsTest, EagerEmbedding_IdOutOfRange) {
  auto st = RunEager2(
      [](const DeviceMesh& m, int r) -> StatusOr<std::vector<DTensor>> {
        MF_ASSIGN_OR_RETURN(DTensor table, Dist(Tensor::Iota(DType::kF32, {4, 3}), m, "S(0)", r));
        Tensor id_values = Tensor::Zeros(DType::kI32, {2});
        id_values.data<int32_t>()[0] = 7;
        id_values.data<int32_t>()[1] = 7;
        MF_ASSIGN_OR_RETURN(DTensor ids, Dist(id_values, m, "R", r));
        return std::vector<DTensor>{table, ids};
      },
      [](const std::vector<DTensor>& in, RankContext& ctx) { return Embedding(in[0], in[1], ctx).status(); });
  for (const Status& s : st) EXPECT_ERROR(s, StatusCode::kInvalidArgument, "id 7 at 0 outside [0, 4)");
}

TEST(ErrorsTest, EagerConcat_MismatchedNonConcatDims) {
  auto st = RunEager2(
      [](const DeviceMesh& m, int r) -> StatusOr<std::vector<DTensor>> {
        MF_ASSIGN_OR_RETURN(DTensor a, Dist(Tensor::Iota(DType::kF32, {2, 3}), m, "R", r));
        MF_ASSIGN_OR_RETURN(DTensor b, Dist(Tensor::Iota(DType::kF32, {2, 4}), m, "R", r));
        return std::vector<DTensor>{a, b};
      },
      [](const std::vector<DTensor>& in, RankContext& ctx) {
        const DTensor* xs[] = {&in[0], &in[1]};
        return Concat(xs, /*dim=*/0, ctx).status();
      });
  for (const Status& s : st) {
    EXPECT_ERROR(s, StatusCode::kInvalidArgument, "operand 1 shape [2,4] does not match operand 0 shape [2,3]");
  }
}

TEST(ErrorsTest, EagerSlice_ZeroStep) {
  auto st = RunEager2(
      [](const DeviceMesh& m, int r) -> StatusOr<std::vector<DTensor>> {
        MF_ASSIGN_OR_RETURN(DTensor x, Dist(Tensor::Iota(DType::kF32, {4, 6}), m, "S(1)", r));
        return std::vector<DTensor>{x};
      },
      [](const std::vector<DTensor>& in, RankContext& ctx) {
        return Slice(in[0], /*dim=*/1, 0, 6, /*step=*/0, ctx).status();
      });
  for (const Status& s : st) EXPECT_ERROR(s, StatusCode::kInvalidArgument, "step 0 must be >= 1");
}

TEST(ErrorsTest, EagerCrossEntropy_TargetsShapeMismatch) {
  auto st = RunEager2(
      [](const DeviceMesh& m, int r) -> StatusOr<std::vector<DTensor>> {
        MF_ASSIGN_OR_RETURN(DTensor logits, Dist(Tensor::Iota(DType::kF32, {4, 5}), m, "S(0)", r));
        MF_ASSIGN_OR_RETURN(DTensor targets, Dist(Tensor::Zeros(DType::kI32, {3}), m, "R", r));
        return std::vector<DTensor>{logits, targets};
      },
      [](const std::vector<DTensor>& in, RankContext& ctx) {
        return CrossEntropy(in[0], in[1], LossReduction::kMean, ctx).status();
      });
  for (const Status& s : st) {
    EXPECT_ERROR(s, StatusCode::kInvalidArgument, "targets shape [3] must be the logits shape [4,5] without its last dim");
  }
}

TEST(ErrorsTest, EagerLayerNorm_WeightShapeMismatch) {
  auto st = RunEager2(
      [](const DeviceMesh& m, int r) -> StatusOr<std::vector<DTensor>> {
        MF_ASSIGN_OR_RETURN(DTensor x, Dist(Tensor::Iota(DType::kF32, {4, 6}), m, "S(0)", r));
        MF_ASSIGN_OR_RETURN(DTensor w, Dist(Tensor::Iota(DType::kF32, {5}), m, "R", r));
        return std::vector<DTensor>{x, w};
      },
      [](const std::vector<DTensor>& in, RankContext& ctx) {
        return LayerNorm(in[0], /*normalized_ndim=*/1, &in[1], /*bias=*/nullptr, 1e-5, ctx).status();
      });
  for (const Status& s : st) {
    EXPECT_ERROR(s, StatusCode::kInvalidArgument, "layer_norm: weight shape [5] differs from the normalized dims [6]");
  }
}

// ---- Graph, propagation and programs ----

TEST(ErrorsTest, GraphInput_DuplicateName) {
  Graph g(Mesh({2}));
  ASSERT_TRUE(g.Input("x", {4, 2}, DType::kF32).ok());
  EXPECT_ERROR(g.Param("x", {2}, DType::kF32), StatusCode::kInvalidArgument, "duplicate value name 'x'");
}

TEST(ErrorsTest, GraphApply_UnknownValueId) {
  Graph g(Mesh({2}));
  const ValueId x = *g.Input("x", {4, 2}, DType::kF32);
  EXPECT_ERROR(g.Apply(OpSpec::Binary(BinaryOp::kAdd), {x, 7}, "y"), StatusCode::kInvalidArgument,
               "unknown value id 7 (graph has 1 values)");
}

TEST(ErrorsTest, GraphAnnotate_LayoutShapeMismatch) {
  const DeviceMesh m = Mesh({2});
  Graph g(m);
  const ValueId x = *g.Input("x", {4, 2}, DType::kF32);
  EXPECT_ERROR(g.Annotate(x, MakeLayout({4, 3}, m, "S(0)")), StatusCode::kInvalidArgument,
               "layout shape [4,3] != value shape [4,2]");
}

TEST(ErrorsTest, GraphAnnotate_ConflictingAnnotation) {
  Graph g(Mesh({2}));
  const ValueId x = *g.Input("x", {4, 2}, DType::kF32);
  ASSERT_TRUE(g.Annotate(x, "S(0)").ok());
  EXPECT_ERROR(g.Annotate(x, "S(1)"), StatusCode::kInvalidArgument, "already annotated S(0), now S(1)");
}

TEST(ErrorsTest, GraphMarkOutput_Twice) {
  Graph g(Mesh({2}));
  const ValueId x = *g.Input("x", {4, 2}, DType::kF32);
  const ValueId y = *g.Apply(OpSpec::Unary(UnaryOp::kNeg), {x}, "y");
  ASSERT_TRUE(g.MarkOutput(y).ok());
  EXPECT_ERROR(g.MarkOutput(y), StatusCode::kInvalidArgument, "value 'y' is already an output");
}

// A compiled program y = neg(x), x: f32[4,2], on a 2-rank mesh.
Program NegProgram(const DeviceMesh& m) {
  Graph g(m);
  const ValueId x = *g.Input("x", {4, 2}, DType::kF32);
  EXPECT_TRUE(g.MarkOutput(*g.Apply(OpSpec::Unary(UnaryOp::kNeg), {x}, "y")).ok());
  StatusOr<Program> p = Compile(g);
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

TEST(ErrorsTest, ProgramExecute_WrongInputCount) {
  const DeviceMesh m = Mesh({2});
  const Program p = NegProgram(m);
  std::vector<Status> st = RunRanks(2, [&](Communicator& c) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(c, m));
    return Execute(p, ctx, {}).status();
  });
  for (const Status& s : st) EXPECT_ERROR(s, StatusCode::kInvalidArgument, "execute: expected 1 inputs, got 0");
}

TEST(ErrorsTest, ProgramExecute_WrongInputShape) {
  const DeviceMesh m = Mesh({2});
  const Program p = NegProgram(m);
  std::vector<Status> st = RunRanks(2, [&](Communicator& c) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(c, m));
    MF_ASSIGN_OR_RETURN(DTensor x, Dist(Tensor::Iota(DType::kF32, {4, 3}), m, "S(0)", c.world_rank()));
    return Execute(p, ctx, std::span<const DTensor>(&x, 1)).status();
  });
  for (const Status& s : st) EXPECT_ERROR(s, StatusCode::kInvalidArgument, "input 'x' is f32[4,3], expected f32[4,2]");
}


TEST(ErrorsTest, Compile_NonPositiveBandwidth) {
  Graph g(Mesh({2}));
  const ValueId x = *g.Input("x", {4, 2}, DType::kF32);
  const ValueId w = *g.Param("w", {2, 6}, DType::kF32);
  ASSERT_TRUE(g.MarkOutput(*g.Apply(OpSpec::Matmul(), {x, w}, "y")).ok());
  PropagationOptions o;
  o.topology.intra_dims = std::vector<int>{};
  o.topology.bw_inter_gbps = 0;
  EXPECT_ERROR(Compile(g, o), StatusCode::kInvalidArgument, "topology bw_inter=0 must be > 0");
  EXPECT_ERROR(Propagate(g, o), StatusCode::kInvalidArgument, "topology bw_inter=0 must be > 0");
}

TEST(ErrorsTest, Compile_NonPositiveComputeRate) {
  Graph g(Mesh({2}));
  const ValueId x = *g.Input("x", {4, 2}, DType::kF32);
  const ValueId w = *g.Param("w", {2, 6}, DType::kF32);
  ASSERT_TRUE(g.MarkOutput(*g.Apply(OpSpec::Matmul(), {x, w}, "y")).ok());
  PropagationOptions o;
  o.compute_gflops = 0;
  EXPECT_ERROR(Compile(g, o), StatusCode::kInvalidArgument, "propagate: compute_gflops must be > 0 and finite, got 0");
  EXPECT_ERROR(Propagate(g, o), StatusCode::kInvalidArgument, "compute_gflops must be > 0 and finite, got 0");
}

// ---- dtplan CLI (exit code 2 and a message on bad input) ----

struct CliResult {
  int exit_code = -1;
  std::string out;     // stdout
  std::string err;     // stderr
  std::string output;  // both
};

// Runs `binary` (a runfiles path, e.g. "tools/dtplan") with `args` (shell syntax).
CliResult Cli(const std::string& binary, const std::string& args) {
  CliResult r;
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string err_path = std::string(tmp != nullptr ? tmp : "/tmp") + "/errors_test_cli_stderr";
  FILE* p = ::popen((binary + " " + args + " 2>" + err_path).c_str(), "r");
  if (p == nullptr) return r;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) r.out += buf;
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_path);
  r.err.assign(std::istreambuf_iterator<char>(err), std::istreambuf_iterator<char>());
  r.output = r.err + r.out;
  return r;
}

CliResult Dtplan(const std::string& args) { return Cli("tools/dtplan", args); }

// --help: exit 0, the usage on stdout (starting with "usage: <name>" and naming `flag`), nothing
// on stderr.
void ExpectHelp(const std::string& binary, const std::string& name, const std::string& flag) {
  for (const char* help : {"--help", "-h"}) {
    const CliResult r = Cli(binary, help);
    EXPECT_EQ(r.exit_code, 0) << binary << " " << help << ": " << r.output;
    EXPECT_EQ(r.out.rfind("usage: " + name, 0), 0u) << binary << " " << help << ": " << r.out;
    EXPECT_NE(r.out.find(flag), std::string::npos) << binary << " " << help << ": " << r.out;
    EXPECT_EQ(r.err, "") << binary << " " << help;
  }
}

// Bad input: exit 2, `message` on stderr, nothing on stdout.
void ExpectBadInput(const std::string& binary, const std::string& args, const std::string& message) {
  const CliResult r = Cli(binary, args);
  EXPECT_EQ(r.exit_code, 2) << binary << " " << args << ": " << r.output;
  EXPECT_NE(r.err.find(message), std::string::npos) << binary << " " << args << ": missing '" << message
                                                      << "' in: " << r.err;
  EXPECT_EQ(r.out, "") << binary << " " << args;
}

TEST(ErrorsTest, Dtplan_BadPlacement) {
  const CliResult r = Dtplan("--mesh 2 --shape 4 --from 'S(x)' --to R");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--from: bad placement 'S(x)'"), std::string::npos) << r.output;
}

TEST(ErrorsTest, Dtplan_MissingFlag) {
  const CliResult r = Dtplan("--mesh 2 --from R --to R");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("missing --shape"), std::string::npos) << r.output;
}

TEST(ErrorsTest, Dtplan_PartialToOtherPartial) {
  const CliResult r = Dtplan("--mesh 2 --shape 4 --from 'P(sum)' --to 'P(max)' --execute");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("Partial(sum) -> Partial(max) is not supported"), std::string::npos) << r.output;
}

TEST(ErrorsTest, Dtplan_HugeMesh) {
  const CliResult r = Dtplan("--mesh 1099511627776x2 --shape 4 --from R,R --to R,R");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("is too large"), std::string::npos) << r.output;
}

TEST(ErrorsTest, Dtplan_Help) { ExpectHelp("tools/dtplan", "dtplan", "--planner K"); }

TEST(ErrorsTest, Dtplan_UnknownFlag) {
  ExpectBadInput("tools/dtplan", "--mesh 2 --shape 4 --from R --to R --bogus",
                 "unknown flag '--bogus'; see 'dtplan --help'");
}

TEST(ErrorsTest, Dtplan_UnknownDtype) {
  ExpectBadInput("tools/dtplan", "--mesh 2 --shape 4 --from R --to R --dtype f16",
                 "--dtype: unknown dtype 'f16'; expected one of f32, f64, bf16, i32, i64");
}

TEST(ErrorsTest, Dtplan_UnknownPlanner) {
  ExpectBadInput("tools/dtplan", "--mesh 2 --shape 4 --from R --to R --planner fastest",
                 "--planner: unknown planner 'fastest'; expected one of optimal, greedy, direct");
}

TEST(ErrorsTest, Dtplan_UnknownTopologyKey) {
  ExpectBadInput("tools/dtplan", "--mesh 2 --shape 4 --from R --to R --topology 'bw=3'",
                 "--topology: bad topology 'bw=3': unknown key 'bw'; expected one of intra, bw_intra, bw_inter, "
                 "lat_intra, lat_inter");
}

TEST(ErrorsTest, Dtplan_UnknownReduceOp) {
  ExpectBadInput("tools/dtplan", "--mesh 2 --shape 4 --from 'P(prod)' --to R",
                 "--from: bad placement 'P(prod)': unknown reduce op 'prod'; expected one of sum, avg, max, min");
}

// ---- bench/comm CLI (exit code 2 and a message on bad input, checked before any run) ----

TEST(ErrorsTest, Comm_Help) { ExpectHelp("bench/comm", "comm", "--op OP"); }

TEST(ErrorsTest, Comm_UnknownFlag) {
  ExpectBadInput("bench/comm", "--op all_reduce --bogus 1", "unknown flag '--bogus'; see 'comm --help'");
}

TEST(ErrorsTest, Comm_UnknownOp) {
  ExpectBadInput(
      "bench/comm", "--op foo",
      "unknown --op 'foo'; expected one of all_gather, reduce_scatter, all_reduce, all_to_all, redistribute");
}

TEST(ErrorsTest, Comm_UnknownBackend) {
  ExpectBadInput("bench/comm", "--backend gloo", "unknown --backend 'gloo'; expected one of threads, mpi, nccl");
}

TEST(ErrorsTest, Comm_UnknownDtype) {
  ExpectBadInput("bench/comm", "-d f16", "-d: unknown dtype 'f16'; expected one of f32, f64, bf16, i32, i64");
}

TEST(ErrorsTest, Comm_UnknownCheckValue) {
  ExpectBadInput("bench/comm", "-c 2", "unknown -c '2'; expected one of 0, 1");
}

TEST(ErrorsTest, Comm_BadPlacement) {
  ExpectBadInput("bench/comm", "--op redistribute --from 'Q' --to R --mesh 4",
                 "--from: bad placement 'Q': unknown form; expected one of S(<dim>), R, P, P(sum|avg|max|min)");
  ExpectBadInput("bench/comm", "--op redistribute --from 'S(0)' --to 'P(prod)' --mesh 4",
                 "--to: bad placement 'P(prod)': unknown reduce op 'prod'; expected one of sum, avg, max, min");
}

TEST(ErrorsTest, Comm_MeshSizeNotThreads) {
  ExpectBadInput("bench/comm", "--op redistribute --from 'S(0),S(1)' --to 'R,R' --mesh 2x2 -t 3",
                 "--mesh 2x2 has 4 ranks but -t is 3");
}

// ---- demos: data/loader_demo, examples/hello_mesh, examples/tp_mlp and attention ----

TEST(ErrorsTest, LoaderDemo_Help) { ExpectHelp("data/loader_demo", "loader_demo", "--help"); }

TEST(ErrorsTest, LoaderDemo_UnknownFlag) {
  ExpectBadInput("data/loader_demo", "--steps 3", "unknown flag '--steps'; see 'loader_demo --help'");
}

TEST(ErrorsTest, HelloMesh_Help) { ExpectHelp("examples/hello_mesh", "hello_mesh", "--help"); }

TEST(ErrorsTest, HelloMesh_UnknownFlag) {
  ExpectBadInput("examples/hello_mesh", "--backend threads", "unknown flag '--backend'; see 'hello_mesh --help'");
}

TEST(ErrorsTest, GraphDemo_Help) {
  ExpectHelp("examples/tp_mlp", "tp_mlp", "--backend B");
  ExpectHelp("examples/attention", "attention", "--backend B");
}

TEST(ErrorsTest, GraphDemo_UnknownBackend) {
  ExpectBadInput("examples/tp_mlp", "--backend nccl", "unknown --backend 'nccl'; expected one of threads, mpi");
  ExpectBadInput("examples/attention", "--backend=nccl", "unknown --backend 'nccl'; expected one of threads, mpi");
}

TEST(ErrorsTest, GraphDemo_UnknownFlag) {
  ExpectBadInput("examples/tp_mlp", "--bogus", "unknown flag '--bogus'; see 'tp_mlp --help'");
}

// ---- examples/train_lm --device (its other flags: examples:train_lm_test) ----

TEST(ErrorsTest, TrainLm_UnknownDevice) {
  ExpectHelp("examples/train_lm", "train_lm", "--device host|cuda");
  ExpectBadInput("examples/train_lm", "--corpus none.mftok --device tpu",
                 "unknown --device 'tpu'; expected one of host, cuda");
}

}  // namespace
}  // namespace meshflow
