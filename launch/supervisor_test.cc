#include "meshflow/launch/supervisor.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace meshflow {
namespace {

// A shell command that fails until MESHFLOW_RESTART_COUNT reaches `ok_at`, by the given means.
std::vector<std::string> Sh(const std::string& script) { return {"/bin/sh", "-c", script}; }

TEST(SuperviseTest, RestartsAKilledChildUntilItSucceeds) {
  SupervisorOptions o;
  std::vector<int> seen;
  o.command = [&](int attempt) {
    seen.push_back(attempt);
    return Sh("test \"$MESHFLOW_RESTART_COUNT\" = " + std::to_string(attempt) +
              " || exit 9; if [ \"$MESHFLOW_RESTART_COUNT\" -lt 2 ]; then kill -9 $$; fi; exit 0");
  };
  o.max_restarts = 3;
  StatusOr<SuperviseResult> r = Supervise(o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->attempts.size(), 3u);
  EXPECT_EQ(r->restarts(), 2);
  EXPECT_EQ(r->attempts[0].signal, 9);
  EXPECT_EQ(DescribeEnd(r->attempts[0]), "killed by signal 9 (Killed)");
  EXPECT_EQ(r->attempts[2].exit_code, 0);
  EXPECT_EQ(r->exit_code, 0);
}

TEST(SuperviseTest, GivesUpAfterMaxRestarts) {
  SupervisorOptions o;
  o.command = [](int) { return Sh("exit 3"); };
  o.max_restarts = 2;
  StatusOr<SuperviseResult> r = Supervise(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->attempts.size(), 3u);
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(DescribeEnd(r->attempts[2]), "exited with code 3");
}

TEST(SuperviseTest, BadInputIsNotRestarted) {
  SupervisorOptions o;
  o.command = [](int) { return Sh("exit 2"); };
  o.max_restarts = 5;
  StatusOr<SuperviseResult> r = Supervise(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->attempts.size(), 1u);
  EXPECT_EQ(r->exit_code, 2);
}

TEST(SuperviseTest, KilledLastAttemptReportsTheShellExitCode) {
  SupervisorOptions o;
  o.command = [](int) { return Sh("kill -9 $$"); };
  StatusOr<SuperviseResult> r = Supervise(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 128 + 9);
}

TEST(SuperviseTest, Errors) {
  SupervisorOptions o;
  o.max_restarts = -1;
  o.command = [](int) { return Sh("true"); };
  EXPECT_NE(Supervise(o).status().message().find("max_restarts must be >= 0, got -1"), std::string::npos);
  o.max_restarts = 0;
  o.command = [](int) { return std::vector<std::string>{}; };
  EXPECT_FALSE(Supervise(o).ok());
  o.command = [](int) { return std::vector<std::string>{"/nonexistent/program"}; };
  StatusOr<SuperviseResult> r = Supervise(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cannot run '/nonexistent/program'"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace meshflow
