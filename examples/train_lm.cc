// train_lm: trains a small GPT (lm/gpt.h) on a byte-level corpus with meshflow choosing every
// collective. One binary, same flags, in-process or under a launcher (launch/world.h):
//
//   bazel run //data:text_to_tokens -- --output /tmp/py.mftok --suffix .py --max-bytes 2000000 /usr/lib/python3.*
//   bazel run --config=opt //examples:train_lm -- --corpus /tmp/py.mftok --nproc 2 --plan ddp
//   mpirun -np 4 bazel-bin/examples/train_lm --corpus /tmp/py.mftok --plan fsdp+tp --mesh dp=2,tp=2
//   bazel-bin/examples/train_lm --corpus /tmp/py.mftok --nproc 2 --device cuda   # ranks on GPUs
//
// --device cuda runs every rank on a GPU (launch/world.h, WorldDevice::kCuda): NCCL with one GPU
// per rank, or, with more ranks than GPUs, ranks sharing GPUs through host staging
// (launch/cuda_world.h). It needs a build with a CUDA toolkit (BUILD links //launch:cuda_world,
// the CUDA runtime and op kernels where one was found); elsewhere it fails (exit 1, UNAVAILABLE).
//
// With --ckpt-dir it saves params, optimizer state, loader state and step every --ckpt-every
// steps (asynchronously; the last --keep-last kept) and resumes from the newest complete
// checkpoint on start. With --max-restarts N it supervises itself (launch/supervisor.h): the
// training runs as a child process (or an mpirun job with --launcher mpirun), and when it dies it
// is restarted from the newest checkpoint, with --restart-nproc processes if given (elastic).
//
// Output (rank 0): a start line, a progress line every --print-every steps, a CSV row per step to
// --log-csv (default <ckpt-dir>/train_log.csv), and with --json-summary a last stdout line that
// is one JSON object: start_loss, final_loss, tokens_per_s, steps, plan, world_size, mesh,
// resumed_from_step, steps_this_attempt, num_parameters, step_seconds, loader_wait_fraction,
// checkpoint_stall_fraction, checkpoints_saved, attempt.
// Exit codes: 0 trained, 1 training failed, 2 bad input (checked before any step runs).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "meshflow/base/cli.h"
#include "meshflow/base/parse.h"
#include "meshflow/launch/supervisor.h"
#include "meshflow/launch/world.h"
#include "meshflow/lm/plan.h"
#include "meshflow/lm/trainer.h"

