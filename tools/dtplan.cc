// dtplan: plan, visualize, execute and verify a redistribution from the command line.
//
//   bazel run //tools:dtplan -- --mesh 2x2x2 [--names dp,tp,cp] --shape 8,8,8 [--dtype f32]
//       --from 'S(0),S(1),S(2)' --to 'S(2),S(1),S(0)' [--from-order '0:[1,0]'] [--to-order ...]
//       [--topology 'intra=1,2;bw_intra=150;bw_inter=25;lat_intra=2;lat_inter=10']
//       [--planner optimal|greedy|direct] [--max-edges N] [--max-search-ms MS] [--max-memory-mib M]
//       [--show] [--json] [--execute] [--dump]
//
// Text output: one line per step, totals, lower bound and ratio; --show draws source and target
// layouts. --json prints one JSON object (see planner/plan_format.h). --execute runs the plan on
// an in-process world with the global tensor filled by its row-major index and reports
// `verified` and `measured_max_bytes_received_per_rank`; --dump adds every rank's offset, local
// shape and data (text: FormatElement; JSON: FormatElementJson, each element's exact value as a
// double, e.g. the bf16 528 as 528). The JSON is written by base/json.h's JsonWriter. Exit code 2 with a message on bad input, 1 when verification fails; --help (-h)
// prints every flag and exits 0. --max-edges / --max-search-ms bound the optimal search (the plan
// then says "not proven optimal"; JSON "proven_optimal": false). Before building the mesh (rank
// set), before planning and before executing, dtplan estimates the memory it will need
// (kPlanningBytesPerRank, EstimateBytes below) and exits 2 with
// RESOURCE_EXHAUSTED naming the bytes when that exceeds --max-memory-mib (default 8192).
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meshflow/base/cli.h"
#include "meshflow/base/json.h"
#include "meshflow/base/parse.h"
#include "meshflow/base/strings.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/executor.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/planner/cost_model.h"
#include "meshflow/planner/plan_format.h"
#include "meshflow/planner/planner.h"

namespace meshflow {
namespace {

constexpr const char* kUsage =
    "usage: dtplan --mesh 2x2 [--names dp,tp] --shape 8,8 [--dtype f32] --from 'S(0),S(1)' --to 'S(1),S(0)'\n"
    "              [--from-order '0:[1,0]'] [--to-order ...] [--topology 'intra=0;bw_intra=150;...']\n"
    "              [--planner optimal|greedy|direct] [--max-edges N] [--max-search-ms MS]\n"
    "              [--max-memory-mib M] [--show] [--json] [--execute] [--dump]\n"
    "\n"
    "Plans the redistribution of a tensor between two layouts on a device mesh, prints the plan and\n"
    "optionally executes and verifies it on in-process ranks.\n"
    "\n"
    "flags (a value follows as the next argument or after '=', e.g. --mesh=2x2):\n"
    "  --mesh AxBx...            mesh shape (required)\n"
    "  --names a,b,...           mesh dim names, one per dim\n"
    "  --shape N,M,...           global tensor shape (required)\n"
    "  --dtype T                 one of f32 (default), f64, bf16, i32, i64\n"
    "  --from P, --to P          placements, one per mesh dim, comma separated (required); each one of\n"
    "                            S(<tensor dim>), R, P, P(sum|avg|max|min)\n"
    "  --from-order, --to-order  shard order, e.g. '0:[1,0];2:[0,2]' (tensor dim: mesh dims, outermost\n"
    "                            first); default: mesh dim order\n"
    "  --topology T              cost model, ';'-separated key=value with keys intra (mesh dims or all),\n"
    "                            bw_intra, bw_inter (GB/s), lat_intra, lat_inter (us)\n"
    "                            [intra=all;bw_intra=150;bw_inter=25;lat_intra=2;lat_inter=10]\n"
    "  --planner K               one of optimal (default), greedy, direct\n"
    "  --max-edges N             search budget of the optimal planner: edges generated before it returns\n"
    "                            the best plan found (not proven optimal); 0 = unlimited [20000]\n"
    "  --max-search-ms MS        also stop the search after MS ms of wall-clock time; 0 = none [0]\n"
    "  --max-memory-mib M        refuse (exit 2, RESOURCE_EXHAUSTED) a run whose estimated memory\n"
    "                            (planning bookkeeping, and with --execute every buffer) exceeds M MiB\n"
    "                            [8192]\n"
    "  --show                    draw the source and target layouts (text output)\n"
    "  --json                    print one JSON object instead of text\n"
    "  --execute                 run the plan on in-process ranks and report verified=true|false\n"
    "  --dump                    print every rank's offset, local shape and data (implies --execute)\n"
    "  -h, --help                print this help and exit\n"
    "\n"
    "exit codes: 0 success, 1 verification failed, 2 bad input (message on stderr).\n";

StatusOr<int64_t> ParseInt64Flag(const std::string& v, const std::string& flag) {
  int64_t n = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (v.empty() || ec != std::errc() || p != v.data() + v.size()) {
    return InvalidArgumentError(flag + ": '" + v + "' is not an integer");
  }
  return n;
}

StatusOr<double> ParseDoubleFlag(const std::string& v, const std::string& flag) {
  double d = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), d);
  if (v.empty() || ec != std::errc() || p != v.data() + v.size()) {
    return InvalidArgumentError(flag + ": '" + v + "' is not a number");
  }
  return d;
}

