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
#include "meshflow/checkpoint/checkpoint.h"
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
  char buf[1024];
  std::snprintf(buf, sizeof(buf),
                "{\"start_loss\": %.6f, \"final_loss\": %.6f, \"tokens_per_s\": %.1f, \"steps\": %lld, "
                "\"plan\": \"%s\", \"world_size\": %d, \"mesh\": \"%s\", \"resumed_from_step\": %lld, "
                "\"steps_this_attempt\": %lld, \"num_parameters\": %lld, \"step_seconds\": %.6f, "
                "\"loader_wait_fraction\": %.5f, \"checkpoint_stall_fraction\": %.5f, \"checkpoints_saved\": %d, \"attempt\": %d, "
                "\"overlap\": %s, \"comm_seconds\": %.6f, \"exposed_comm_seconds\": %.6f, \"exposed_comm_fraction\": %.5f}",
                s.start_loss, s.final_loss, s.tokens_per_s, static_cast<long long>(s.steps), s.plan.c_str(),
                s.world_size, s.mesh.c_str(), static_cast<long long>(s.resumed_from_step),
                static_cast<long long>(s.steps_this_attempt), static_cast<long long>(s.num_parameters), s.step_seconds,
                s.loader_wait_fraction, s.checkpoint_stall_fraction, s.checkpoints_saved, s.attempt,
                s.overlap ? "true" : "false", s.comm_seconds, s.exposed_comm_seconds, s.exposed_comm_fraction);
  return buf;
}

