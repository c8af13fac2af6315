#include "meshflow/examples/graph_demo.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "meshflow/base/cli.h"
#include "meshflow/base/strings.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/collectives/mpi/mpi_communicator.h"
#include "meshflow/collectives/threads/threads_world.h"

namespace meshflow::examples {
namespace {

// What one rank found; combined over the world (max / sum).
struct RankResult {
  double max_abs_error = 0;
  double max_tolerance_ratio = 0;  // max over outputs of error / tolerance (<= 1 passes)
  double output_failures = 0;      // outputs whose error exceeds the tolerance (or bad layouts)
  double byte_failures = 0;        // 1 when the bytes received differ from the modelled bytes
};

std::string Ints(const std::vector<int>& v, const DeviceMesh& mesh) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "x" : "") + mesh.DimName(v[i]);
  return s;
}

std::string CollectivesText(const Program& p) {
  std::string out;
  int index = 0;
  for (const ProgramStep& step : p.steps) {
    ++index;
    const auto* r = std::get_if<RedistributeStep>(&step);
    if (r == nullptr) continue;
    for (const PlanStep& s : r->plan->steps) {
      if (IsLocalStep(s.kind)) continue;
      out += "  step " + std::to_string(index) + ": " + std::string(StepKindName(s.kind)) + " over " +
             Ints(s.mesh_dims, p.graph.mesh()) + " of " + p.graph.value(r->value).name + " (" +
             s.from.PlacementsString() + " -> " + s.to.PlacementsString() + "), " + std::to_string(s.bytes_per_rank) +
             " B received by the busiest rank, " + FixedString(s.modelled_us, 3) + " us\n";
    }
  }
  return out.empty() ? "  (none)\n" : out;
}

// One rank: execute and compare. `world` is this rank's world communicator.
Status RunRank(const Program& p, const std::vector<Tensor>& globals, const std::vector<Tensor>& reference,
               const CostReport& report, Communicator& world, RankContext& ctx, RankResult& out) {
  MF_ASSIGN_OR_RETURN(std::vector<DTensor> inputs, DistributeInputs(p, globals, world.world_rank()));
  const int64_t before = world.counters().bytes_received;
  MF_ASSIGN_OR_RETURN(std::vector<DTensor> outs, Execute(p, ctx, inputs));
  const int64_t received = world.counters().bytes_received - before;
  MF_ASSIGN_OR_RETURN(int index, p.graph.mesh().IndexOf(world.world_rank()));
  if (received != report.bytes_received_per_rank[static_cast<size_t>(index)]) {
    std::fprintf(stderr, "rank %d: received %lld bytes, modelled %lld\n", world.world_rank(),
                 static_cast<long long>(received),
                 static_cast<long long>(report.bytes_received_per_rank[static_cast<size_t>(index)]));
    out.byte_failures = 1;
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(outs[i], ctx));
    const Tensor& want = reference[static_cast<size_t>(p.graph.outputs()[i])];
    if (!(outs[i].layout() == p.output_layouts[i]) || full.shape() != want.shape()) {
      out.output_failures += 1;
      continue;
    }
    double scale = 0, err = 0;
    for (int64_t e = 0; e < want.NumElements(); ++e) {
      scale = std::max(scale, std::abs(want.GetAsDouble(e)));
      const double d = std::abs(full.GetAsDouble(e) - want.GetAsDouble(e));
      err = std::isnan(d) ? INFINITY : std::max(err, d);
    }
    const double tol = 1e-4 * (1 + scale);
    out.max_abs_error = std::max(out.max_abs_error, err);
    out.max_tolerance_ratio = std::max(out.max_tolerance_ratio, err / tol);
    if (!(err <= tol)) out.output_failures += 1;
  }
  return Status::Ok();
}

void Combine(RankResult& into, const RankResult& r) {
  into.max_abs_error = std::max(into.max_abs_error, r.max_abs_error);
  into.max_tolerance_ratio = std::max(into.max_tolerance_ratio, r.max_tolerance_ratio);
  into.output_failures += r.output_failures;
  into.byte_failures += r.byte_failures;
}

