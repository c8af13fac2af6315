#include "meshflow/lm/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "meshflow/autograd/variable.h"
#include "meshflow/base/json.h"
#include "meshflow/checkpoint/checkpoint.h"
#include "meshflow/checkpoint/testing_hooks.h"  // SetCheckpointTestHook: --crash-in-save-at-step
#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/data/loader.h"
#include "meshflow/data/token_file.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/dtensor/placement.h"
#include "meshflow/train/checkpointer.h"
#include "meshflow/optim/optimizer.h"
#include "meshflow/optim/schedule.h"
#include "meshflow/runtime/device_copy.h"
#include "meshflow/optim/grad_reducer.h"
#include "meshflow/nn/fsdp_blocks.h"

namespace meshflow::lm {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr char kTrainStateHeader[] = "meshflow.lm.TrainState v1";

// What a checkpoint carries besides tensors (SaveOptions::extra_state), one key=value per line.
struct TrainState {
  int64_t step = 0;
  double start_loss = 0;
  double last_loss = 0;
  int64_t opt_step_count = 0;
  std::vector<int64_t> opt_param_steps;
  std::string loader;  // LoaderState::ToString()
  std::string model;   // GptConfig::ToString()

  std::string ToString() const {
    char loss[64], last[64];
    std::snprintf(loss, sizeof(loss), "%.17g", start_loss);
    std::snprintf(last, sizeof(last), "%.17g", last_loss);
    std::string steps;
    for (size_t i = 0; i < opt_param_steps.size(); ++i) steps += (i ? "," : "") + std::to_string(opt_param_steps[i]);
    return std::string(kTrainStateHeader) + "\nstep=" + std::to_string(step) + "\nstart_loss=" + loss + "\nlast_loss=" + last +
           "\nopt_step_count=" + std::to_string(opt_step_count) + "\nopt_param_steps=" + steps + "\nloader=" + loader +
           "\nmodel=" + model + "\n";
  }

