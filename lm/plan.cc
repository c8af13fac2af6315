#include "meshflow/lm/plan.h"

#include <algorithm>
#include <set>
#include <utility>

#include "meshflow/base/parse.h"
#include "meshflow/base/strings.h"
#include "meshflow/dtensor/placement.h"
#include "meshflow/nn/parallel.h"

namespace meshflow::lm {
namespace {

constexpr std::string_view kPlanNames[] = {"ddp", "zero1", "fsdp", "tp", "fsdp+tp"};

// The mesh dims a plan uses.
std::vector<std::string> PlanDims(const PlanKind& plan) {
  if (std::holds_alternative<TpPlan>(plan)) return {"tp"};
  if (std::holds_alternative<FsdpTpPlan>(plan)) return {"dp", "tp"};
  return {"dp"};
}

bool UsesTp(const PlanKind& plan) { return std::holds_alternative<TpPlan>(plan) || std::holds_alternative<FsdpTpPlan>(plan); }

}  // namespace

std::string_view PlanName(const PlanKind& plan) { return kPlanNames[plan.index()]; }

StatusOr<PlanKind> ParsePlan(std::string_view name) {
  if (name == "ddp") return PlanKind(DdpPlan{});
  if (name == "zero1") return PlanKind(Zero1Plan{});
  if (name == "fsdp") return PlanKind(FsdpPlan{});
  if (name == "tp") return PlanKind(TpPlan{});
  if (name == "fsdp+tp") return PlanKind(FsdpTpPlan{});
  return InvalidArgumentError("unknown --plan '" + std::string(name) + "' (expected one of ddp, zero1, fsdp, tp, fsdp+tp)");
}

int64_t MeshSpec::size() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string MeshSpec::ToString() const {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += names[i] + "=" + std::to_string(shape[i]);
  }
  return s;
}

StatusOr<MeshSpec> ParseMeshSpec(std::string_view text) {
  MeshSpec spec;
  if (text.empty()) return InvalidArgumentError("--mesh is empty (expected e.g. dp=2,tp=2)");
  for (const std::string_view item : SplitString(text, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return InvalidArgumentError("--mesh '" + std::string(text) + "': '" + std::string(item) +
                                  "' is not NAME=SIZE (expected e.g. dp=2,tp=2)");
    }
    const std::string name(item.substr(0, eq));
    if (name != "dp" && name != "tp") {
      return InvalidArgumentError("--mesh '" + std::string(text) + "': unknown dim '" + name + "' (expected dp or tp)");
    }
    if (std::find(spec.names.begin(), spec.names.end(), name) != spec.names.end()) {
      return InvalidArgumentError("--mesh '" + std::string(text) + "': dim '" + name + "' given twice");
    }
    StatusOr<int64_t> n = ParseInt64(item.substr(eq + 1), "--mesh");
    if (!n.ok() || *n < 1 || *n > (int64_t{1} << 20)) {
      return InvalidArgumentError("--mesh '" + std::string(text) + "': size of '" + name + "' must be an integer >= 1, got '" +
                                  std::string(item.substr(eq + 1)) + "'");
    }
    spec.names.push_back(name);
    spec.shape.push_back(*n);
  }
  return spec;
}