namespace meshflow {
namespace {

constexpr const char* kUsage =
    "usage: train_lm --corpus FILE.mftok [flags]\n"
    "\n"
    "Trains a GPT-style byte-level language model with AdamW. Started plainly it runs an in-process\n"
    "world of --nproc threads; under mpirun / srun / PMI it runs one rank per process.\n"
    "\n"
    "world and plan:\n"
    "  --nproc N             thread ranks when not under a launcher (default 1)\n"
    "  --plan P              ddp | zero1 | fsdp | tp | fsdp+tp (default ddp)\n"
    "  --mesh SPEC           e.g. dp=2,tp=2 (default: the plan's, over every rank)\n"
    "  --device host|cuda    where the ranks run (default host). cuda: one GPU per rank (NCCL); with\n"
    "                        more ranks than GPUs they share GPUs through host staging (slow: for\n"
    "                        tests); needs a build with a CUDA toolkit\n"
    "  --overlap on|off      overlap communication with compute (default on): FSDP gathers one block\n"
    "                        ahead, gradients reduced in buckets during backward; off: the serial path\n"
    "  --bucket-mb X         gradient bucket size with --overlap on (default 25)\n"
    "training:\n"
    "  --corpus FILE         .mftok token file (make one with //data:text_to_tokens)\n"
    "  --steps N             optimizer steps (default 200)\n"
    "  --batch N             global batch in sequences (default 16)\n"
    "  --lr X                peak learning rate (default 3e-3; warmup 20 steps, cosine to lr/10)\n"
    "  --data-seed N         data order seed (default 1234)\n"
    "model (default: 2 layers, dim 64, 4 heads, mlp 256, seq 64, vocab 256):\n"
    "  --layers N --dim N --heads N --mlp-hidden N --seq-len N --vocab N --seed N\n"
    "checkpoints and restarts:\n"
    "  --ckpt-dir DIR        save every --ckpt-every steps, resume from the newest complete checkpoint\n"
    "  --ckpt-every N        (default 50)\n"
    "  --keep-last M         complete checkpoints kept (default 2)\n"
    "  --sync-checkpoint     write checkpoints in the training thread (default: in the background)\n"
    "  --max-restarts N      supervise: restart the job from the newest checkpoint when it dies\n"
    "  --launcher mpirun     (with --max-restarts) start the job with mpirun -np NPROC\n"
    "                        (extra mpirun flags from $MESHFLOW_MPIRUN_FLAGS)\n"
    "  --restart-nproc N     (with --max-restarts) processes / threads for restarts (elastic)\n"
    "output:\n"
    "  --log-csv FILE        per-step CSV (default <ckpt-dir>/train_log.csv)\n"
    "  --sample-log FILE     per-step dataset indices of the global batch (exactness checks)\n"
    "  --print-every N       progress line period (default 10; 0 = none)\n"
    "  --json-summary        print the summary JSON object as the last stdout line\n"
    "fault injection (tests; first attempt only):\n"
    "  --kill-rank R --kill-at-step S     rank R sends itself SIGKILL before step S\n"
    "  --crash-in-save-at-step S          rank 0 SIGKILLs itself in the middle of step S's save\n"
    "  -h, --help            print this help and exit\n"
    "\n"
    "exit codes: 0 trained, 1 training failed, 2 bad input (message on stderr).\n";

int BadInput(const std::string& message) {
  std::fprintf(stderr, "train_lm: %s\n", message.c_str());
  return 2;
}

struct Flags {
  lm::TrainLmOptions train;
  WorldDevice device = WorldDevice::kHost;  // --device: the world's (train.device follows it)
  int nproc = 1;
  bool nproc_given = false;
  bool json = false;
  int max_restarts = -1;  // -1: no supervision
  std::string launcher;   // "" or "mpirun"
  int restart_nproc = 0;  // 0: same as nproc
  std::vector<std::string> worker_args;  // argv[1..] without the supervisor flags and --nproc
};

StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  lm::TrainLmOptions& o = f.train;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> StatusOr<std::string> {
      if (i + 1 >= argc) return InvalidArgumentError("missing value after " + arg);
      return std::string(argv[++i]);
    };
    auto integer = [&](int64_t lo, int64_t hi) -> StatusOr<int64_t> {
      MF_ASSIGN_OR_RETURN(std::string v, next());
      StatusOr<int64_t> n = ParseInt64(v, arg);
      if (!n.ok() || *n < lo || *n > hi) {
        return InvalidArgumentError(arg + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                    "], got '" + v + "'");
      }
      return *n;
    };
    auto real = [&]() -> StatusOr<double> {
      MF_ASSIGN_OR_RETURN(std::string v, next());
      char* end = nullptr;
      const double d = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0') return InvalidArgumentError(arg + " must be a number, got '" + v + "'");
      return d;
    };
    const size_t first = static_cast<size_t>(i);
    bool worker_flag = true;
    constexpr int64_t kBig = int64_t{1} << 30;
    if (arg == "--corpus") {
      MF_ASSIGN_OR_RETURN(o.corpus, next());
    } else if (arg == "--nproc") {
      MF_ASSIGN_OR_RETURN(int64_t n, integer(1, 4096));
      f.nproc = static_cast<int>(n);
      f.nproc_given = true;
      worker_flag = false;
    } else if (arg == "--plan") {
      MF_ASSIGN_OR_RETURN(o.plan, next());
      MF_RETURN_IF_ERROR(lm::ParsePlan(o.plan).status());
    } else if (arg == "--mesh") {
      MF_ASSIGN_OR_RETURN(std::string v, next());
      MF_ASSIGN_OR_RETURN(lm::MeshSpec m, lm::ParseMeshSpec(v));
      o.mesh = m;
    } else if (arg == "--device") {
      MF_ASSIGN_OR_RETURN(std::string v, next());
      MF_ASSIGN_OR_RETURN(size_t d, ParseChoice("--device", v, {"host", "cuda"}));
      f.device = d == 1 ? WorldDevice::kCuda : WorldDevice::kHost;
      o.device = d == 1 ? Device::Cuda(0) : Device::Host();  // the kind; each rank gets its own GPU
    } else if (arg == "--overlap") {
      MF_ASSIGN_OR_RETURN(std::string v, next());
      if (v != "on" && v != "off") return InvalidArgumentError("--overlap must be on or off, got '" + v + "'");
      o.overlap = v == "on";
    } else if (arg == "--bucket-mb") {
      MF_ASSIGN_OR_RETURN(o.bucket_mb, real());
    } else if (arg == "--steps") {
      MF_ASSIGN_OR_RETURN(o.steps, integer(1, kBig));
    } else if (arg == "--batch") {
      MF_ASSIGN_OR_RETURN(o.batch_size, integer(1, kBig));
    } else if (arg == "--lr") {
      MF_ASSIGN_OR_RETURN(o.lr, real());
      o.min_lr = o.lr / 10;
    } else if (arg == "--data-seed") {
      MF_ASSIGN_OR_RETURN(int64_t n, integer(0, kBig));
      o.data_seed = static_cast<uint64_t>(n);
    } else if (arg == "--layers") {
      MF_ASSIGN_OR_RETURN(o.model.layers, integer(1, 1024));
    } else if (arg == "--dim") {
      MF_ASSIGN_OR_RETURN(o.model.dim, integer(1, 1 << 16));
    } else if (arg == "--heads") {
      MF_ASSIGN_OR_RETURN(o.model.heads, integer(1, 1024));
    } else if (arg == "--mlp-hidden") {
      MF_ASSIGN_OR_RETURN(o.model.mlp_hidden, integer(1, 1 << 18));
    } else if (arg == "--seq-len") {
      MF_ASSIGN_OR_RETURN(o.model.seq_len, integer(1, 1 << 16));
    } else if (arg == "--vocab") {
      MF_ASSIGN_OR_RETURN(o.model.vocab, integer(1, 1 << 24));
    } else if (arg == "--seed") {
      MF_ASSIGN_OR_RETURN(int64_t n, integer(0, kBig));
      o.model.seed = static_cast<uint64_t>(n);
    } else if (arg == "--ckpt-dir") {
      MF_ASSIGN_OR_RETURN(o.ckpt_dir, next());
    } else if (arg == "--ckpt-every") {
      MF_ASSIGN_OR_RETURN(o.ckpt_every, integer(1, kBig));
    } else if (arg == "--keep-last") {
      MF_ASSIGN_OR_RETURN(int64_t n, integer(1, 1000));
      o.keep_last = static_cast<int>(n);
    } else if (arg == "--sync-checkpoint") {
      o.async_checkpoint = false;
    } else if (arg == "--log-csv") {
      MF_ASSIGN_OR_RETURN(o.log_csv, next());
    } else if (arg == "--sample-log") {
      MF_ASSIGN_OR_RETURN(o.sample_log, next());
    } else if (arg == "--print-every") {
      MF_ASSIGN_OR_RETURN(o.print_every, integer(0, kBig));
    } else if (arg == "--json-summary") {
      f.json = true;
    } else if (arg == "--max-restarts") {
      MF_ASSIGN_OR_RETURN(int64_t n, integer(0, 1000));
      f.max_restarts = static_cast<int>(n);
      worker_flag = false;
    } else if (arg == "--launcher") {
      MF_ASSIGN_OR_RETURN(f.launcher, next());
      if (f.launcher != "mpirun") return InvalidArgumentError("unknown --launcher '" + f.launcher + "' (expected mpirun)");
      worker_flag = false;
    } else if (arg == "--restart-nproc") {
      MF_ASSIGN_OR_RETURN(int64_t n, integer(1, 4096));
      f.restart_nproc = static_cast<int>(n);
      worker_flag = false;
    } else if (arg == "--kill-rank") {
      MF_ASSIGN_OR_RETURN(int64_t n, integer(0, 4096));
      o.kill_rank = static_cast<int>(n);
    } else if (arg == "--kill-at-step") {
      MF_ASSIGN_OR_RETURN(o.kill_at_step, integer(0, kBig));
    } else if (arg == "--crash-in-save-at-step") {
      MF_ASSIGN_OR_RETURN(o.crash_in_save_at_step, integer(1, kBig));
    } else {
      return UnknownArgumentError("train_lm", arg);
    }
    if (worker_flag) {
      for (size_t k = first; k <= static_cast<size_t>(i); ++k) f.worker_args.emplace_back(argv[k]);
    }
  }
  if (o.log_csv.empty() && !o.ckpt_dir.empty()) o.log_csv = o.ckpt_dir + "/train_log.csv";
  if (f.max_restarts < 0 && (!f.launcher.empty() || f.restart_nproc > 0)) {
    return InvalidArgumentError("--launcher and --restart-nproc need --max-restarts");
  }
  if (f.max_restarts >= 0 && o.ckpt_dir.empty()) {
    return InvalidArgumentError("--max-restarts needs --ckpt-dir (a restart resumes from the newest checkpoint)");
  }
  if ((o.kill_rank >= 0) != (o.kill_at_step >= 0)) {
    return InvalidArgumentError("--kill-rank and --kill-at-step go together");
  }
  if (const std::optional<std::string> a = SystemEnv(kRestartCountEnv)) {
    StatusOr<int64_t> n = ParseInt64(*a, kRestartCountEnv);
    if (!n.ok() || *n < 0) return InvalidArgumentError(std::string(kRestartCountEnv) + "='" + *a + "' is not a count");
    o.attempt = static_cast<int>(*n);
  }
  return f;
}

