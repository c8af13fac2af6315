#include "meshflow/launch/world.h"

#include <atomic>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace meshflow {
namespace {

EnvLookup EnvOf(std::map<std::string, std::string> vars) {
  return [vars](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(DetectLaunchTest, PlainStartIsAnInProcessWorldOfNproc) {
  StatusOr<LaunchMode> m = DetectLaunch(EnvOf({}), 4);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE(std::holds_alternative<InProcess>(*m));
  EXPECT_EQ(std::get<InProcess>(*m).nproc, 4);
  EXPECT_EQ(Describe(*m), "in-process world of 4 threads");
}

TEST(DetectLaunchTest, ReadsOpenMpiPmiAndSlurmVariables) {
  StatusOr<LaunchMode> m = DetectLaunch(
      EnvOf({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}}), 1);
  ASSERT_TRUE(m.ok()) << m.status();
  const ExternalLaunch& e = std::get<ExternalLaunch>(*m);
  EXPECT_EQ(e.launcher, "OpenMPI");
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.size, 4);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(Describe(*m), "OpenMPI job, rank 2 of 4 (local rank 0)");

  m = DetectLaunch(EnvOf({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}), 1);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(std::get<ExternalLaunch>(*m).launcher, "PMI");
  EXPECT_EQ(std::get<ExternalLaunch>(*m).local_rank, 1);  // no local rank variable: the rank

  m = DetectLaunch(EnvOf({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}}), 8, true);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(std::get<ExternalLaunch>(*m).launcher, "Slurm");
  EXPECT_EQ(std::get<ExternalLaunch>(*m).size, 8);
}

TEST(DetectLaunchTest, BadValuesAreNamed) {
  StatusOr<LaunchMode> m = DetectLaunch(EnvOf({{"OMPI_COMM_WORLD_RANK", "x"}, {"OMPI_COMM_WORLD_SIZE", "4"}}), 1);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("OMPI_COMM_WORLD_RANK='x'"), std::string::npos) << m.status();
  m = DetectLaunch(EnvOf({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}}), 1);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("is not below OMPI_COMM_WORLD_SIZE=4"), std::string::npos) << m.status();
  m = DetectLaunch(EnvOf({{"PMI_RANK", "0"}}), 1);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("PMI_SIZE is not set"), std::string::npos) << m.status();
  m = DetectLaunch(EnvOf({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}), 4, /*explicit_nproc=*/true);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("--nproc 4 but the Slurm launcher started 2 processes"), std::string::npos)
      << m.status();
  m = DetectLaunch(EnvOf({}), 0);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("--nproc must be >= 1, got 0"), std::string::npos) << m.status();
}

TEST(RunWorldTest, InProcessRunsEveryRankOnItsOwnCommunicator) {
  std::atomic<int> sum{0}, calls{0};
  const Status s = RunWorld(InProcess{3}, [&](Communicator& world, const RankInfo& me) -> Status {
    EXPECT_EQ(world.world_rank(), me.rank);
    EXPECT_EQ(me.size, 3);
    sum += me.rank;
    ++calls;
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(calls.load(), 3);
  EXPECT_EQ(sum.load(), 3);
}

TEST(RunWorldTest, InProcessReturnsTheFailingRanksError) {
  const Status s = RunWorld(InProcess{2}, [&](Communicator&, const RankInfo& me) -> Status {
    if (me.rank == 1) return InvalidArgumentError("bad thing");
    return Status::Ok();
  });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("rank 1"), std::string::npos) << s;
  EXPECT_NE(s.ToString().find("bad thing"), std::string::npos) << s;
}

TEST(RunWorldTest, HostIsTheDefaultAndRanksAreOnTheHost) {
  std::atomic<int> calls{0};
  auto check = [&](Communicator& world, const RankInfo& me) -> Status {
    EXPECT_EQ(me.device.ToString(), "host") << "rank " << me.rank;
    EXPECT_EQ(world.device().ToString(), "host") << "rank " << me.rank;
    EXPECT_EQ(world.backend(), "threads");
    EXPECT_TRUE(me.concurrent_communicators);
    ++calls;
    return Status::Ok();
  };
  Status s = RunWorld(InProcess{2}, check);
  ASSERT_TRUE(s.ok()) << s;
  s = RunWorld(InProcess{2}, WorldOptions{}, check);
  ASSERT_TRUE(s.ok()) << s;
  s = RunWorld(InProcess{2}, WorldOptions{.device = WorldDevice::kHost}, check);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(calls.load(), 6);
  EXPECT_EQ(WorldDeviceName(WorldDevice::kHost), "host");
  EXPECT_EQ(WorldDeviceName(WorldDevice::kCuda), "cuda");
}

// This test binary does not link //launch:cuda_world: a CUDA world is UNAVAILABLE, in-process and
// under a launcher (before MPI is started, so no mpirun is needed), and no rank runs.
TEST(RunWorldTest, CudaWithoutTheCudaWorldTargetIsUnavailableNamingIt) {
  std::atomic<int> calls{0};
  auto fn = [&](Communicator&, const RankInfo&) -> Status {
    ++calls;
    return Status::Ok();
  };
  const WorldOptions gpus{.device = WorldDevice::kCuda};
  for (const LaunchMode& mode : {LaunchMode(InProcess{2}), LaunchMode(ExternalLaunch{"OpenMPI", 1, 2, 1})}) {
    const Status s = RunWorld(mode, gpus, fn);
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << Describe(mode) << ": " << s;
    EXPECT_NE(s.message().find("built without CUDA support: link //launch:cuda_world"), std::string::npos)
        << Describe(mode) << ": " << s;
  }
  EXPECT_EQ(calls.load(), 0);
  // --nproc is still checked first.
  const Status bad = RunWorld(InProcess{0}, gpus, fn);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument) << bad;
}

TEST(PlaceRanksOnGpusTest, OneGpuPerRankIsNcclElseRanksShareGpusStaged) {
  struct Case {
    int ranks, gpus;
    GpuWorldKind kind;
    std::vector<int> ordinals;
  };
  const std::vector<Case> cases = {
      {1, 1, GpuWorldKind::kNccl, {0}},
      {2, 4, GpuWorldKind::kNccl, {0, 1}},
      {4, 4, GpuWorldKind::kNccl, {0, 1, 2, 3}},
      {2, 1, GpuWorldKind::kStaged, {0, 0}},
      {5, 2, GpuWorldKind::kStaged, {0, 1, 0, 1, 0}},
  };
  for (const Case& c : cases) {
    StatusOr<GpuPlacement> p = PlaceRanksOnGpus(c.ranks, c.gpus);
    ASSERT_TRUE(p.ok()) << c.ranks << " ranks on " << c.gpus << " GPUs: " << p.status();
    EXPECT_EQ(p->kind == GpuWorldKind::kNccl ? "nccl" : "staged", c.kind == GpuWorldKind::kNccl ? "nccl" : "staged")
        << c.ranks << " ranks on " << c.gpus << " GPUs";
    EXPECT_EQ(p->ordinals, c.ordinals) << c.ranks << " ranks on " << c.gpus << " GPUs";
  }
  StatusOr<GpuPlacement> p = PlaceRanksOnGpus(0, 1);
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << p.status();
  EXPECT_NE(p.status().message().find("ranks must be >= 1, got 0"), std::string::npos) << p.status();
  p = PlaceRanksOnGpus(2, 0);
  EXPECT_EQ(p.status().code(), StatusCode::kUnavailable) << p.status();
  EXPECT_NE(p.status().message().find("no visible GPU for 2 ranks (0 visible)"), std::string::npos) << p.status();
}

}  // namespace
}  // namespace meshflow
