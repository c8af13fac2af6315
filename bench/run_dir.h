// RunBenchmarksInFreshDir: main() of the benchmarks that write files. Every run gets its own
// directory (mkdtemp under $TEST_TMPDIR or the system temp dir), so concurrent runs never share
// files; it is removed at exit. data_bench and checkpoint_bench return it from main() with the
// directory string their benchmarks read.
#ifndef MESHFLOW_BENCH_RUN_DIR_H_
#define MESHFLOW_BENCH_RUN_DIR_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace meshflow {

// Creates "<tmp>/meshflow_<name>.XXXXXX", stores its path in `dir`, runs the benchmarks selected
// on the command line and removes the directory. Returns main()'s exit code.
inline int RunBenchmarksInFreshDir(int argc, char** argv, const char* name, std::string& dir) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::error_code ec;
  const std::filesystem::path base =
      tmp != nullptr ? std::filesystem::path(tmp) : std::filesystem::temp_directory_path(ec);
  std::string templ = (base / ("meshflow_" + std::string(name) + ".XXXXXX")).string();
  if (ec || ::mkdtemp(templ.data()) == nullptr) {
    std::fprintf(stderr, "%s: cannot create a temporary directory %s\n", name, templ.c_str());
    return 1;
  }
  dir = templ;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::filesystem::remove_all(templ, ec);
  return 0;
}

}  // namespace meshflow

#endif  // MESHFLOW_BENCH_RUN_DIR_H_