  static StatusOr<TrainState> Parse(const std::string& text, const std::string& where) {
    std::istringstream in(text);
    std::string line;
    if (!std::getline(in, line) || line != kTrainStateHeader) {
      return DataLossError(where + ": not a train_lm checkpoint (its extra state does not start with '" +
                           kTrainStateHeader + "')");
    }
    TrainState s;
    int seen = 0;
    while (std::getline(in, line)) {
      const size_t eq = line.find('=');
      if (eq == std::string::npos) return DataLossError(where + ": bad train state line '" + line + "'");
      const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
      char* end = nullptr;
      if (key == "step") {
        s.step = std::strtoll(value.c_str(), &end, 10);
      } else if (key == "start_loss") {
        s.start_loss = std::strtod(value.c_str(), &end);
      } else if (key == "last_loss") {
        s.last_loss = std::strtod(value.c_str(), &end);
      } else if (key == "opt_step_count") {
        s.opt_step_count = std::strtoll(value.c_str(), &end, 10);
      } else if (key == "opt_param_steps") {
        std::istringstream list(value);
        std::string item;
        while (std::getline(list, item, ',')) s.opt_param_steps.push_back(std::strtoll(item.c_str(), nullptr, 10));
      } else if (key == "loader") {
        s.loader = value;
      } else if (key == "model") {
        s.model = value;
      } else {
        return DataLossError(where + ": unknown train state key '" + key + "'");
      }
      if (end != nullptr && *end != '\0') return DataLossError(where + ": bad value in train state line '" + line + "'");
      ++seen;
    }
    if (seen != 7) return DataLossError(where + ": incomplete train state (" + std::to_string(seen) + " of 7 keys)");
    return s;
  }
};

// The train state of the checkpoint at dir, refused when it was written for another model.
StatusOr<TrainState> ReadTrainState(const std::string& dir, const GptConfig& model) {
  MF_ASSIGN_OR_RETURN(std::string extra, LoadExtraState(dir));
  MF_ASSIGN_OR_RETURN(TrainState st, TrainState::Parse(extra, "checkpoint " + dir));
  if (st.model != model.ToString()) {
    return FailedPreconditionError("checkpoint " + dir + " was written for model config '" + st.model +
                                   "' but this run's is '" + model.ToString() +
                                   "' (use another --ckpt-dir or the same model flags)");
  }
  return st;
}

Status CheckCheckpointModel(const TrainLmOptions& o) {
  if (o.ckpt_dir.empty()) return Status::Ok();
  MF_ASSIGN_OR_RETURN(std::optional<TrainCheckpoint> last, LatestCheckpoint(o.ckpt_dir));
  if (!last) return Status::Ok();
  return ReadTrainState(last->dir, o.model).status();
}

StatusOr<std::shared_ptr<TokenFileDataset>> OpenCorpus(const TrainLmOptions& o) {
  if (o.corpus.empty()) {
    return InvalidArgumentError("missing --corpus (a .mftok token file; make one with text_to_tokens)");
  }
  MF_ASSIGN_OR_RETURN(std::shared_ptr<TokenFileDataset> ds,
                      TokenFileDataset::Open(o.corpus, {.seq_len = o.model.seq_len, .dtype = DType::kI32}));
  if (!ds->header()) {
    return InvalidArgumentError("--corpus '" + o.corpus + "' is a raw token file; convert it to .mftok first");
  }
  if (ds->header()->vocab_size > o.model.vocab) {
    return InvalidArgumentError("--corpus '" + o.corpus + "' has vocabulary " + std::to_string(ds->header()->vocab_size) +
                                " but the model's is " + std::to_string(o.model.vocab));
  }
  if (ds->size() < o.batch_size) {
    return InvalidArgumentError("--corpus '" + o.corpus + "' has " + std::to_string(ds->size()) + " sequences of " +
                                std::to_string(o.model.seq_len + 1) + " tokens, fewer than --batch " +
                                std::to_string(o.batch_size));
  }
  return ds;
}

std::string Fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

// Keeps the lines of `path` whose first field (an integer step) is < `step`, plus a first line
// that does not start with a digit (a header). Missing file: nothing to keep.
Status TruncateLog(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return Status::Ok();
  std::vector<std::string> keep;
  std::string line;
  while (std::getline(in, line)) {
    const size_t start = line.rfind("step ", 0) == 0 ? 5 : 0;  // sample log lines read "step <s> ..."
    if (line.size() <= start || line[start] < '0' || line[start] > '9') {
      if (keep.empty()) keep.push_back(line);
      continue;
    }
    if (std::strtoll(line.c_str() + start, nullptr, 10) < step) keep.push_back(line);
  }
  in.close();
  std::ofstream out(path, std::ios::trunc);
  for (const std::string& l : keep) out << l << '\n';
  if (!out) return UnavailableError("cannot rewrite log '" + path + "'");
  return Status::Ok();
}

// Owns a FILE* (nullptr: none) and closes it when destroyed.
struct FileCloser {
  std::FILE* f = nullptr;
  FileCloser() = default;
  FileCloser(const FileCloser&) = delete;
  FileCloser& operator=(const FileCloser&) = delete;
  ~FileCloser() {
    if (f) std::fclose(f);
  }
};

// Opens one of rank 0's per-step logs (named `flag` in errors): from step 0 a fresh file, on resume
// the file cut back to the steps before `start` (TruncateLog) and appended to.
StatusOr<std::FILE*> OpenStepLog(const std::string& path, const char* flag, int64_t start) {
  if (start > 0) MF_RETURN_IF_ERROR(TruncateLog(path, start));
  std::FILE* f = std::fopen(path.c_str(), start > 0 ? "a" : "w");
  if (f == nullptr) return UnavailableError(std::string("cannot open ") + flag + " '" + path + "'");
  return f;
}

// Fault injection (attempt 0 only): rank kill_rank raises SIGKILL before step kill_at_step.
void MaybeKillBeforeStep(const TrainLmOptions& o, int rank, int64_t step) {
  if (o.attempt == 0 && step == o.kill_at_step && rank == o.kill_rank) {
    std::fprintf(stderr, "train_lm: rank %d kills itself (SIGKILL) before step %lld (fault injection)\n", rank,
                 static_cast<long long>(step));
    std::fflush(stderr);
    std::raise(SIGKILL);
  }
}

// Fault injection: rank 0 raises SIGKILL in the next checkpoint save, after its data file is
// written and before the commit.
void ArmCrashInSave() {
  SetCheckpointTestHook([](std::string_view point, int world_rank) -> Status {
    if (point == "save:data-written" && world_rank == 0) {
      std::fprintf(stderr, "train_lm: rank 0 dies in the middle of a checkpoint save (fault injection)\n");
      std::fflush(stderr);
      std::raise(SIGKILL);
    }
    return Status::Ok();
  });
}

// The sample log line of one step: every rank sends [row_offset, rows, ids padded with -1 to
// `chunk`] of its batch; rank 0 checks that replicas agree and every row of the global batch of
// `batch_size` rows is covered, and writes "step <s> epoch <e> <id0> <id1> ..." to `samples`.
// Collective over `world`.
Status LogSamples(Communicator& world, const RankInfo& me, const Batch& batch, int64_t chunk, int64_t batch_size,
                  int64_t step, std::FILE* samples) {
  std::vector<int64_t> mine(static_cast<size_t>(2 + chunk), -1);
  mine[0] = batch.row_offset;
  mine[1] = static_cast<int64_t>(batch.sample_indices.size());
  for (size_t i = 0; i < batch.sample_indices.size(); ++i) mine[2 + i] = batch.sample_indices[i];
  std::vector<int64_t> all(mine.size() * static_cast<size_t>(me.size));
  const std::vector<int64_t> counts(static_cast<size_t>(me.size), static_cast<int64_t>(mine.size()));
  MF_RETURN_IF_ERROR(world.AllGatherV(mine.data(), static_cast<int64_t>(mine.size()), all.data(), counts, DType::kI64));
  if (me.rank != 0) return Status::Ok();
  std::vector<int64_t> rows(static_cast<size_t>(batch_size), -1);
  for (int r = 0; r < me.size; ++r) {
    const int64_t* p = all.data() + static_cast<size_t>(r) * mine.size();
    for (int64_t i = 0; i < p[1]; ++i) {
      const int64_t row = p[0] + i;
      if (row >= batch_size) continue;  // even_batches padding (not used here)
      int64_t& slot = rows[static_cast<size_t>(row)];
      if (slot >= 0 && slot != p[2 + i]) {
        return InternalError("sample log: ranks disagree on row " + std::to_string(row) + " of step " +
                             std::to_string(step) + " (" + std::to_string(slot) + " vs " + std::to_string(p[2 + i]) +
                             ")");
      }
      slot = p[2 + i];
    }
  }
  std::fprintf(samples, "step %lld epoch %lld", static_cast<long long>(step), static_cast<long long>(batch.epoch));
  for (int64_t id : rows) {
    if (id < 0) return InternalError("sample log: no rank read a row of step " + std::to_string(step));
    std::fprintf(samples, " %lld", static_cast<long long>(id));
  }
  std::fprintf(samples, "\n");
  return Status::Ok();
}

// One rank's TrainLm, in steps: Build (mesh, corpus, model under the plan, optimizer, FSDP hooks,
// gradient reducer, schedule, loader), Restore (the newest checkpoint, if any), OpenOutputs
// (checkpoint manager, banner, CSV and sample logs), then Run (the step loop with its checkpoints,
// then the summary). Members are declared in build order, so they are destroyed in reverse (the
// logs first, the rank context last). Not movable: the model and hooks refer to ctx_.
class LmRun {
 public:
  LmRun(Communicator& world, const RankInfo& me, const TrainLmOptions& o, std::FILE* progress)
      : world_(world), me_(me), o_(o), progress_(progress), lead_(me.rank == 0) {}
  LmRun(const LmRun&) = delete;
  LmRun& operator=(const LmRun&) = delete;

