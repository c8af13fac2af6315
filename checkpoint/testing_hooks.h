// Test-only fault injection for checkpoint/checkpoint.h (target //checkpoint:testing_hooks, visible
// to tests and to the fault injection of lm/trainer only; not part of the public API):
//   * SaveFaults + SaveCheckpointWithFaults: SaveCheckpoint that stops at a chosen point as if the
//     process had crashed there (returning Aborted on every rank);
//   * SetCheckpointTestHook: a callback run at named points of every save and load.
// SaveCheckpointWithFaults is defined by //checkpoint: link both.
#ifndef MESHFLOW_CHECKPOINT_TESTING_HOOKS_H_
#define MESHFLOW_CHECKPOINT_TESTING_HOOKS_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meshflow/base/status.h"

namespace meshflow {

// Declared in meshflow/checkpoint/checkpoint.h, meshflow/dtensor/dtensor.h and
// meshflow/runtime/rank_context.h (this target cannot depend on //checkpoint, which uses it).
struct SaveOptions;
class DTensor;
class RankContext;

// Where a simulated crash stops a save.
enum class SaveCrashPoint {
  kNone,
  kBeforeRename,    // everything written and synced into the temporary directory, no rename
  kBetweenRenames,  // `dir` renamed to `<dir>.old`, the new directory not yet renamed into place
};

struct SaveFaults {
  // >= 0: every rank stops after it has completely written that many files into the temporary
  // directory (its data file, then on rank 0 the metadata file), as if it crashed: the save
  // returns Aborted on every rank, the temporary directory stays behind and `dir` is untouched.
  // -1 = off.
  int fail_after_files = -1;
  // Stops rank 0 at that point of the commit, returning Aborted on every rank.
  SaveCrashPoint crash_point = SaveCrashPoint::kNone;
  // The fsync of the parent directory after the commit fails (a warning in SaveInfo).
  bool fail_after_commit = false;
};

// SaveCheckpoint (checkpoint.h) with `faults` injected. Every rank passes the same faults.
Status SaveCheckpointWithFaults(const std::string& dir,
                                const std::vector<std::pair<std::string, const DTensor*>>& tensors, RankContext& ctx,
                                const SaveOptions& options, const SaveFaults& faults);

// Called at named points of a save or load ("save:locked", "save:data-written", "save:committed",
// "load:pinned") with the caller's world rank. A non-OK result is injected as that rank's failure
// at that point; at "save:committed" (rank 0) it simulates the process dying after the commit:
// rank 0 returns it without telling the other ranks. Pass {} to remove. Process-wide; the hook
// may run on several threads at once.
using CheckpointTestHook = std::function<Status(std::string_view point, int world_rank)>;
void SetCheckpointTestHook(CheckpointTestHook hook);

// The checkpoint library's side: runs the installed hook (OK when none).
Status RunCheckpointTestHook(std::string_view point, int world_rank);

}  // namespace meshflow

#endif  // MESHFLOW_CHECKPOINT_TESTING_HOOKS_H_