std::string JsonInts(std::span<const int64_t> v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

struct Args {
  std::map<std::string, std::string> values;
  bool show = false, json = false, execute = false, dump = false;
};

StatusOr<Args> ParseArgs(int argc, char** argv) {
  static const char* kValued[] = {"mesh",     "names",   "shape",        "dtype",      "from",
                                  "to",       "from-order", "to-order",   "topology",   "planner",
                                  "max-edges", "max-search-ms", "max-memory-mib"};
  auto usage_error = [](const std::string& what) {
    return InvalidArgumentError(what + "; see 'dtplan --help'");
  };
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) return UnknownArgumentError("dtplan", arg);
    std::string name = arg.substr(2), value;
    const size_t eq = name.find('=');
    const bool has_eq = eq != std::string::npos;
    if (has_eq) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (name == "show" || name == "json" || name == "execute" || name == "dump") {
      if (has_eq) return usage_error("--" + name + " takes no value");
      (name == "show" ? a.show : name == "json" ? a.json : name == "execute" ? a.execute : a.dump) = true;
      continue;
    }
    bool known = false;
    for (const char* k : kValued) known = known || name == k;
    if (!known) return UnknownArgumentError("dtplan", "--" + name);
    if (!has_eq) {
      if (i + 1 >= argc) return usage_error("--" + name + " needs a value");
      value = argv[++i];
    }
    a.values[name] = value;
  }
  for (const char* required : {"mesh", "shape", "from", "to"}) {
    if (!a.values.count(required)) return usage_error(std::string("missing --") + required);
  }
  if (a.dump) a.execute = true;
  return a;
}

constexpr int64_t kDefaultMaxMemoryMiB = 8192;
// Per rank: the mesh's rank list, the layouts' and the planner's per-rank bookkeeping (bytes
// received per rank, per step and in total, lower bound); measured peak 245 bytes per rank
// (`/usr/bin/time -f %M dtplan --mesh 4194304 --shape 8 --from 'S(0)' --to R`: 1002884 KB).
// --execute adds a thread, its communicator state and the per-rank buffers.
constexpr int64_t kPlanningBytesPerRank = 256;
constexpr int64_t kExecuteBytesPerRank = 256 * 1024;

// An upper bound of the bytes dtplan holds at its peak, computed from shapes only (O(mesh dims x
// steps)): planning bookkeeping per rank; with --execute also the global tensor, and per rank its
// source shard, two step buffers of the largest box any layout of the plan gives it, its result
// and the reference it is compared with; for a Partial target every rank gathers the full tensor.
long double EstimateBytes(const Layout& from, const Layout& to, DType dtype, const Plan* plan, bool execute) {
  const long double ranks = static_cast<long double>(from.mesh().size());
  // The identity plan (from == to) is built without per-rank bookkeeping (IdentityPlan).
  long double bytes = from == to ? 0 : ranks * kPlanningBytesPerRank;
  if (!execute) return bytes;
  const long double dsize = static_cast<long double>(DTypeSize(dtype));
  long double global = 1;
  for (int64_t s : from.global_shape()) global *= static_cast<long double>(s);
  int64_t peak = std::max(MaxLocalElements(from), MaxLocalElements(to));
  if (plan != nullptr) {
    for (const PlanStep& st : plan->steps) peak = std::max(peak, MaxLocalElements(st.to));
  }
  const long double per_rank = static_cast<long double>(MaxLocalElements(from)) + 2.0L * peak +
                               2.0L * static_cast<long double>(MaxLocalElements(to)) + (to.HasPartial() ? global : 0);
  return bytes + ranks * kExecuteBytesPerRank + dsize * (global + ranks * per_rank);
}