  Status Build() {
    MF_RETURN_IF_ERROR(BuildModel());
    MF_RETURN_IF_ERROR(BuildData());
    sum_.plan = std::string(PlanName(plan_));
    sum_.mesh = spec_.ToString();
    sum_.world_size = me_.size;
    sum_.steps = o_.steps;
    sum_.num_parameters = gpt_->NumParameters();
    sum_.attempt = o_.attempt;
    return Status::Ok();
  }

  // Rank 0 picks the newest complete checkpoint under ckpt_dir; every rank loads the same one.
  Status Restore() {
    if (o_.ckpt_dir.empty()) return Status::Ok();
    int64_t found = -1;
    if (lead_) {
      MF_ASSIGN_OR_RETURN(std::optional<TrainCheckpoint> last, LatestCheckpoint(o_.ckpt_dir));
      if (last) found = last->step;
    }
    MF_RETURN_IF_ERROR(world_.Broadcast(&found, 1, DType::kI64, 0));
    if (found < 0) return Status::Ok();
    const std::string dir = StepCheckpointDir(o_.ckpt_dir, found);
    MF_ASSIGN_OR_RETURN(TrainState st, ReadTrainState(dir, o_.model));
    std::vector<LoadRequest> requests;
    for (const auto& [name, t] : tensors_) requests.push_back(LoadRequest{name, t->layout(), t->dtype()});
    MF_ASSIGN_OR_RETURN(std::vector<DTensor> loaded, LoadTensors(dir, requests, *ctx_));
    for (size_t i = 0; i < tensors_.size(); ++i) *tensors_[i].second = std::move(loaded[i]);
    MF_RETURN_IF_ERROR(opt_->RestoreStepCounts(st.opt_step_count, st.opt_param_steps));
    MF_ASSIGN_OR_RETURN(LoaderState ls, LoaderState::Parse(st.loader));
    MF_RETURN_IF_ERROR(loader_->Restore(ls));
    start_ = st.step;
    sum_.start_loss = st.start_loss;
    last_loss_ = st.last_loss;
    sum_.resumed_from_step = st.step;
    return Status::Ok();
  }

