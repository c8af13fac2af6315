// Supervise: automatic restart of a failed job (torchrun's --max-restarts), for programs that
// resume by themselves (e.g. from their newest complete checkpoint).
//
// Supervise runs command(0) as a child process (fork + execvp; stdin, stdout and stderr
// inherited) and waits for it. When the child fails - a non-zero exit code or death by a signal
// (a rank killed with kill -9 under mpirun makes mpirun exit non-zero) - it runs command(1), and
// so on, up to max_restarts restarts. Attempt k's child sees MESHFLOW_RESTART_COUNT=k in its
// environment. command(k) may differ from command(0): e.g. an elastic restart on fewer processes
// ("mpirun -np 4 ..." first, "mpirun -np 2 ..." after a failure). An exit code listed in
// no_restart_exit_codes (default {2}: bad input, which a restart cannot fix) ends supervision at
// once. Every failure is reported on stderr as one line:
//   "supervisor: attempt 0 (pid 1234) killed by signal 9 (Killed); restart 1 of 3: mpirun -np 2 ..."
//
//   SupervisorOptions o;
//   o.command = [](int attempt) { return std::vector<std::string>{"./train", "--ckpt-dir", "ck"}; };
//   o.max_restarts = 3;
//   MF_ASSIGN_OR_RETURN(SuperviseResult r, Supervise(o));   // r.exit_code: the last attempt's
//
// Errors: max_restarts < 0 or an empty command (INVALID_ARGUMENT); fork/exec failures
// (UNAVAILABLE naming the program and errno). A child that fails is not an error: the result
// says how every attempt ended.
#ifndef MESHFLOW_LAUNCH_SUPERVISOR_H_
#define MESHFLOW_LAUNCH_SUPERVISOR_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "meshflow/base/status.h"

namespace meshflow {

inline constexpr char kRestartCountEnv[] = "MESHFLOW_RESTART_COUNT";

struct SupervisorOptions {
  // The argv of attempt k (k = 0 first). argv[0] is looked up in PATH.
  std::function<std::vector<std::string>(int attempt)> command;
  int max_restarts = 0;
  std::set<int> no_restart_exit_codes = {2};
};

// How one attempt ended: exit_code >= 0 for a normal exit, else -signal.
struct AttemptResult {
  std::vector<std::string> argv;
  int exit_code = 0;
  int signal = 0;  // > 0 when killed by a signal
  double seconds = 0;
};

struct SuperviseResult {
  std::vector<AttemptResult> attempts;
  // The last attempt's exit code, or 128 + signal when a signal ended it (the shell's convention).
  int exit_code = 0;
  int restarts() const { return static_cast<int>(attempts.size()) - 1; }
};

StatusOr<SuperviseResult> Supervise(const SupervisorOptions& options);

// "exited with code 3" / "killed by signal 9 (Killed)".
std::string DescribeEnd(const AttemptResult& a);

}  // namespace meshflow

#endif  // MESHFLOW_LAUNCH_SUPERVISOR_H_