Status CheckMemory(long double need, int64_t limit_mib, bool execute) {
  const long double limit = static_cast<long double>(limit_mib) * 1024.0L * 1024.0L;
  if (need <= limit) return Status();
  const std::string need_s = need >= 9.2e18L ? std::string(">= 9.2e18") : std::to_string(static_cast<int64_t>(need));
  return ResourceExhaustedError(std::string(execute ? "--execute" : "planning") + " needs about " + need_s +
                                " bytes (" + std::to_string(static_cast<long long>(need / (1024.0L * 1024.0L))) +
                                " MiB), more than the limit of " + std::to_string(limit_mib) +
                                " MiB (--max-memory-mib)");
}

struct ExecResult {
  bool verified = true;
  int64_t measured_max_bytes = 0;
  std::vector<Box> boxes;       // per mesh index
  std::vector<Tensor> locals;   // per mesh index
  std::string first_error;
};

StatusOr<ExecResult> Execute(const Plan& plan, const Layout& from, const Layout& to, DType dtype) {
  const DeviceMesh& mesh = from.mesh();
  const Tensor global = Tensor::Iota(dtype, from.global_shape());
  MF_ASSIGN_OR_RETURN(std::unique_ptr<ThreadWorld> world, ThreadWorld::Create(mesh.size()));
  ExecResult res;
  res.boxes = to.AllLocalBoxes();
  res.locals.resize(static_cast<size_t>(mesh.size()));
  std::mutex mu;
  MF_RETURN_IF_ERROR(world->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, mesh));
    const int r = comm.world_rank();
    MF_ASSIGN_OR_RETURN(DTensor x, Distribute(global, from, r));
    comm.ResetCounters();
    MF_RETURN_IF_ERROR(comm.Barrier());  // every rank has reset before anyone sends
    Tensor local = x.local();
    MF_RETURN_IF_ERROR(ExecutePlan(plan, ctx, local));
    const int64_t received = comm.counters().bytes_received;
    // Verify: Partial-free targets compare shards; Partial targets compare the reduced tensor.
    bool ok = true;
    if (!to.HasPartial()) {
      MF_ASSIGN_OR_RETURN(Tensor want, ReferenceLocal(global, to, r));
      ok = local == want;
    } else {
      MF_ASSIGN_OR_RETURN(DTensor y, DTensor::FromLocal(local, to, r));
      MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(y, ctx));
      ok = full == global;
    }
    std::lock_guard<std::mutex> lock(mu);
    const int idx = *mesh.IndexOf(r);
    res.locals[idx] = std::move(local);
    res.measured_max_bytes = std::max(res.measured_max_bytes, received);
    if (!ok) {
      res.verified = false;
      if (res.first_error.empty()) res.first_error = "rank " + std::to_string(r) + " differs from the reference";
    }
    return Status();
  }));
  return res;
}

// A validated command line: what dtplan plans, executes and prints.
struct Request {
  Args args;
  int64_t max_memory_mib;
  DeviceMesh mesh;
  std::vector<int64_t> shape;
  DType dtype;
  Layout from, to;
  RedistributeOptions options;
};

std::string FlagValue(const Args& a, const std::string& name, const std::string& fallback = "") {
  auto it = a.values.find(name);
  return it == a.values.end() ? fallback : it->second;
}

// The error of `v`, if any, prefixed with the flag it came from.
template <typename T>
StatusOr<T> InFlag(StatusOr<T> v, std::string_view flag) {
  if (!v.ok()) return v.status().WithContext(flag);
  return v;
}

StatusOr<int64_t> MaxMemoryMiB(const Args& a) {
  if (!a.values.count("max-memory-mib")) return kDefaultMaxMemoryMiB;
  MF_ASSIGN_OR_RETURN(int64_t m, ParseInt64Flag(FlagValue(a, "max-memory-mib"), "--max-memory-mib"));
  if (m < 1) return InvalidArgumentError("--max-memory-mib " + std::to_string(m) + " must be >= 1");
  return m;
}