  Status OpenOutputs() {
    if (!o_.ckpt_dir.empty()) {
      MF_ASSIGN_OR_RETURN(ckpt_, CheckpointManager::Create(
                                     {.root = o_.ckpt_dir,
                                      .keep_last = o_.keep_last,
                                      .async = o_.async_checkpoint && me_.concurrent_communicators}, world_, *mesh_));
    }
    if (lead_ && progress_) PrintBanner();
    if (lead_ && !o_.log_csv.empty()) {
      MF_ASSIGN_OR_RETURN(csv_.f, OpenStepLog(o_.log_csv, "--log-csv", start_));
      if (start_ == 0) std::fprintf(csv_.f, "step,loss,lr,tokens_per_s,elapsed_s,world_size,plan\n");
    }
    if (lead_ && !o_.sample_log.empty()) {
      MF_ASSIGN_OR_RETURN(samples_.f, OpenStepLog(o_.sample_log, "--sample-log", start_));
    }
    for (const auto& [name, t] : tensors_) const_tensors_.emplace_back(name, t);
    return Status::Ok();
  }

  StatusOr<TrainSummary> Run() {
    const int64_t chunk = (o_.batch_size + loader_->dp_size() - 1) / loader_->dp_size();
    loop_start_ = Clock::now();
    const double comm_us0 = ctx_->comm_stream().stats().busy_us;
    const double exposed_us0 = ctx_->compute_stream().stats().wait_us;
    for (int64_t step = start_; step < o_.steps; ++step) {
      if (ckpt_ && step > start_ && step % o_.ckpt_every == 0) MF_RETURN_IF_ERROR(Save(step));
      MaybeKillBeforeStep(o_, me_.rank, step);
      const Clock::time_point d0 = Clock::now();
      MF_ASSIGN_OR_RETURN(Batch batch, loader_->NextBatch());
      data_wait_ += Since(d0);
      if (!o_.sample_log.empty()) {
        MF_RETURN_IF_ERROR(LogSamples(world_, me_, batch, chunk, o_.batch_size, step, samples_.f));
      }
      const double lr = schedule_->LrAt(step);
      MF_RETURN_IF_ERROR(Step(step, std::move(batch), lr));
      LogStep(step, lr);
    }
    const double loop_seconds = Since(loop_start_);
    sum_.overlap = o_.overlap;
    sum_.comm_seconds = (ctx_->comm_stream().stats().busy_us - comm_us0) * 1e-6;
    sum_.exposed_comm_seconds = (ctx_->compute_stream().stats().wait_us - exposed_us0) * 1e-6;
    sum_.exposed_comm_fraction =
        sum_.comm_seconds > 0 ? std::min(1.0, sum_.exposed_comm_seconds / sum_.comm_seconds) : 0.0;
    MF_RETURN_IF_ERROR(FinishCheckpoints());
    return Summary(loop_seconds);
  }