struct Setup {
  Program program;
  std::vector<Tensor> globals;
  std::vector<Tensor> reference;
  CostReport report;
  std::string structure_failure;
};

StatusOr<Setup> Prepare(const std::string& name, const BuildFn& build, const CheckFn& check, const DeviceMesh& mesh,
                        const std::string& backend, bool print) {
  MF_ASSIGN_OR_RETURN(Graph graph, build(mesh));
  MF_ASSIGN_OR_RETURN(Program program, Compile(graph));
  std::vector<Tensor> globals;
  for (size_t i = 0; i < graph.inputs().size(); ++i) {
    const Value& v = graph.value(graph.inputs()[i]);
    globals.push_back(DemoTensor(v.dtype, v.shape, static_cast<int>(i) + 1));
  }
  MF_ASSIGN_OR_RETURN(std::vector<Tensor> reference, EvaluateReference(graph, globals));
  CostReport report = ReportCost(program);
  std::string structure = check(program);
  if (print) {
    std::printf("meshflow %s: %s backend, %s\n\n%s\n", name.c_str(), backend.c_str(), mesh.ToString().c_str(),
                graph.ToString().c_str());
    std::printf("compiled %s\n", ProgramToText(program).c_str());
    std::printf("collectives inserted:\n%s\n", CollectivesText(program).c_str());
    std::printf("structure check: %s\n", structure.empty() ? "OK" : ("FAILED: " + structure).c_str());
  }
  return Setup{std::move(program), std::move(globals), std::move(reference), std::move(report), std::move(structure)};
}

int Report(const RankResult& r, const std::string& structure_failure, int world_size) {
  int passed = 0, failed = 0;
  (structure_failure.empty() ? passed : failed) += 1;
  (r.output_failures == 0 ? passed : failed) += 1;
  (r.byte_failures == 0 ? passed : failed) += 1;
  std::printf("executed on %d ranks: max abs error %.3g vs single-rank reference (%.2g of the tolerance) %s\n",
              world_size, r.max_abs_error, r.max_tolerance_ratio, r.output_failures == 0 ? "OK" : "MISMATCH");
  std::printf("bytes received per rank == modelled: %s\n", r.byte_failures == 0 ? "OK" : "MISMATCH");
  std::printf("checks: %d passed, %d failed\n", passed, failed);
  if (failed == 0) std::printf("all checks passed\n");
  std::fflush(stdout);
  return failed == 0 ? 0 : 1;
}

int RunThreads(const std::string& name, const BuildFn& build, const CheckFn& check) {
  auto mesh = DeviceMesh::Create({2, 2}, {"dp", "tp"});
  if (!mesh.ok()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), mesh.status().ToString().c_str());
    return 1;
  }
  StatusOr<Setup> setup = Prepare(name, build, check, *mesh, "threads", true);
  if (!setup.ok()) {
    std::fprintf(stderr, "%s failed: %s\n", name.c_str(), setup.status().ToString().c_str());
    return 1;
  }
  auto world = ThreadWorld::Create(mesh->size());
  if (!world.ok()) return 1;
  std::mutex mu;
  RankResult total;
  const Status run = (*world)->Run([&](Communicator& comm) -> Status {
    MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(comm, *mesh));
    RankResult mine;
    MF_RETURN_IF_ERROR(RunRank(setup->program, setup->globals, setup->reference, setup->report, comm, ctx, mine));
    std::lock_guard<std::mutex> lock(mu);
    Combine(total, mine);
    return Status::Ok();
  });
  if (!run.ok()) {
    std::fprintf(stderr, "%s failed: %s\n", name.c_str(), run.ToString().c_str());
    return 1;
  }
  return Report(total, setup->structure_failure, mesh->size());
}