StatusOr<TrainSummary> TrainLm(Communicator& world, const RankInfo& me, const TrainLmOptions& o, std::FILE* progress) {
  const bool lead = me.rank == 0;
  MF_ASSIGN_OR_RETURN(PlanKind plan, ParsePlan(o.plan));
  MF_ASSIGN_OR_RETURN(MeshSpec spec, ResolveMesh(plan, o.mesh, me.size));
  MF_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create(spec.shape, spec.names));
  if (world.device().is_host() != o.device.is_host()) {
    return InvalidArgumentError("TrainLm: --device " + std::string(o.device.is_host() ? "host" : "cuda") +
                                " but the world communicator's ranks are on " + world.device().ToString());
  }
  MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(world, mesh));
  MF_ASSIGN_OR_RETURN(std::shared_ptr<TokenFileDataset> ds, OpenCorpus(o));

  MF_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> gpt, Gpt::Create(o.model, ctx));
  MF_ASSIGN_OR_RETURN(AppliedPlan applied, ApplyPlan(plan, *gpt, ctx));
  std::vector<ParamSpec> specs = gpt->ParamSpecs();
  for (size_t i = 0; i < specs.size(); ++i) specs[i].state_layout = applied.state_layouts[i];
  AdamWOptions adam;
  adam.lr = o.lr;
  adam.weight_decay = o.weight_decay;
  adam.beta2 = 0.99;
  MF_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, AdamW::Create(specs, adam, ctx));
  // FSDP plans gather each block's parameters around its forward (and again in backward), one
  // block ahead with overlap, and the root's (embeddings, final norm, head) once per step; every
  // plan reduces its gradients in buckets during Backward with overlap.
  std::unique_ptr<nn::FsdpBlocks> fsdp_blocks;
  if (std::holds_alternative<FsdpPlan>(plan) || std::holds_alternative<FsdpTpPlan>(plan)) {
    MF_ASSIGN_OR_RETURN(const int dp, mesh.DimIndex("dp"));
    MF_ASSIGN_OR_RETURN(fsdp_blocks, nn::FsdpBlocks::Create(gpt->Blocks(), {dp}, {.prefetch = o.overlap}, ctx,
                                                                gpt->RootModules()));
    gpt->set_block_hooks(fsdp_blocks.get());
  }
  std::unique_ptr<GradReducer> reducer;
  if (o.overlap) {
    std::vector<Variable*> leaves;
    for (const nn::NamedParameter& p : gpt->NamedParameters()) leaves.push_back(&p.variable);
    MF_ASSIGN_OR_RETURN(reducer, GradReducer::Create(leaves, *opt,
                                                     {.bucket_bytes = static_cast<int64_t>(o.bucket_mb * (1 << 20))},
                                                     ctx));
  }
  MF_ASSIGN_OR_RETURN(WarmupCosineSchedule schedule,
                      WarmupCosineSchedule::Create({.base_lr = o.lr,
                                                    .min_lr = std::min(o.min_lr, o.lr),
                                                    .warmup_steps = std::min(o.warmup_steps, o.steps),
                                                    .total_steps = o.steps}));

  DataLoaderOptions lo;
  lo.global_batch_size = o.batch_size;
  lo.seed = o.data_seed;
  lo.shuffle = true;
  lo.prefetch_depth = o.prefetch;
  if (applied.dp_dims.empty()) {
    lo.replicate_batch = true;
  } else {
    for (const std::string& d : applied.dp_dims) lo.dp_dims.emplace_back(d);
  }
  MF_ASSIGN_OR_RETURN(std::unique_ptr<DataLoader> loader, DataLoader::Create(ds, mesh, me.rank, lo));

  // Named tensors of a checkpoint: params and optimizer state, in this run's layouts.
  const std::vector<nn::NamedParameter> params = gpt->NamedParameters();
  std::vector<std::pair<std::string, DTensor*>> tensors;
  for (const nn::NamedParameter& p : params) tensors.emplace_back("param/" + p.name, p.variable.mutable_leaf_value());
  for (const StateTensor& s : opt->StateTensors()) tensors.emplace_back("optim/" + s.name, s.tensor);

  // Resume: rank 0 picks the newest complete checkpoint; every rank loads the same one.
  TrainSummary sum;
  sum.plan = std::string(PlanName(plan));
  sum.mesh = spec.ToString();
  sum.world_size = me.size;
  sum.steps = o.steps;
  sum.num_parameters = gpt->NumParameters();
  sum.attempt = o.attempt;
  int64_t start = 0;
  double last_loss = 0;
  if (!o.ckpt_dir.empty()) {
    int64_t found = -1;
    if (lead) {
      MF_ASSIGN_OR_RETURN(std::optional<TrainCheckpoint> last, LatestCheckpoint(o.ckpt_dir));
      if (last) found = last->step;
    }
    MF_RETURN_IF_ERROR(world.Broadcast(&found, 1, DType::kI64, 0));
    if (found >= 0) {
      const std::string dir = StepCheckpointDir(o.ckpt_dir, found);
      MF_ASSIGN_OR_RETURN(TrainState st, ReadTrainState(dir, o.model));
      std::vector<LoadRequest> requests;
      for (const auto& [name, t] : tensors) requests.push_back(LoadRequest{name, t->layout(), t->dtype()});
      MF_ASSIGN_OR_RETURN(std::vector<DTensor> loaded, LoadTensors(dir, requests, ctx));
      for (size_t i = 0; i < tensors.size(); ++i) *tensors[i].second = std::move(loaded[i]);
      MF_RETURN_IF_ERROR(opt->RestoreStepCounts(st.opt_step_count, st.opt_param_steps));
      MF_ASSIGN_OR_RETURN(LoaderState ls, LoaderState::Parse(st.loader));
      MF_RETURN_IF_ERROR(loader->Restore(ls));
      start = st.step;
      sum.start_loss = st.start_loss;
      last_loss = st.last_loss;
      sum.resumed_from_step = st.step;
    }
  }
  std::unique_ptr<CheckpointManager> ckpt;
  if (!o.ckpt_dir.empty()) {
    MF_ASSIGN_OR_RETURN(ckpt, CheckpointManager::Create(
                                  {.root = o.ckpt_dir,
                                   .keep_last = o.keep_last,
                                   .async = o.async_checkpoint && me.concurrent_communicators}, world, mesh));
  }
  if (lead && progress) {
    std::fprintf(progress,
                 "train_lm: plan %s on mesh %s (%d ranks), %lld params (%s), corpus %s: %lld sequences of %lld tokens, "
                 "batch %lld; %s%s\n",
                 sum.plan.c_str(), sum.mesh.c_str(), me.size, static_cast<long long>(sum.num_parameters),
                 o.model.ToString().c_str(), o.corpus.c_str(), static_cast<long long>(ds->size()),
                 static_cast<long long>(o.model.seq_len + 1), static_cast<long long>(o.batch_size),
                 start > 0 ? ("resumed from step " + std::to_string(start) + " of " + o.ckpt_dir).c_str()
                           : "starting from step 0",
                 !ckpt                     ? ""
                 : ckpt->options().async ? "; checkpoints written in the background"
                                         : "; checkpoints written synchronously");
    std::fflush(progress);
  }

  std::FILE* csv = nullptr;
  std::FILE* samples = nullptr;
  if (lead && !o.log_csv.empty()) {
    if (start > 0) MF_RETURN_IF_ERROR(TruncateLog(o.log_csv, start));
    csv = std::fopen(o.log_csv.c_str(), start > 0 ? "a" : "w");
    if (csv == nullptr) return UnavailableError("cannot open --log-csv '" + o.log_csv + "'");
    if (start == 0) std::fprintf(csv, "step,loss,lr,tokens_per_s,elapsed_s,world_size,plan\n");
  }
  if (lead && !o.sample_log.empty()) {
    if (start > 0) MF_RETURN_IF_ERROR(TruncateLog(o.sample_log, start));
    samples = std::fopen(o.sample_log.c_str(), start > 0 ? "a" : "w");
    if (samples == nullptr) return UnavailableError("cannot open --sample-log '" + o.sample_log + "'");
  }
  struct Closer {
    std::FILE* f;
    ~Closer() {
      if (f) std::fclose(f);
    }
  } close_csv{csv}, close_samples{samples};

  auto train_state = [&](int64_t step) {
    TrainState st;
    st.step = step;
    st.start_loss = sum.start_loss;
    st.last_loss = last_loss;
    st.opt_step_count = opt->step_count();
    for (int i = 0; i < opt->num_params(); ++i) st.opt_param_steps.push_back(opt->param_step(i));
    st.loader = loader->state().ToString();
    st.model = o.model.ToString();
    return st.ToString();
  };
  std::vector<std::pair<std::string, const DTensor*>> const_tensors;
  for (const auto& [name, t] : tensors) const_tensors.emplace_back(name, t);
  double stall = 0;
  auto save = [&](int64_t step) -> Status {
    if (o.attempt == 0 && step == o.crash_in_save_at_step) {
      SetCheckpointTestHook([](std::string_view point, int world_rank) -> Status {
        if (point == "save:data-written" && world_rank == 0) {
          std::fprintf(stderr, "train_lm: rank 0 dies in the middle of a checkpoint save (fault injection)\n");
          std::fflush(stderr);
          std::raise(SIGKILL);
        }
        return Status::Ok();
      });
    }
    const Clock::time_point t0 = Clock::now();
    const Status s = ckpt->Save(step, const_tensors, train_state(step));
    stall += Since(t0);
    return s;
  };

  const int64_t tokens_per_step = o.batch_size * o.model.seq_len;
  const int64_t chunk = (o.batch_size + loader->dp_size() - 1) / loader->dp_size();
  const Clock::time_point loop_start = Clock::now();
  const double comm_us0 = ctx.comm_stream().stats().busy_us;
  const double exposed_us0 = ctx.compute_stream().stats().wait_us;
  double data_wait = 0;
  for (int64_t step = start; step < o.steps; ++step) {
    if (ckpt && step > start && step % o.ckpt_every == 0) MF_RETURN_IF_ERROR(save(step));
    if (o.attempt == 0 && step == o.kill_at_step && me.rank == o.kill_rank) {
      std::fprintf(stderr, "train_lm: rank %d kills itself (SIGKILL) before step %lld (fault injection)\n", me.rank,
                   static_cast<long long>(step));
      std::fflush(stderr);
      std::raise(SIGKILL);
    }
    const Clock::time_point d0 = Clock::now();
    MF_ASSIGN_OR_RETURN(Batch batch, loader->NextBatch());
    data_wait += Since(d0);
    if (!o.sample_log.empty()) {
      // [row_offset, rows, ids padded with -1 to chunk] from every rank.
      std::vector<int64_t> mine(static_cast<size_t>(2 + chunk), -1);
      mine[0] = batch.row_offset;
      mine[1] = static_cast<int64_t>(batch.sample_indices.size());
      for (size_t i = 0; i < batch.sample_indices.size(); ++i) mine[2 + i] = batch.sample_indices[i];
      std::vector<int64_t> all(mine.size() * static_cast<size_t>(me.size));
      const std::vector<int64_t> counts(static_cast<size_t>(me.size), static_cast<int64_t>(mine.size()));
      MF_RETURN_IF_ERROR(world.AllGatherV(mine.data(), static_cast<int64_t>(mine.size()), all.data(), counts, DType::kI64));
      if (lead) {
        std::vector<int64_t> rows(static_cast<size_t>(o.batch_size), -1);
        for (int r = 0; r < me.size; ++r) {
          const int64_t* p = all.data() + static_cast<size_t>(r) * mine.size();
          for (int64_t i = 0; i < p[1]; ++i) {
            const int64_t row = p[0] + i;
            if (row >= o.batch_size) continue;  // even_batches padding (not used here)
            int64_t& slot = rows[static_cast<size_t>(row)];
            if (slot >= 0 && slot != p[2 + i]) {
              return InternalError("sample log: ranks disagree on row " + std::to_string(row) + " of step " +
                                   std::to_string(step) + " (" + std::to_string(slot) + " vs " +
                                   std::to_string(p[2 + i]) + ")");
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
      }
    }
    const double lr = schedule.LrAt(step);
    MF_RETURN_IF_ERROR(opt->set_lr(lr));
    MF_ASSIGN_OR_RETURN(DTensor tokens, OnRankDevice(std::move(batch.data), ctx));  // a GPU rank's batch: copied
    MF_ASSIGN_OR_RETURN(Variable loss, gpt->Loss(tokens, ctx));
    MF_RETURN_IF_ERROR(Backward(loss, ctx));
    if (reducer) MF_RETURN_IF_ERROR(reducer->Finish(ctx));
    if (fsdp_blocks) MF_RETURN_IF_ERROR(fsdp_blocks->Finish(ctx));
    const std::vector<const DTensor*> grads = gpt->Grads();
    MF_RETURN_IF_ERROR(opt->Step(grads, ctx, {.max_grad_norm = o.max_grad_norm}));
    gpt->ZeroGrad();
    MF_ASSIGN_OR_RETURN(Tensor lv, FullTensor(loss.value(), ctx));
    MF_ASSIGN_OR_RETURN(lv, OnHost(std::move(lv)));
    last_loss = lv.GetAsDouble(0);
    if (!std::isfinite(last_loss)) {
      return InternalError("the loss is not finite at step " + std::to_string(step) + " (lower --lr?)");
    }
    if (step == 0) sum.start_loss = last_loss;
    const double elapsed = Since(loop_start);
    const int64_t done = step + 1 - start;
    const double tps = static_cast<double>(done * tokens_per_step) / std::max(elapsed, 1e-9);
    if (csv) {
      std::fprintf(csv, "%lld,%.6f,%.6g,%.1f,%.3f,%d,%s\n", static_cast<long long>(step), last_loss, lr, tps, elapsed,
                   me.size, sum.plan.c_str());
      std::fflush(csv);
    }
    if (samples) std::fflush(samples);
    if (lead && progress && o.print_every > 0 && ((step + 1) % o.print_every == 0 || step + 1 == o.steps)) {
      const double eta = elapsed / static_cast<double>(done) * static_cast<double>(o.steps - step - 1);
      std::fprintf(progress, "step %lld/%lld  loss %.4f  lr %.2e  %.0f tok/s  eta %.0f s\n",
                   static_cast<long long>(step + 1), static_cast<long long>(o.steps), last_loss, lr, tps, eta);
      std::fflush(progress);
    }
  }
  const double loop_seconds = Since(loop_start);
  sum.overlap = o.overlap;
  sum.comm_seconds = (ctx.comm_stream().stats().busy_us - comm_us0) * 1e-6;
  sum.exposed_comm_seconds = (ctx.compute_stream().stats().wait_us - exposed_us0) * 1e-6;
  sum.exposed_comm_fraction = sum.comm_seconds > 0 ? std::min(1.0, sum.exposed_comm_seconds / sum.comm_seconds) : 0.0;
  if (ckpt) {
    if (start < o.steps) MF_RETURN_IF_ERROR(save(o.steps));
    const Clock::time_point t0 = Clock::now();
    MF_RETURN_IF_ERROR(ckpt->Wait());
    stall += Since(t0);
    sum.checkpoints_saved = ckpt->stats().saves;
  }
  sum.final_loss = last_loss;
  sum.steps_this_attempt = o.steps - start;
  if (sum.steps_this_attempt > 0) {
    sum.tokens_per_s = static_cast<double>(sum.steps_this_attempt * tokens_per_step) / std::max(loop_seconds, 1e-9);
    sum.step_seconds = loop_seconds / static_cast<double>(sum.steps_this_attempt);
    sum.loader_wait_fraction = data_wait / std::max(loop_seconds, 1e-9);
    sum.checkpoint_stall_fraction = stall / std::max(loop_seconds, 1e-9);
  }
  return sum;
}

}  // namespace meshflow::lm