 private:
  int64_t tokens_per_step() const { return o_.batch_size * o_.model.seq_len; }

  // Plan and mesh, the rank context, the corpus, the model laid out by the plan, the optimizer, and
  // (FSDP plans) the block gather hooks and (overlap) the bucketed gradient reducer.
  Status BuildModel() {
    MF_ASSIGN_OR_RETURN(plan_, ParsePlan(o_.plan));
    MF_ASSIGN_OR_RETURN(spec_, ResolveMesh(plan_, o_.mesh, me_.size));
    MF_ASSIGN_OR_RETURN(mesh_, DeviceMesh::Create(spec_.shape, spec_.names));
    if (world_.device().is_host() != o_.device.is_host()) {
      return InvalidArgumentError("TrainLm: --device " + std::string(o_.device.is_host() ? "host" : "cuda") +
                                  " but the world communicator's ranks are on " + world_.device().ToString());
    }
    MF_ASSIGN_OR_RETURN(ctx_, RankContext::Create(world_, *mesh_));
    RankContext& ctx = *ctx_;
    MF_ASSIGN_OR_RETURN(ds_, OpenCorpus(o_));
    MF_ASSIGN_OR_RETURN(gpt_, Gpt::Create(o_.model, ctx));
    MF_ASSIGN_OR_RETURN(applied_, ApplyPlan(plan_, *gpt_, ctx));
    std::vector<ParamSpec> specs = gpt_->ParamSpecs();
    for (size_t i = 0; i < specs.size(); ++i) specs[i].state_layout = applied_.state_layouts[i];
    AdamWOptions adam;
    adam.lr = o_.lr;
    adam.weight_decay = o_.weight_decay;
    adam.beta2 = 0.99;
    MF_ASSIGN_OR_RETURN(opt_, AdamW::Create(specs, adam, ctx));
    // FSDP plans gather each block's parameters around its forward (and again in backward), one
    // block ahead with overlap, and the root's (embeddings, final norm, head) once per step; every
    // plan reduces its gradients in buckets during Backward with overlap.
    if (std::holds_alternative<FsdpPlan>(plan_) || std::holds_alternative<FsdpTpPlan>(plan_)) {
      MF_ASSIGN_OR_RETURN(const int dp, mesh_->DimIndex("dp"));
      MF_ASSIGN_OR_RETURN(fsdp_blocks_, nn::FsdpBlocks::Create(gpt_->Blocks(), {dp}, {.prefetch = o_.overlap}, ctx,
                                                                 gpt_->RootModules()));
      gpt_->set_block_hooks(fsdp_blocks_.get());
    }
    if (o_.overlap) {
      std::vector<Variable*> leaves;
      for (const nn::NamedParameter& p : gpt_->NamedParameters()) leaves.push_back(&p.variable);
      MF_ASSIGN_OR_RETURN(reducer_, GradReducer::Create(leaves, *opt_,
                                                        {.bucket_bytes = static_cast<int64_t>(o_.bucket_mb * (1 << 20))},
                                                        ctx));
    }
    return Status::Ok();
  }

