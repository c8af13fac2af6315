// The training loop of examples/train_lm: a GPT (lm/gpt.h) under a parallel plan (lm/plan.h) on
// a byte-level token file, with AdamW + warmup-cosine + global-norm clipping, a sharded exactly
// resumable loader whose dp dims come from the plan, coordinated asynchronous checkpoints
// (train/checkpointer.h) and automatic resumption from the newest complete one.
//
// TrainLm is called once per rank (launch/world.h RunWorld) with the same options everywhere.
// Before any step: the options are checked (ValidateTrainLm), the corpus opened, the model built
// and laid out, and - when --ckpt-dir holds a complete checkpoint - everything restored from it:
// params and optimizer state (resharded to this run's plan and world size), optimizer step
// counts, the loader's position (the sample stream continues exactly), and the loss of the run's
// first step; a checkpoint of another model config is refused. There is no other random state:
// the model's initial values are a function of its seed, the data order of the loader's seed.
//
// Per step: loader batch [B, seq_len + 1] -> Gpt::Loss -> Backward -> Optimizer::Step. Every
// ckpt_every steps (and after the last step) the params, optimizer state and TrainState (step,
// loader state, optimizer step counts, model config, first loss) are saved as
// <ckpt_dir>/step-<step>; the save snapshots and returns, a background thread writes (under MPI
// only with MPI_THREAD_MULTIPLE, RankInfo::concurrent_communicators; else the save is synchronous). Rank 0
// prints a progress line every print_every steps ("step 40/200  loss 2.871  lr 2.9e-03
// 5.1k tok/s  eta 31 s") and appends one CSV row per step to log_csv:
//   step,loss,lr,tokens_per_s,elapsed_s,world_size,plan
// (on resume, rows of steps at or after the checkpoint's step are dropped first, so the file is
// the loss curve of the surviving trajectory). With sample_log, rank 0 also writes, per step, the
// dataset indices of every row of the global batch, gathered from the ranks that read them (and
// checked: replicas must agree, every row must be covered):
//   step <s> epoch <e> <id0> <id1> ...
//
// Fault injection for the restart tests (only in attempt 0, MESHFLOW_RESTART_COUNT unset or 0):
// kill_rank / kill_at_step: that rank raises SIGKILL before the step (kill -9 of the process);
// crash_in_save_at_step: rank 0 raises SIGKILL in the middle of that step's save (after its data
// file is written, before the commit).
#ifndef MESHFLOW_LM_TRAINER_H_
#define MESHFLOW_LM_TRAINER_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "meshflow/base/status.h"
#include "meshflow/collectives/communicator.h"
#include "meshflow/launch/world.h"
#include "meshflow/runtime/device.h"
#include "meshflow/lm/gpt.h"
#include "meshflow/lm/plan.h"

namespace meshflow::lm {

struct TrainLmOptions {
  std::string corpus;                // .mftok token file (data/token_file.h), e.g. from text_to_tokens
  // Where the model trains: the host, or the GPU of the world communicator's rank (its device(),
  // set by launch/: NCCL or staged worlds). TrainLm checks that the world's device is of this kind.
  Device device = Device::Host();
  GptConfig model;
  std::string plan = "ddp";
  std::optional<MeshSpec> mesh;      // nullopt: the plan's default on the world
  int64_t steps = 200;
  int64_t batch_size = 16;           // global batch (sequences)
  double lr = 3e-3;
  double min_lr = 3e-4;
  int64_t warmup_steps = 20;
  double weight_decay = 0.01;
  double max_grad_norm = 1.0;
  uint64_t data_seed = 1234;
  int prefetch = 2;
  // Communication overlapped with compute (runtime/rank_context.h's communication stream): FSDP
  // plans gather each block's parameters one block ahead (nn/fsdp_blocks.h), and gradients are
  // reduced in buckets during Backward (optim/grad_reducer.h). Off: the same collectives, each
  // waited for where it is issued (the serial path; the same bits).
  bool overlap = true;
  double bucket_mb = 25;             // gradient bucket size with overlap (MiB of compute-dtype grads)
  std::string ckpt_dir;              // empty: no checkpoints
  int64_t ckpt_every = 50;
  int keep_last = 2;
  bool async_checkpoint = true;
  std::string log_csv;               // empty: none
  std::string sample_log;            // empty: none
  int64_t print_every = 10;          // 0: no progress lines
  int kill_rank = -1;
  int64_t kill_at_step = -1;
  int64_t crash_in_save_at_step = -1;
  int attempt = 0;                   // MESHFLOW_RESTART_COUNT
};

struct TrainSummary {
  double start_loss = 0;             // loss of step 0 of the run (restored on resume)
  double final_loss = 0;             // loss of the last step
  double tokens_per_s = 0;           // this attempt: tokens of its steps / their wall time
  int64_t steps = 0;                 // steps done in total (= options.steps)
  int64_t steps_this_attempt = 0;
  int64_t resumed_from_step = -1;    // -1: started from scratch
  std::string plan;
  std::string mesh;                  // "dp=2,tp=2"
  int world_size = 1;
  int64_t num_parameters = 0;
  double step_seconds = 0;           // mean wall time per step of this attempt
  double loader_wait_fraction = 0;   // time in the loader's Next / loop time
  double checkpoint_stall_fraction = 0;  // time in CheckpointManager::Save/Wait / loop time
  // Communication of the training steps (rank 0): the communication stream's busy time, and the
  // time the rank's thread was blocked on communication (the part no compute overlapped).
  double comm_seconds = 0;
  double exposed_comm_seconds = 0;
  double exposed_comm_fraction = 0;  // exposed / communication (1 when nothing overlaps)
  bool overlap = true;
  int checkpoints_saved = 0;
  int attempt = 0;                   // options.attempt (restarts before this run)
};

// Local checks (no communication): plan and mesh vs world_size, the corpus opens as a token file
// whose vocabulary fits the model, batch/steps/lr ranges, and that a checkpoint under ckpt_dir (if
// any) was written for this model config. Errors: INVALID_ARGUMENT / NOT_FOUND / DATA_LOSS /
// FAILED_PRECONDITION naming the bad value.
Status ValidateTrainLm(const TrainLmOptions& options, int world_size);

// Collective over `world` (every rank, same options). `progress`: where rank 0 prints progress
// lines (nullptr: nowhere). Returns the summary (on every rank; rank 0's is the one to print).
StatusOr<TrainSummary> TrainLm(Communicator& world, const RankInfo& me, const TrainLmOptions& options,
                               std::FILE* progress);

// The summary as one JSON object (no newline; JsonWriter, spaced style, numbers as the shortest
// text that reads back as the same double, null for a non-finite one): start_loss, final_loss,
// tokens_per_s, steps, plan, world_size, mesh, resumed_from_step, ...
std::string SummaryJson(const TrainSummary& s);

}  // namespace meshflow::lm

#endif  // MESHFLOW_LM_TRAINER_H_
