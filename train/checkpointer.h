// Coordinated training checkpoints: every K steps one call saves the model, the optimizer state,
// the data loader's state and the step atomically, keeps the last M, and a restart finds the
// newest COMPLETE checkpoint by itself. Saves are asynchronous (torch DCP's async_save): the call
// snapshots the tensors into host memory and a background thread writes them, so training goes
// on during the write; at most one save is in flight (the next Save waits for it first).
//
// Layout on disk: <root>/step-<8+ digits> per checkpoint, each a checkpoint of
// checkpoint/checkpoint.h (temporary directory + rename: a crash at any point of a save leaves
// the previous checkpoints loadable; LatestCheckpoint never returns an incomplete one). After a
// save commits, rank 0 removes the oldest complete step directories beyond keep_last.
//
// Communication: the background writer runs SaveCheckpoint on its own communicator (a Split of
// the world communicator made by Create, used only by the writer thread), so its collectives
// never interleave with the training thread's. With MPI this needs MPI_THREAD_MULTIPLE
// (MpiThreadMultiple()); without it, pass async = false (the save then runs inside Save).
//
//   MF_ASSIGN_OR_RETURN(auto ckpt, CheckpointManager::Create({.root = root, .keep_last = 2}, world, mesh));
//   MF_ASSIGN_OR_RETURN(std::optional<TrainCheckpoint> last, LatestCheckpoint(root));  // resume from it
//   for (int64_t step = 1; step <= 100; ++step) {
//     // ... one training step ...
//     if (step % 50 == 0) MF_RETURN_IF_ERROR(ckpt->Save(step, {{"w", &w}}, loader_state));  // returns at once
//   }
//   MF_RETURN_IF_ERROR(ckpt->Wait());   // before exiting: the last save's result
//
// Errors: Create with an empty root or keep_last < 1 (INVALID_ARGUMENT), the Split's errors.
// Save: a negative step, a step not above the previous save's (INVALID_ARGUMENT, on every rank
// alike); the previous async save's error (returned by the next Save or Wait, on every rank: the
// save is collective). LatestCheckpoint: an unreadable root (UNAVAILABLE naming it).
#ifndef MESHFLOW_TRAIN_CHECKPOINTER_H_
#define MESHFLOW_TRAIN_CHECKPOINTER_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/collectives/communicator.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/mesh/device_mesh.h"

namespace meshflow {

struct CheckpointManagerOptions {
  std::string root;
  int keep_last = 2;  // complete checkpoints kept (>= 1)
  bool async = true;  // write in a background thread (see the banner)
};

struct TrainCheckpoint {
  int64_t step = 0;
  std::string dir;  // <root>/step-<step>
};

// "<root>/step-00000100".
std::string StepCheckpointDir(const std::string& root, int64_t step);
// The newest complete checkpoint under root (its metadata decodes; a step directory caught
// between the two commit renames counts, see ResolveCheckpointDir), or nullopt when there is none
// (or no root). Temporary directories of unfinished saves are never returned.
StatusOr<std::optional<TrainCheckpoint>> LatestCheckpoint(const std::string& root);
// Every complete checkpoint under root, oldest first.
StatusOr<std::vector<TrainCheckpoint>> ListCheckpoints(const std::string& root);

struct CheckpointStats {
  int saves = 0;                 // saves committed
  int64_t last_committed_step = -1;
  double snapshot_seconds = 0;   // inside Save: copying the tensors
  double wait_seconds = 0;       // inside Save / Wait: waiting for the previous save
  double write_seconds = 0;      // in the background: SaveCheckpoint (sum over saves)
};

class CheckpointManager {
 public:
  // Collective over the world communicator (Split). `mesh` is the tensors' mesh.
  static StatusOr<std::unique_ptr<CheckpointManager>> Create(CheckpointManagerOptions options, Communicator& world,
                                                             const DeviceMesh& mesh);
  // Waits for the in-flight save (its error is dropped: call Wait() to see it).
  ~CheckpointManager();
  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;

  // Collective: every rank passes the same names (its parts of the same DTensors) and the same
  // extra_state. Waits for the previous save, copies the tensors, and writes StepCheckpointDir(step)
  // in the background (or now, without async).
  Status Save(int64_t step, const std::vector<std::pair<std::string, const DTensor*>>& tensors,
              std::string extra_state);
  // Waits for the in-flight save; its status (OK when none was in flight).
  Status Wait();
  bool in_flight() const { return writer_.joinable(); }

  const CheckpointManagerOptions& options() const { return options_; }
  const CheckpointStats& stats() const { return stats_; }

 private:
  CheckpointManager(CheckpointManagerOptions options, RankContext ctx);
  Status Write(int64_t step, const std::vector<std::pair<std::string, DTensor>>& snapshot, const std::string& extra);

  CheckpointManagerOptions options_;
  RankContext comms_;  // over the writer's own Split communicator (it owns it)
  std::thread writer_;
  Status writer_status_;
  double writer_seconds_ = 0;
  int64_t writer_step_ = -1;
  int64_t last_step_ = -1;
  CheckpointStats stats_;
};

}  // namespace meshflow

#endif  // MESHFLOW_TRAIN_CHECKPOINTER_H_