  // The LR schedule, the loader (dp dims from the plan), and the named tensors of a checkpoint:
  // params and optimizer state, in this run's layouts.
  Status BuildData() {
    MF_ASSIGN_OR_RETURN(schedule_, WarmupCosineSchedule::Create({.base_lr = o_.lr,
                                                                 .min_lr = std::min(o_.min_lr, o_.lr),
                                                                 .warmup_steps = std::min(o_.warmup_steps, o_.steps),
                                                                 .total_steps = o_.steps}));
    DataLoaderOptions lo;
    lo.global_batch_size = o_.batch_size;
    lo.seed = o_.data_seed;
    lo.shuffle = true;
    lo.prefetch_depth = o_.prefetch;
    if (applied_.dp_dims.empty()) {
      lo.replicate_batch = true;
    } else {
      for (const std::string& d : applied_.dp_dims) lo.dp_dims.emplace_back(d);
    }
    MF_ASSIGN_OR_RETURN(loader_, DataLoader::Create(ds_, *mesh_, me_.rank, lo));
    const std::vector<nn::NamedParameter> params = gpt_->NamedParameters();
    for (const nn::NamedParameter& p : params) {
      tensors_.emplace_back("param/" + p.name, p.variable.mutable_leaf_value());
    }
    for (const StateTensor& s : opt_->StateTensors()) tensors_.emplace_back("optim/" + s.name, s.tensor);
    return Status::Ok();
  }

  void PrintBanner() {
    std::fprintf(progress_,
                 "train_lm: plan %s on mesh %s (%d ranks), %lld params (%s), corpus %s: %lld sequences of %lld tokens, "
                 "batch %lld; %s%s\n",
                 sum_.plan.c_str(), sum_.mesh.c_str(), me_.size, static_cast<long long>(sum_.num_parameters),
                 o_.model.ToString().c_str(), o_.corpus.c_str(), static_cast<long long>(ds_->size()),
                 static_cast<long long>(o_.model.seq_len + 1), static_cast<long long>(o_.batch_size),
                 start_ > 0 ? ("resumed from step " + std::to_string(start_) + " of " + o_.ckpt_dir).c_str()
                            : "starting from step 0",
                 !ckpt_                     ? ""
                 : ckpt_->options().async ? "; checkpoints written in the background"
                                          : "; checkpoints written synchronously");
    std::fflush(progress_);
  }

  // One training step on `batch` at learning rate `lr`: forward, backward, gradient reduction,
  // optimizer update; sets last_loss_ (and the run's start loss at step 0).
  Status Step(int64_t step, Batch batch, double lr) {
    RankContext& ctx = *ctx_;
    MF_RETURN_IF_ERROR(opt_->set_lr(lr));
    MF_ASSIGN_OR_RETURN(DTensor tokens, OnRankDevice(std::move(batch.data), ctx));  // a GPU rank's batch: copied
    MF_ASSIGN_OR_RETURN(Variable loss, gpt_->Loss(tokens, ctx));
    MF_RETURN_IF_ERROR(Backward(loss, ctx));
    if (reducer_) MF_RETURN_IF_ERROR(reducer_->Finish(ctx));
    if (fsdp_blocks_) MF_RETURN_IF_ERROR(fsdp_blocks_->Finish(ctx));
    const std::vector<const DTensor*> grads = gpt_->Grads();
    MF_RETURN_IF_ERROR(opt_->Step(grads, ctx, {.max_grad_norm = o_.max_grad_norm}));
    gpt_->ZeroGrad();
    MF_ASSIGN_OR_RETURN(Tensor lv, FullTensor(loss.value(), ctx));
    MF_ASSIGN_OR_RETURN(lv, OnHost(std::move(lv)));
    last_loss_ = lv.GetAsDouble(0);
    if (!std::isfinite(last_loss_)) {
      return InternalError("the loss is not finite at step " + std::to_string(step) + " (lower --lr?)");
    }
    if (step == 0) sum_.start_loss = last_loss_;
    return Status::Ok();
  }