int RunMpi(const std::string& name, const BuildFn& build, const CheckFn& check) {
  MpiFinalizeGuard finalize;
  StatusOr<std::shared_ptr<Communicator>> world = MpiWorld();
  if (!world.ok()) MpiAbort(world.status());
  const int n = (*world)->size();
  const bool root = (*world)->rank() == 0;
  if (n < 2 || n % 2 != 0) MpiAbort(InvalidArgumentError("mpi backend needs an even number of processes >= 2"));
  auto mesh = DeviceMesh::Create({2, n / 2}, {"dp", "tp"});
  if (!mesh.ok()) MpiAbort(mesh.status());
  StatusOr<Setup> setup = Prepare(name, build, check, *mesh, "mpi", root);
  if (!setup.ok()) MpiAbort(setup.status());
  auto ctx = RankContext::Create(*world, *mesh);
  if (!ctx.ok()) MpiAbort(ctx.status());
  RankResult r;
  const Status s = RunRank(setup->program, setup->globals, setup->reference, setup->report, **world, *ctx, r);
  if (!s.ok()) MpiAbort(s);
  // Combine over the world: max of the errors, sum of the failures.
  double maxes[2] = {r.max_abs_error, r.max_tolerance_ratio};
  double sums[2] = {r.output_failures, r.byte_failures};
  Status c = (*world)->AllReduce(maxes, maxes, 2, DType::kF64, ReduceOp::kMax);
  if (c.ok()) c = (*world)->AllReduce(sums, sums, 2, DType::kF64, ReduceOp::kSum);
  if (!c.ok()) MpiAbort(c);
  const RankResult total{maxes[0], maxes[1], sums[0], sums[1]};
  if (root) return Report(total, setup->structure_failure, n);
  const bool ok = total.output_failures == 0 && total.byte_failures == 0 && setup->structure_failure.empty();
  return ok ? 0 : 1;
}

}  // namespace

Tensor DemoTensor(DType dtype, const std::vector<int64_t>& shape, int seed, double scale) {
  Tensor t = Tensor::Zeros(dtype, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    t.SetFromDouble(i, scale * static_cast<double>((i * 37 + seed * 11) % 23 - 11) / 22.0);
  }
  return t;
}

int RunDemo(const std::string& name, const BuildFn& build, const CheckFn& check, int argc, char** argv) {
  const std::string usage = "usage: " + name + " [--backend threads|mpi]\n"
                            "\n"
                            "Compiles the example's annotated graph, runs it on a (dp x tp) mesh and checks it\n"
                            "against the single-rank reference.\n"
                            "\n"
                            "flags:\n"
                            "  --backend B   one of threads (default: an in-process 2x2 world), mpi (start\n"
                            "                under mpirun with an even number of processes: a 2 x (n/2) mesh)\n"
                            "  -h, --help    print this help and exit\n"
                            "\n"
                            "exit codes: 0 every check passed, 1 a check or a step failed, 2 bad input (message\n"
                            "on stderr).\n";
  if (HasHelpFlag(argc, argv)) {
    std::fputs(usage.c_str(), stdout);
    return 0;
  }
  std::string backend = "threads";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    Status bad;
    if (arg == "--backend") {
      if (i + 1 < argc) {
        backend = argv[++i];
      } else {
        bad = InvalidArgumentError("--backend needs a value; see '" + name + " --help'");
      }
    } else if (arg.rfind("--backend=", 0) == 0) {
      backend = arg.substr(std::strlen("--backend="));
    } else {
      bad = UnknownArgumentError(name, arg);
    }
    if (!bad.ok()) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(), bad.message().c_str());
      return 2;
    }
  }
  StatusOr<size_t> kind = ParseChoice("--backend", backend, {"threads", "mpi"});
  if (!kind.ok()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), kind.status().message().c_str());
    return 2;
  }
  return *kind == 0 ? RunThreads(name, build, check) : RunMpi(name, build, check);
}

}  // namespace meshflow::examples