std::vector<std::string> SplitWords(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

int Supervisor(const Flags& f) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return BadInput("cannot find this program's path (/proc/self/exe)");
  self[n] = '\0';
  SupervisorOptions so;
  so.max_restarts = f.max_restarts;
  so.command = [&](int attempt) {
    const int np = attempt > 0 && f.restart_nproc > 0 ? f.restart_nproc : f.nproc;
    std::vector<std::string> argv;
    if (f.launcher == "mpirun") {
      argv.push_back("mpirun");
      if (const std::optional<std::string> extra = SystemEnv("MESHFLOW_MPIRUN_FLAGS")) {
        for (std::string& w : SplitWords(*extra)) argv.push_back(std::move(w));
      }
      argv.insert(argv.end(), {"-np", std::to_string(np), self});
    } else {
      argv.insert(argv.end(), {self, "--nproc", std::to_string(np)});
    }
    argv.insert(argv.end(), f.worker_args.begin(), f.worker_args.end());
    return argv;
  };
  StatusOr<SuperviseResult> r = Supervise(so);
  if (!r.ok()) {
    std::fprintf(stderr, "train_lm: %s\n", r.status().ToString().c_str());
    return 1;
  }
  return r->exit_code;
}

int Main(int argc, char** argv) {
  if (HasHelpFlag(argc, argv)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  StatusOr<Flags> flags = ParseFlags(argc, argv);
  if (!flags.ok()) return BadInput(std::string(flags.status().message()));
  const Flags& f = *flags;
  StatusOr<LaunchMode> mode = DetectLaunch(SystemEnv, f.nproc, f.nproc_given);
  if (!mode.ok()) return BadInput(std::string(mode.status().message()));
  if (f.max_restarts >= 0) {
    if (std::holds_alternative<ExternalLaunch>(*mode)) {
      return BadInput("--max-restarts supervises the job from outside: start train_lm plainly (it runs mpirun itself "
                      "with --launcher mpirun)");
    }
    // Bad input is reported once, before anything starts.
    const Status v = lm::ValidateTrainLm(f.train, f.nproc);
    if (!v.ok()) return BadInput(v.ToString());
    return Supervisor(f);
  }
  const int world_size =
      std::holds_alternative<InProcess>(*mode) ? std::get<InProcess>(*mode).nproc : std::get<ExternalLaunch>(*mode).size;
  const bool lead = std::holds_alternative<InProcess>(*mode) || std::get<ExternalLaunch>(*mode).rank == 0;
  const Status v = lm::ValidateTrainLm(f.train, world_size);
  if (!v.ok()) {
    if (lead) return BadInput(v.ToString());
    return 2;
  }
  std::mutex mu;
  std::optional<lm::TrainSummary> summary;
  const WorldOptions world_options{.device = f.device};
  const Status s = RunWorld(*mode, world_options, [&](Communicator& world, const RankInfo& me) -> Status {
    lm::TrainLmOptions options = f.train;
    options.device = me.device;  // this rank's GPU (or the host)
    MF_ASSIGN_OR_RETURN(lm::TrainSummary sum, lm::TrainLm(world, me, options, me.rank == 0 ? stdout : nullptr));
    if (me.rank == 0) {
      std::lock_guard<std::mutex> lock(mu);
      summary = sum;
    }
    return Status::Ok();
  });
  if (!s.ok()) {
    std::fprintf(stderr, "train_lm: %s\n", s.ToString().c_str());
    return 1;
  }
  if (lead && summary && f.json) std::printf("%s\n", lm::SummaryJson(*summary).c_str());
  return 0;
}

}  // namespace
}  // namespace meshflow

int main(int argc, char** argv) { return meshflow::Main(argc, argv); }