  // Rank 0's output after a step: the CSV row, and every print_every steps (and after the last)
  // the progress line.
  void LogStep(int64_t step, double lr) {
    const double elapsed = Since(loop_start_);
    const int64_t done = step + 1 - start_;
    const double tps = static_cast<double>(done * tokens_per_step()) / std::max(elapsed, 1e-9);
    if (csv_.f) {
      std::fprintf(csv_.f, "%lld,%.6f,%.6g,%.1f,%.3f,%d,%s\n", static_cast<long long>(step), last_loss_, lr, tps,
                   elapsed, me_.size, sum_.plan.c_str());
      std::fflush(csv_.f);
    }
    if (samples_.f) std::fflush(samples_.f);
    if (lead_ && progress_ && o_.print_every > 0 && ((step + 1) % o_.print_every == 0 || step + 1 == o_.steps)) {
      const double eta = elapsed / static_cast<double>(done) * static_cast<double>(o_.steps - step - 1);
      std::fprintf(progress_, "step %lld/%lld  loss %.4f  lr %.2e  %.0f tok/s  eta %.0f s\n",
                   static_cast<long long>(step + 1), static_cast<long long>(o_.steps), last_loss_, lr, tps, eta);
      std::fflush(progress_);
    }
  }

  // What a checkpoint carries besides tensors, as of the start of `step`.
  std::string TrainStateText(int64_t step) const {
    TrainState st;
    st.step = step;
    st.start_loss = sum_.start_loss;
    st.last_loss = last_loss_;
    st.opt_step_count = opt_->step_count();
    for (int i = 0; i < opt_->num_params(); ++i) st.opt_param_steps.push_back(opt_->param_step(i));
    st.loader = loader_->state().ToString();
    st.model = o_.model.ToString();
    return st.ToString();
  }

  // Saves the checkpoint of `step` (snapshot; written in the background with async), counting the
  // time spent as checkpoint stall.
  Status Save(int64_t step) {
    if (o_.attempt == 0 && step == o_.crash_in_save_at_step) ArmCrashInSave();
    const Clock::time_point t0 = Clock::now();
    const Status s = ckpt_->Save(step, const_tensors_, TrainStateText(step));
    stall_ += Since(t0);
    return s;
  }

  // After the loop: the final checkpoint (when this attempt ran steps) and the wait for every save.
  Status FinishCheckpoints() {
    if (!ckpt_) return Status::Ok();
    if (start_ < o_.steps) MF_RETURN_IF_ERROR(Save(o_.steps));
    const Clock::time_point t0 = Clock::now();
    MF_RETURN_IF_ERROR(ckpt_->Wait());
    stall_ += Since(t0);
    sum_.checkpoints_saved = ckpt_->stats().saves;
    return Status::Ok();
  }

  TrainSummary Summary(double loop_seconds) {
    sum_.final_loss = last_loss_;
    sum_.steps_this_attempt = o_.steps - start_;
    if (sum_.steps_this_attempt > 0) {
      sum_.tokens_per_s =
          static_cast<double>(sum_.steps_this_attempt * tokens_per_step()) / std::max(loop_seconds, 1e-9);
      sum_.step_seconds = loop_seconds / static_cast<double>(sum_.steps_this_attempt);
      sum_.loader_wait_fraction = data_wait_ / std::max(loop_seconds, 1e-9);
      sum_.checkpoint_stall_fraction = stall_ / std::max(loop_seconds, 1e-9);
    }
    return sum_;
  }