// The mesh of --mesh and --names (a mesh of world ranks 0..n-1 keeps no rank list, so its size
// costs nothing here; the planning bookkeeping is checked once the layouts are known, see Run).
// Shapes over DeviceMesh's own limit get its "is too large" error.
StatusOr<DeviceMesh> MeshFromArgs(const Args& a, int64_t* max_memory_mib) {
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> mesh_shape, ParseIntList(FlagValue(a, "mesh"), 'x', "mesh"));
  std::vector<std::string> names;
  if (a.values.count("names")) {
    const std::string text = FlagValue(a, "names");  // SplitString's views point into it
    for (std::string_view n : SplitString(text, ',')) names.emplace_back(n);
  }
  MF_ASSIGN_OR_RETURN(*max_memory_mib, MaxMemoryMiB(a));
  return DeviceMesh::Create(mesh_shape, names);
}

// --topology, --planner and the search budget (--max-edges, --max-search-ms).
StatusOr<RedistributeOptions> OptionsFromArgs(const Args& a, const DeviceMesh& mesh) {
  RedistributeOptions options;
  if (a.values.count("topology")) {
    MF_ASSIGN_OR_RETURN(options.topology, InFlag(ParseTopology(FlagValue(a, "topology")), "--topology"));
    if (Status v = options.topology.ValidateForMesh(mesh.ndim()); !v.ok()) return v.WithContext("--topology");
  }
  if (a.values.count("planner")) {
    MF_ASSIGN_OR_RETURN(options.planner, InFlag(ParsePlannerKind(FlagValue(a, "planner")), "--planner"));
  }
  if (a.values.count("max-edges")) {
    MF_ASSIGN_OR_RETURN(options.budget.max_edges, ParseInt64Flag(FlagValue(a, "max-edges"), "--max-edges"));
  }
  if (a.values.count("max-search-ms")) {
    MF_ASSIGN_OR_RETURN(options.budget.max_ms, ParseDoubleFlag(FlagValue(a, "max-search-ms"), "--max-search-ms"));
  }
  MF_RETURN_IF_ERROR(options.budget.Validate());
  return options;
}

StatusOr<Request> RequestFromArgs(Args a) {
  int64_t max_memory_mib = kDefaultMaxMemoryMiB;
  MF_ASSIGN_OR_RETURN(DeviceMesh mesh, MeshFromArgs(a, &max_memory_mib));
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ParseIntList(FlagValue(a, "shape"), ',', "shape"));
  MF_ASSIGN_OR_RETURN(DType dtype, InFlag(ParseDType(FlagValue(a, "dtype", "f32")), "--dtype"));
  MF_ASSIGN_OR_RETURN(Placements from_p, InFlag(ParsePlacements(FlagValue(a, "from")), "--from"));
  MF_ASSIGN_OR_RETURN(Placements to_p, InFlag(ParsePlacements(FlagValue(a, "to")), "--to"));
  MF_ASSIGN_OR_RETURN(ShardOrder from_o, InFlag(ParseShardOrder(FlagValue(a, "from-order")), "--from-order"));
  MF_ASSIGN_OR_RETURN(ShardOrder to_o, InFlag(ParseShardOrder(FlagValue(a, "to-order")), "--to-order"));
  MF_ASSIGN_OR_RETURN(Layout from, InFlag(Layout::Create(shape, mesh, from_p, from_o), "--from"));
  MF_ASSIGN_OR_RETURN(Layout to, InFlag(Layout::Create(shape, mesh, to_p, to_o), "--to"));
  MF_ASSIGN_OR_RETURN(RedistributeOptions options, OptionsFromArgs(a, mesh));
  return Request{std::move(a), max_memory_mib, std::move(mesh), std::move(shape), dtype, std::move(from),
                 std::move(to), options};
}

// The plan, with the memory checked before anything is allocated: the plan's bookkeeping, then
// (the plan known) the run.
StatusOr<std::shared_ptr<const Plan>> PlanWithinMemory(const Request& r) {
  const bool execute = r.args.execute;
  MF_RETURN_IF_ERROR(CheckMemory(EstimateBytes(r.from, r.to, r.dtype, nullptr, execute), r.max_memory_mib, execute));
  MF_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, PlanFor(r.from, r.to, r.dtype, r.options));
  if (execute) {
    MF_RETURN_IF_ERROR(CheckMemory(EstimateBytes(r.from, r.to, r.dtype, plan.get(), true), r.max_memory_mib, true));
  }
  return plan;
}