StatusOr<MeshSpec> ResolveMesh(const PlanKind& plan, const std::optional<MeshSpec>& given, int64_t world_size) {
  const std::string name(PlanName(plan));
  if (!given) {
    if (std::holds_alternative<FsdpTpPlan>(plan)) {
      if (world_size % 2 != 0) {
        return InvalidArgumentError("plan fsdp+tp needs --mesh dp=A,tp=B on a world of " + std::to_string(world_size) +
                                    " ranks (the default dp=" + "N/2,tp=2 needs an even world)");
      }
      return MeshSpec{{world_size / 2, 2}, {"dp", "tp"}};
    }
    return MeshSpec{{world_size}, {PlanDims(plan)[0]}};
  }
  if (given->size() != world_size) {
    return InvalidArgumentError("--mesh " + given->ToString() + " has " + std::to_string(given->size()) +
                                " ranks but the world has " + std::to_string(world_size));
  }
  const std::vector<std::string> need = PlanDims(plan);
  for (const std::string& d : need) {
    if (std::find(given->names.begin(), given->names.end(), d) == given->names.end()) {
      return InvalidArgumentError("plan " + name + " needs mesh dim '" + d + "', --mesh is " + given->ToString());
    }
  }
  for (const std::string& d : given->names) {
    if (std::find(need.begin(), need.end(), d) == need.end()) {
      return InvalidArgumentError("plan " + name + " does not use mesh dim '" + d + "' of --mesh " + given->ToString() +
                                  " (use fsdp+tp for dp and tp together)");
    }
  }
  return *given;
}

StatusOr<AppliedPlan> ApplyPlan(const PlanKind& plan, Gpt& model, RankContext& ctx) {
  const DeviceMesh& mesh = ctx.mesh();
  AppliedPlan out;
  const GptConfig& c = model.config();
  if (UsesTp(plan)) {
    StatusOr<int> tp_index = mesh.DimIndex("tp");
    if (!tp_index.ok()) return InvalidArgumentError("plan " + std::string(PlanName(plan)) + " needs a mesh dim 'tp'");
    const int tp_dim = *tp_index;
    const int64_t tp = mesh.shape()[static_cast<size_t>(tp_dim)];
    if (c.heads % tp != 0) {
      return InvalidArgumentError("plan " + std::string(PlanName(plan)) + ": heads " + std::to_string(c.heads) +
                                  " is not divisible by the tp size " + std::to_string(tp));
    }
    if (c.vocab % tp != 0 || c.mlp_hidden % tp != 0) {
      return InvalidArgumentError("plan " + std::string(PlanName(plan)) + ": vocab " + std::to_string(c.vocab) +
                                  " and mlp_hidden " + std::to_string(c.mlp_hidden) + " must be divisible by the tp size " +
                                  std::to_string(tp));
    }
    std::vector<nn::ParallelRule> rules;
    for (int64_t i = 0; i < c.layers; ++i) {
      const std::string h = "h" + std::to_string(i);
      for (const char* p : {".attn.q", ".attn.k", ".attn.v", ".mlp.fc1"}) rules.push_back({h + p, nn::ColwiseParallel{}});
      for (const char* p : {".attn.o", ".mlp.fc2"}) rules.push_back({h + p, nn::RowwiseParallel{}});
    }
    rules.push_back({"head", nn::ColwiseParallel{}});
    MF_RETURN_IF_ERROR(nn::Parallelize(model, "tp", rules, ctx));
  }
  if (std::holds_alternative<FsdpPlan>(plan) || std::holds_alternative<FsdpTpPlan>(plan)) {
    MF_RETURN_IF_ERROR(nn::Parallelize(model, "dp", {{"", nn::Fsdp{}}}, ctx));
  }
  const std::vector<nn::NamedParameter> params = model.NamedParameters();
  out.state_layouts.assign(params.size(), std::nullopt);
  if (std::holds_alternative<Zero1Plan>(plan)) {
    StatusOr<int> dp_index = mesh.DimIndex("dp");
    if (!dp_index.ok()) return InvalidArgumentError("plan zero1 needs a mesh dim 'dp'");
    const int dp_dim = *dp_index;
    for (size_t i = 0; i < params.size(); ++i) {
      const Layout& pl = params[i].variable.value().layout();
      Placements st = pl.placements();
      st[static_cast<size_t>(dp_dim)] = Shard{0};
      MF_ASSIGN_OR_RETURN(Layout l, Layout::Create(pl.global_shape(), mesh, st));
      out.state_layouts[i] = std::move(l);
    }
  }
  if (!std::holds_alternative<TpPlan>(plan)) out.dp_dims = {"dp"};
  return out;
}

}  // namespace meshflow::lm