  Communicator& world_;
  const RankInfo& me_;
  const TrainLmOptions& o_;
  std::FILE* const progress_;
  const bool lead_;
  PlanKind plan_;
  MeshSpec spec_;
  std::optional<DeviceMesh> mesh_;
  std::optional<RankContext> ctx_;
  std::shared_ptr<TokenFileDataset> ds_;
  std::unique_ptr<Gpt> gpt_;
  AppliedPlan applied_;
  std::unique_ptr<Optimizer> opt_;
  std::unique_ptr<nn::FsdpBlocks> fsdp_blocks_;
  std::unique_ptr<GradReducer> reducer_;
  std::optional<WarmupCosineSchedule> schedule_;
  std::unique_ptr<DataLoader> loader_;
  std::vector<std::pair<std::string, DTensor*>> tensors_;  // checkpoint names -> params, optimizer state
  TrainSummary sum_;
  int64_t start_ = 0;  // first step of this attempt (the restored checkpoint's)
  double last_loss_ = 0;
  std::unique_ptr<CheckpointManager> ckpt_;
  FileCloser csv_;
  FileCloser samples_;
  std::vector<std::pair<std::string, const DTensor*>> const_tensors_;
  Clock::time_point loop_start_;
  double data_wait_ = 0;  // seconds in the loader's NextBatch
  double stall_ = 0;      // seconds in CheckpointManager::Save/Wait
};

}  // namespace

Status ValidateTrainLm(const TrainLmOptions& o, int world_size) {
  MF_RETURN_IF_ERROR(o.model.Validate());
  MF_ASSIGN_OR_RETURN(PlanKind plan, ParsePlan(o.plan));
  MF_RETURN_IF_ERROR(ResolveMesh(plan, o.mesh, world_size).status());
  if (o.steps < 1) return InvalidArgumentError("--steps must be >= 1, got " + std::to_string(o.steps));
  if (o.batch_size < 1) return InvalidArgumentError("--batch must be >= 1, got " + std::to_string(o.batch_size));
  if (!(o.lr > 0) || !std::isfinite(o.lr)) return InvalidArgumentError("--lr must be > 0, got " + Fmt("%g", o.lr));
  if (o.ckpt_every < 1) return InvalidArgumentError("--ckpt-every must be >= 1, got " + std::to_string(o.ckpt_every));
  if (o.keep_last < 1) return InvalidArgumentError("--keep-last must be >= 1, got " + std::to_string(o.keep_last));
  if (!(o.bucket_mb > 0) || !std::isfinite(o.bucket_mb) || o.bucket_mb > 1e6) {
    return InvalidArgumentError("--bucket-mb must be in (0, 1e6], got " + Fmt("%g", o.bucket_mb));
  }
  MF_RETURN_IF_ERROR(OpenCorpus(o).status());
  return CheckCheckpointModel(o);
}

std::string SummaryJson(const TrainSummary& s) {
  JsonWriter w(JsonStyle::kSpaced);  // ", " and ": " between items, as the scripts' field() expects
  w.BeginObject();
  w.Key("start_loss").Double(s.start_loss).Key("final_loss").Double(s.final_loss);
  w.Key("tokens_per_s").Double(s.tokens_per_s).Key("steps").Int(s.steps);
  w.Key("plan").String(s.plan).Key("world_size").Int(s.world_size).Key("mesh").String(s.mesh);
  w.Key("resumed_from_step").Int(s.resumed_from_step).Key("steps_this_attempt").Int(s.steps_this_attempt);
  w.Key("num_parameters").Int(s.num_parameters).Key("step_seconds").Double(s.step_seconds);
  w.Key("loader_wait_fraction").Double(s.loader_wait_fraction);
  w.Key("checkpoint_stall_fraction").Double(s.checkpoint_stall_fraction);
  w.Key("checkpoints_saved").Int(s.checkpoints_saved).Key("attempt").Int(s.attempt);
  w.Key("overlap").Bool(s.overlap).Key("comm_seconds").Double(s.comm_seconds);
  w.Key("exposed_comm_seconds").Double(s.exposed_comm_seconds);
  w.Key("exposed_comm_fraction").Double(s.exposed_comm_fraction);
  w.EndObject();
  return *std::move(w).Finish();  // every value above is well formed: Finish cannot fail
}

StatusOr<TrainSummary> TrainLm(Communicator& world, const RankInfo& me, const TrainLmOptions& o, std::FILE* progress) {
  LmRun run(world, me, o, progress);
  MF_RETURN_IF_ERROR(run.Build());
  MF_RETURN_IF_ERROR(run.Restore());
  MF_RETURN_IF_ERROR(run.OpenOutputs());
  return run.Run();
}

}  // namespace meshflow::lm