// --json: PlanToJson's keys, then with --execute verified and
// measured_max_bytes_received_per_rank, then with --dump "ranks" (FormatElementJson's values).
std::string JsonReport(const Request& r, const Plan& plan, const ExecResult* exec) {
  JsonWriter w;
  w.BeginObject();
  WritePlanJsonFields(plan, w);
  if (exec != nullptr) {
    w.Key("verified").Bool(exec->verified);
    w.Key("measured_max_bytes_received_per_rank").Int(exec->measured_max_bytes);
    if (r.args.dump) {
      w.Key("ranks").BeginArray();
      for (size_t i = 0; i < exec->locals.size(); ++i) {
        const Tensor& t = exec->locals[i];
        w.BeginObject();
        w.Key("rank").Int(r.mesh.ranks()[i]);
        w.Key("offset").Ints(exec->boxes[i].offset);
        w.Key("local_shape").Ints(t.shape());
        w.Key("data").BeginArray();
        for (int64_t k = 0; k < t.NumElements(); ++k) w.Raw(FormatElementJson(t, k));
        w.EndArray().EndObject();
      }
      w.EndArray();
    }
  }
  w.EndObject();
  return *std::move(w).Finish();  // well formed by construction
}

void PrintText(const Request& r, const Plan& plan, const ExecResult* exec) {
  std::printf("redistribute %s %s: %s -> %s on %s\n", std::string(DTypeName(r.dtype)).c_str(),
              JsonInts(r.shape).c_str(), r.from.PlacementsString().c_str(), r.to.PlacementsString().c_str(),
              r.mesh.ToString().c_str());
  if (r.args.show) std::printf("source:\n%s\ntarget:\n%s\n", DrawLayout(r.from).c_str(), DrawLayout(r.to).c_str());
  std::printf("%s", PlanToText(plan).c_str());
  if (exec == nullptr) return;
  std::printf("executed on %d in-process ranks: verified=%s, measured max bytes received per rank=%lld\n",
              r.mesh.size(), exec->verified ? "true" : "false", static_cast<long long>(exec->measured_max_bytes));
  if (!r.args.dump) return;
  for (size_t i = 0; i < exec->locals.size(); ++i) {
    const Tensor& t = exec->locals[i];
    std::string values;  // every element, exactly (FormatElement)
    for (int64_t k = 0; k < t.NumElements(); ++k) values += (k ? " " : "") + FormatElement(t, k);
    std::printf("  rank %d offset %s local_shape %s data [%s]\n", r.mesh.ranks()[i],
                JsonInts(exec->boxes[i].offset).c_str(), JsonInts(t.shape()).c_str(), values.c_str());
  }
}

int Run(int argc, char** argv) {
  if (HasHelpFlag(argc, argv)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "dtplan: %s\n", s.ToString().c_str());
    return 2;
  };
  StatusOr<Args> args = ParseArgs(argc, argv);
  if (!args.ok()) {
    std::fprintf(stderr, "dtplan: %s\n", args.status().message().c_str());
    return 2;
  }
  StatusOr<Request> request = RequestFromArgs(*std::move(args));
  if (!request.ok()) return fail(request.status());
  const Request& r = *request;
  StatusOr<std::shared_ptr<const Plan>> plan = PlanWithinMemory(r);
  if (!plan.ok()) return fail(plan.status());
  std::optional<ExecResult> exec;
  if (r.args.execute) {
    StatusOr<ExecResult> e = Execute(**plan, r.from, r.to, r.dtype);
    if (!e.ok()) return fail(e.status());
    exec = std::move(*e);
  }
  const ExecResult* executed = exec ? &*exec : nullptr;
  if (r.args.json) {
    std::printf("%s\n", JsonReport(r, **plan, executed).c_str());
  } else {
    PrintText(r, **plan, executed);
  }
  if (exec && !exec->verified) {
    std::fprintf(stderr, "dtplan: verification failed: %s\n", exec->first_error.c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace meshflow

int main(int argc, char** argv) { return meshflow::Run(argc, argv); }
