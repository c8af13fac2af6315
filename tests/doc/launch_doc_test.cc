// Every example in launch/world.h and launch/supervisor.h is compiled here (the world example is
// also run); keep them identical.
#include <atomic>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/base/status.h"
#include "meshflow/launch/supervisor.h"
#include "meshflow/launch/world.h"

namespace meshflow {
namespace {

// launch/world.h
Status WorldExample() {
  MF_ASSIGN_OR_RETURN(LaunchMode mode, DetectLaunch(SystemEnv, /*nproc=*/4));
  MF_RETURN_IF_ERROR(RunWorld(mode, [&](Communicator& world, const RankInfo& me) -> Status {
    // me.rank, me.size, me.local_rank; world is the world communicator of this rank
    return Status::Ok();
  }));
  return Status::Ok();
}

// launch/supervisor.h (compiled only: it would run ./train)
[[maybe_unused]] Status SupervisorExample() {
  SupervisorOptions o;
  o.command = [](int attempt) { return std::vector<std::string>{"./train", "--ckpt-dir", "ck"}; };
  o.max_restarts = 3;
  MF_ASSIGN_OR_RETURN(SuperviseResult r, Supervise(o));   // r.exit_code: the last attempt's
  (void)r;
  return Status::Ok();
}

TEST(LaunchDocTest, WorldExampleRunsFourThreadRanks) {
  const Status s = WorldExample();
  EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace meshflow
