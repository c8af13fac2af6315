#include "meshflow/launch/supervisor.h"

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace meshflow {
namespace {

std::string Join(const std::vector<std::string>& argv) {
  std::string s;
  for (const std::string& a : argv) {
    if (!s.empty()) s += ' ';
    s += a;
  }
  return s;
}

StatusOr<AttemptResult> RunOnce(const std::vector<std::string>& argv, int attempt) {
  AttemptResult r;
  r.argv = argv;
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const std::string count = std::to_string(attempt);
  std::fflush(stdout);
  std::fflush(stderr);
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) return UnavailableError(std::string("Supervise: fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    setenv(kRestartCountEnv, count.c_str(), 1);
    execvp(cargv[0], cargv.data());
    std::fprintf(stderr, "supervisor: cannot run '%s': %s\n", cargv[0], std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return UnavailableError(std::string("Supervise: waitpid failed: ") + std::strerror(errno));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
    r.exit_code = -r.signal;
  } else {
    r.exit_code = WEXITSTATUS(status);
  }
  if (r.exit_code == 127) {
    return UnavailableError("Supervise: cannot run '" + argv[0] + "' (exit code 127 from the child)");
  }
  return r;
}

}  // namespace

std::string DescribeEnd(const AttemptResult& a) {
  if (a.signal > 0) {
    const char* name = strsignal(a.signal);
    return "killed by signal " + std::to_string(a.signal) + " (" + (name ? name : "?") + ")";
  }
  return "exited with code " + std::to_string(a.exit_code);
}

StatusOr<SuperviseResult> Supervise(const SupervisorOptions& options) {
  if (options.max_restarts < 0) {
    return InvalidArgumentError("Supervise: max_restarts must be >= 0, got " + std::to_string(options.max_restarts));
  }
  if (!options.command) return InvalidArgumentError("Supervise: no command");
  SuperviseResult result;
  for (int attempt = 0;; ++attempt) {
    const std::vector<std::string> argv = options.command(attempt);
    if (argv.empty()) return InvalidArgumentError("Supervise: attempt " + std::to_string(attempt) + " has an empty command");
    MF_ASSIGN_OR_RETURN(AttemptResult r, RunOnce(argv, attempt));
    result.attempts.push_back(r);
    result.exit_code = r.signal > 0 ? 128 + r.signal : r.exit_code;
    if (r.exit_code == 0) return result;
    const bool final_code = r.signal == 0 && options.no_restart_exit_codes.count(r.exit_code) > 0;
    if (final_code || attempt >= options.max_restarts) {
      std::fprintf(stderr, "supervisor: attempt %d %s after %.1f s; %s\n", attempt, DescribeEnd(r).c_str(), r.seconds,
                   final_code ? "not restarting (bad input)"
                              : ("giving up after " + std::to_string(options.max_restarts) + " restart(s)").c_str());
      return result;
    }
    std::fprintf(stderr, "supervisor: attempt %d %s after %.1f s; restart %d of %d: %s\n", attempt,
                 DescribeEnd(r).c_str(), r.seconds, attempt + 1, options.max_restarts,
                 Join(options.command(attempt + 1)).c_str());
  }
}

}  // namespace meshflow
