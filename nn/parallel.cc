#include "meshflow/nn/parallel.h"

#include <string>
#include <utility>

#include "meshflow/runtime/redistribute.h"

namespace meshflow::nn {
namespace {

struct Target {
  Variable* param;
  std::string name;
  Placements placements;
};

Target* FindOrAdd(std::vector<Target>& targets, Variable* v, const std::string& name) {
  for (Target& t : targets) {
    if (t.param == v) return &t;
  }
  targets.push_back(Target{v, name, v->value().layout().placements()});
  return &targets.back();
}

// Sets `p` on mesh dim `d` of the param.
void Set(std::vector<Target>& targets, Variable& v, const std::string& name, int d, Placement p) {
  if (!v.defined()) return;
  FindOrAdd(targets, &v, name)->placements[static_cast<size_t>(d)] = p;
}

std::string Prefix(const std::string& path) { return path.empty() ? "" : path + "."; }

}  // namespace

std::string_view StyleName(const ParallelStyle& style) {
  switch (style.index()) {
    case 0: return "ColwiseParallel";
    case 1: return "RowwiseParallel";
    case 2: return "SequenceParallel";
    default: return "Fsdp";
  }
}

Status Parallelize(Module& module, std::string_view mesh_dim_name, const std::vector<ParallelRule>& plan,
                   RankContext& ctx) {
  const DeviceMesh& mesh = ctx.mesh();
  int d = -1;
  for (int i = 0; i < mesh.ndim(); ++i) {
    if (mesh.DimName(i) == mesh_dim_name) d = i;
  }
  if (d < 0) {
    std::string names;
    for (int i = 0; i < mesh.ndim(); ++i) names += (i ? ", " : "") + mesh.DimName(i);
    return InvalidArgumentError("Parallelize: mesh dim '" + std::string(mesh_dim_name) + "' is not a dim of mesh " +
                                mesh.ToString() + " (dims: " + names + ")");
  }
  for (const NamedParameter& p : module.NamedParameters()) {
    if (!(p.variable.value().layout().mesh() == mesh)) {
      return InvalidArgumentError("Parallelize: param '" + p.name + "' is on mesh " +
                                  p.variable.value().layout().mesh().ToString() +
                                  " but the communicators are for mesh " + mesh.ToString());
    }
  }
  std::vector<Target> targets;
  std::vector<std::pair<Module*, SequenceParallel>> sequence;
  for (const ParallelRule& rule : plan) {
    StatusOr<Module*> found = module.Submodule(rule.submodule);
    if (!found.ok()) return InvalidArgumentError("Parallelize: " + found.status().message());
    Module* m = *found;
    const std::string prefix = Prefix(rule.submodule);
    auto misfit = [&](std::string_view fits) {
      return InvalidArgumentError("Parallelize: " + std::string(StyleName(rule.style)) + " applies to " +
                                  std::string(fits) + ", but '" + rule.submodule + "' is a " +
                                  std::string(m->type_name()));
    };
    if (std::holds_alternative<ColwiseParallel>(rule.style) || std::holds_alternative<RowwiseParallel>(rule.style)) {
      const bool col = std::holds_alternative<ColwiseParallel>(rule.style);
      if (auto* lin = dynamic_cast<Linear*>(m)) {
        Set(targets, lin->weight(), prefix + "weight", d, Shard{col ? 1 : 0});
        Set(targets, lin->bias(), prefix + "bias", d, col ? Placement(Shard{0}) : Placement(Replicate{}));
      } else if (auto* emb = dynamic_cast<Embedding*>(m)) {
        Set(targets, emb->weight(), prefix + "weight", d, Shard{col ? 1 : 0});
      } else {
        return misfit("Linear or Embedding");
      }
    } else if (const auto* sp = std::get_if<SequenceParallel>(&rule.style)) {
      if (sp->sequence_dim < 0) {
        return InvalidArgumentError("Parallelize: SequenceParallel sequence_dim " + std::to_string(sp->sequence_dim) +
                                    " must be >= 0");
      }
      if (auto* ln = dynamic_cast<LayerNorm*>(m)) {
        Set(targets, ln->weight(), prefix + "weight", d, Replicate{});
        Set(targets, ln->bias(), prefix + "bias", d, Replicate{});
      } else if (auto* rms = dynamic_cast<RmsNorm*>(m)) {
        Set(targets, rms->weight(), prefix + "weight", d, Replicate{});
      } else {
        return misfit("LayerNorm or RmsNorm");
      }
      sequence.emplace_back(m, *sp);
    } else {  // Fsdp
      for (const NamedParameter& p : m->NamedParameters()) {
        Target* t = FindOrAdd(targets, &p.variable, prefix + p.name);
        const int rank = p.variable.value().layout().tensor_rank();
        if (rank == 0) continue;
        int dim = 0;
        for (int td = 0; td < rank; ++td) {
          bool sharded = false;
          for (int md = 0; md < mesh.ndim(); ++md) {
            if (md != d && IsShard(t->placements[static_cast<size_t>(md)], td)) sharded = true;
          }
          if (!sharded) {
            dim = td;
            break;
          }
        }
        t->placements[static_cast<size_t>(d)] = Shard{dim};
      }
    }
  }
  // Every layout is checked before anything moves.
  std::vector<Layout> layouts;
  for (const Target& t : targets) {
    const Layout& cur = t.param->value().layout();
    StatusOr<Layout> l = Layout::Create(cur.global_shape(), mesh, t.placements);
    if (!l.ok()) return InvalidArgumentError("Parallelize: param '" + t.name + "': " + l.status().message());
    layouts.push_back(std::move(*l));
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    Variable& v = *targets[i].param;
    if (v.value().layout() == layouts[i]) continue;
    MF_ASSIGN_OR_RETURN(DTensor moved, Redistribute(v.value(), layouts[i], ctx));
    *v.mutable_leaf_value() = std::move(moved);
    v.ZeroGrad();
  }
  for (auto& [m, sp] : sequence) m->set_input_placement(d, Shard{sp.sequence_dim});
  return Status::Ok();
}

}  // namespace meshflow::nn
