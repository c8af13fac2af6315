#include "meshflow/compiler/program.h"

#include <utility>

#include "meshflow/base/strings.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/runtime/executor.h"

namespace meshflow {
namespace {

std::string Pad(std::string s, size_t w) {
  if (s.size() < w) s.append(w - s.size(), ' ');
  return s;
}

int CountCollectives(const Plan& plan) {
  int n = 0;
  for (const PlanStep& s : plan.steps) n += IsLocalStep(s.kind) ? 0 : 1;
  return n;
}

std::string TensorDims(const PlanStep& s) {
  if (s.kind == StepKind::kAllToAll) return std::to_string(s.tensor_dim) + "->" + std::to_string(s.dst_tensor_dim);
  return s.tensor_dim < 0 ? "-" : std::to_string(s.tensor_dim);
}

const DTensor* FindLayout(const std::vector<DTensor>& copies, const Layout& layout) {
  for (const DTensor& d : copies) {
    if (d.layout() == layout) return &d;
  }
  return nullptr;
}

// The last step reading each value (index into program.steps; -1: never read); outputs are read
// at steps.size() (kept to the end). Execute releases copies with it and ReportMemory mirrors it.
std::vector<int> LastUses(const Program& program) {
  const Graph& g = program.graph;
  std::vector<int> last_use(g.values().size(), -1);
  for (size_t i = 0; i < program.steps.size(); ++i) {
    if (const OpStep* op = std::get_if<OpStep>(&program.steps[i])) {
      for (ValueId v : op->operands) last_use[static_cast<size_t>(v)] = static_cast<int>(i);
    } else {
      last_use[static_cast<size_t>(std::get<RedistributeStep>(program.steps[i]).value)] = static_cast<int>(i);
    }
  }
  for (ValueId v : g.outputs()) last_use[static_cast<size_t>(v)] = static_cast<int>(program.steps.size());
  return last_use;
}

// Local bytes of `layout` at every rank, mesh().ranks() order.
std::vector<int64_t> LocalBytes(const Layout& layout, DType dtype) {
  std::vector<int64_t> out;
  for (const Box& b : layout.AllLocalBoxes()) out.push_back(b.NumElements() * DTypeSize(dtype));
  return out;
}

}  // namespace

StatusOr<Program> Compile(const Graph& graph, const PropagationOptions& options) {
  MF_ASSIGN_OR_RETURN(Propagation prop, Propagate(graph, options));
  Program p{graph, prop, options, {}, {}, {}};
  RedistributeOptions ropts;
  ropts.topology = options.topology;
  // Layouts in which each value is materialized so far.
  std::vector<std::vector<Layout>> available(graph.values().size());
  auto has = [&](ValueId v, const Layout& l) {
    for (const Layout& a : available[static_cast<size_t>(v)]) {
      if (a == l) return true;
    }
    return false;
  };
  auto add_redistribute = [&](ValueId v, const Layout& from, const Layout& to, bool for_annotation) -> Status {
    StatusOr<std::shared_ptr<const Plan>> plan = PlanFor(from, to, graph.value(v).dtype, ropts);
    if (!plan.ok()) {
      return plan.status().WithContext("redistribute '" + graph.value(v).name + "' " + from.PlacementsString() +
                                       " -> " + to.PlacementsString());
    }
    p.steps.push_back(RedistributeStep{v, from, to, *plan, for_annotation});
    available[static_cast<size_t>(v)].push_back(to);
    return Status::Ok();
  };
  for (ValueId v : graph.inputs()) {
    p.input_layouts.push_back(prop.values[static_cast<size_t>(v)]);
    available[static_cast<size_t>(v)].push_back(prop.values[static_cast<size_t>(v)]);
  }
  // Nodes no output depends on are dead code (e.g. the gradient of a graph input that a VJP
  // computes with the gradients of the params): no step runs them.
  const std::vector<bool> live = graph.DependedOnBy(graph.outputs());
  for (size_t n = 0; n < graph.nodes().size(); ++n) {
    const Node& node = graph.nodes()[n];
    const NodeSharding& ns = prop.nodes[n];
    if (!live[static_cast<size_t>(node.result)]) continue;
    for (size_t i = 0; i < node.operands.size(); ++i) {
      const ValueId v = node.operands[i];
      if (!has(v, ns.operands[i])) {
        MF_RETURN_IF_ERROR(add_redistribute(v, prop.values[static_cast<size_t>(v)], ns.operands[i], false));
      }
    }
    MF_ASSIGN_OR_RETURN(ShardingRule rule, NodeRule(graph, static_cast<int>(n)));
    StatusOr<StrategyChoice> choice = ConcretizeStrategy(graph, static_cast<int>(n), rule, ns.strategy);
    if (!choice.ok()) return choice.status().WithContext("node " + std::to_string(n) + " '" + graph.value(node.result).name + "'");
    p.steps.push_back(OpStep{static_cast<int>(n), node.op, node.operands, node.result, ns.strategy, ns.operands,
                             ns.result, std::make_shared<const StrategyChoice>(std::move(*choice))});
    available[static_cast<size_t>(node.result)].push_back(ns.result);
    const Layout& final_layout = prop.values[static_cast<size_t>(node.result)];
    if (!(final_layout == ns.result)) {
      MF_RETURN_IF_ERROR(add_redistribute(node.result, ns.result, final_layout, true));
    }
  }
  for (ValueId v : graph.outputs()) p.output_layouts.push_back(prop.values[static_cast<size_t>(v)]);
  return p;
}

CostReport ReportCost(const Program& program) {
  CostReport r;
  r.bytes_received_per_rank.assign(static_cast<size_t>(program.graph.mesh().size()), 0);
  for (const ProgramStep& step : program.steps) {
    if (std::holds_alternative<OpStep>(step)) {
      ++r.ops;
      continue;
    }
    const Plan& plan = *std::get<RedistributeStep>(step).plan;
    ++r.redistributions;
    r.modelled_us += plan.modelled_us;
    for (const PlanStep& s : plan.steps) {
      if (IsLocalStep(s.kind)) continue;
      ++r.collectives;
      ++r.collectives_by_kind[std::string(StepKindName(s.kind))];
    }
    for (size_t i = 0; i < plan.bytes_received_per_rank.size() && i < r.bytes_received_per_rank.size(); ++i) {
      r.bytes_received_per_rank[i] += plan.bytes_received_per_rank[i];
    }
  }
  for (int64_t b : r.bytes_received_per_rank) r.max_bytes_received_per_rank = std::max(r.max_bytes_received_per_rank, b);
  return r;
}

MemoryReport ReportMemory(const Program& program) {
  const Graph& g = program.graph;
  const size_t n = static_cast<size_t>(g.mesh().size());
  MemoryReport r;
  r.peak_live_bytes_per_rank.assign(n, 0);
  std::vector<int64_t> live(n, 0);
  auto add = [&](const std::vector<int64_t>& bytes, int sign) {
    for (size_t k = 0; k < n; ++k) live[k] += sign * bytes[k];
  };
  auto mark_peak = [&] {
    for (size_t k = 0; k < n; ++k) r.peak_live_bytes_per_rank[k] = std::max(r.peak_live_bytes_per_rank[k], live[k]);
  };
  // The caller's inputs (held for the whole call), then the copies the program makes.
  for (size_t i = 0; i < g.inputs().size(); ++i) add(LocalBytes(program.input_layouts[i], g.value(g.inputs()[i]).dtype), 1);
  mark_peak();
  const std::vector<int> last_use = LastUses(program);
  std::vector<std::vector<std::vector<int64_t>>> copies(g.values().size());
  for (size_t i = 0; i < program.steps.size(); ++i) {
    ValueId v = -1;
    const Layout* made = nullptr;
    if (const OpStep* op = std::get_if<OpStep>(&program.steps[i])) {
      v = op->result;
      made = &op->result_layout;
    } else {
      const RedistributeStep& rs = std::get<RedistributeStep>(program.steps[i]);
      v = rs.value;
      made = &rs.to;
    }
    std::vector<int64_t> bytes = LocalBytes(*made, g.value(v).dtype);
    add(bytes, 1);
    copies[static_cast<size_t>(v)].push_back(std::move(bytes));
    mark_peak();
    for (size_t u = 0; u < copies.size(); ++u) {
      if (last_use[u] != static_cast<int>(i)) continue;
      for (const std::vector<int64_t>& c : copies[u]) add(c, -1);
      copies[u].clear();
    }
  }
  for (int64_t b : r.peak_live_bytes_per_rank) r.max_peak_live_bytes = std::max(r.max_peak_live_bytes, b);
  return r;
}

std::string MemoryReportToText(const MemoryReport& r) {
  std::string out = "peak live bytes per rank: max " + std::to_string(r.max_peak_live_bytes) + " [";
  for (size_t i = 0; i < r.peak_live_bytes_per_rank.size(); ++i) {
    out += (i ? "," : "") + std::to_string(r.peak_live_bytes_per_rank[i]);
  }
  return out + "]\n";
}

std::string CostReportToText(const CostReport& r) {
  std::string kinds;
  for (const auto& [kind, count] : r.collectives_by_kind) {
    kinds += (kinds.empty() ? "" : ", ") + kind + " x" + std::to_string(count);
  }
  std::string out = "cost: " + FixedString(r.modelled_us, 3) + " us modelled, " + std::to_string(r.ops) + " ops, " +
                    std::to_string(r.redistributions) + (r.redistributions == 1 ? " redistribution, " : " redistributions, ") +
                    std::to_string(r.collectives) + (r.collectives == 1 ? " collective" : " collectives") +
                    (kinds.empty() ? "" : " (" + kinds + ")") + ", max " + std::to_string(r.max_bytes_received_per_rank) +
                    " B received per rank\n";
  out += "bytes received per rank: [";
  for (size_t i = 0; i < r.bytes_received_per_rank.size(); ++i) {
    out += (i ? "," : "") + std::to_string(r.bytes_received_per_rank[i]);
  }
  return out + "]\n";
}

std::string ProgramToText(const Program& program) {
  const Graph& g = program.graph;
  const CostReport report = ReportCost(program);
  std::string out = "program on " + g.mesh().ToString() + ": " + std::to_string(report.ops) + " ops, " +
                    std::to_string(report.redistributions) +
                    (report.redistributions == 1 ? " redistribution\n" : " redistributions\n");
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const ValueId v = g.inputs()[i];
    out += "  " + std::string(ValueKindName(g.value(v).kind)) + " " + g.value(v).name + ": " + g.TypeString(v) + "  " +
           program.input_layouts[i].PlacementsString() + (g.annotation(v) ? "" : "  (inferred)") + "\n";
  }
  int index = 0;
  for (const ProgramStep& step : program.steps) {
    ++index;
    const std::string num = (index < 10 ? "   " : "  ") + std::to_string(index) + ". ";
    if (const OpStep* op = std::get_if<OpStep>(&step)) {
      std::string args;
      for (size_t i = 0; i < op->operands.size(); ++i) args += (i ? ", " : "") + g.value(op->operands[i]).name;
      out += num + Pad(g.value(op->result).name + " = " + op->op.ToString() + "(" + args + ")", 34) + " " +
             Pad(g.TypeString(op->result), 16) + " " + op->strategy.ToString() + "\n";
      continue;
    }
    const RedistributeStep& r = std::get<RedistributeStep>(step);
    const Plan& plan = *r.plan;
    const int colls = CountCollectives(plan);
    out += num + "redistribute " + g.value(r.value).name + ": " + r.from.PlacementsString() + " -> " +
           r.to.PlacementsString() + (r.for_annotation ? " (annotation)" : "") + "  " + std::to_string(colls) +
           (colls == 1 ? " collective, " : " collectives, ") + std::to_string(plan.max_bytes_received_per_rank) +
           " B/rank, " + FixedString(plan.modelled_us, 3) + " us\n";
    for (const PlanStep& s : plan.steps) {
      out += "         " + Pad(std::string(StepKindName(s.kind)), 15) + " mesh_dims=" + Pad(ListString(s.mesh_dims), 6) +
             " tensor_dim=" + Pad(TensorDims(s), 5) + " bytes/rank=" + Pad(std::to_string(s.bytes_per_rank), 8) + " " +
             FixedString(s.modelled_us, 3) + " us  " + s.from.PlacementsString() + " -> " + s.to.PlacementsString() + "\n";
    }
  }
  out += "  outputs:";
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    out += (i ? "," : "") + std::string(" ") + g.value(g.outputs()[i]).name + " " + program.output_layouts[i].PlacementsString();
  }
  out += "\n";
  return out + CostReportToText(report);
}

StatusOr<std::vector<DTensor>> Execute(const Program& program, RankContext& ctx, std::span<const DTensor> inputs) {
  std::vector<const DTensor*> ptrs;
  ptrs.reserve(inputs.size());
  for (const DTensor& x : inputs) ptrs.push_back(&x);
  return ExecuteBorrowed(program, ctx, ptrs);
}

StatusOr<std::vector<DTensor>> ExecuteBorrowed(const Program& program, RankContext& ctx,
                                               std::span<const DTensor* const> inputs) {
  const Graph& g = program.graph;
  if (!(ctx.mesh() == g.mesh())) {
    return InvalidArgumentError("execute: ctx on " + ctx.mesh().ToString() + ", program on " + g.mesh().ToString());
  }
  if (inputs.size() != g.inputs().size()) {
    return InvalidArgumentError("execute: expected " + std::to_string(g.inputs().size()) + " inputs, got " +
                                std::to_string(inputs.size()));
  }
  // Copies this call made, and the caller's inputs used in place (never copied).
  std::vector<std::vector<DTensor>> avail(g.values().size());
  std::vector<const DTensor*> borrowed(g.values().size(), nullptr);
  auto find = [&](ValueId v, const Layout& layout) -> const DTensor* {
    const DTensor* b = borrowed[static_cast<size_t>(v)];
    if (b != nullptr && b->layout() == layout) return b;
    return FindLayout(avail[static_cast<size_t>(v)], layout);
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ValueId v = g.inputs()[i];
    if (inputs[i] == nullptr) {
      return InvalidArgumentError("execute: input '" + g.value(v).name + "' is null");
    }
    const DTensor& x = *inputs[i];
    if (x.global_shape() != g.value(v).shape || x.dtype() != g.value(v).dtype) {
      std::string shape;
      for (int64_t s : x.global_shape()) shape += (shape.empty() ? "" : ",") + std::to_string(s);
      return InvalidArgumentError("execute: input '" + g.value(v).name + "' is " + std::string(DTypeName(x.dtype())) +
                                  "[" + shape + "], expected " + g.TypeString(v));
    }
    if (x.layout() == program.input_layouts[i]) {
      borrowed[static_cast<size_t>(v)] = &x;
    } else {
      RedistributeOptions ropts;
      ropts.topology = program.options.topology;
      StatusOr<DTensor> moved = Redistribute(x, program.input_layouts[i], ctx, ropts);
      if (!moved.ok()) return moved.status().WithContext("execute: input '" + g.value(v).name + "'");
      avail[static_cast<size_t>(v)].push_back(std::move(*moved));
    }
  }
  // Per step: the values whose last reader it is (their copies are freed right after it).
  const std::vector<int> last_use = LastUses(program);
  std::vector<std::vector<ValueId>> dies_after(program.steps.size());
  for (size_t v = 0; v < last_use.size(); ++v) {
    if (last_use[v] >= 0 && last_use[v] < static_cast<int>(program.steps.size())) {
      dies_after[static_cast<size_t>(last_use[v])].push_back(static_cast<ValueId>(v));
    }
  }
  auto release = [&](int step_index) {
    for (ValueId v : dies_after[static_cast<size_t>(step_index)]) {
      avail[static_cast<size_t>(v)].clear();
      borrowed[static_cast<size_t>(v)] = nullptr;
    }
  };
  int index = 0;
  for (const ProgramStep& step : program.steps) {
    ++index;
    if (const OpStep* op = std::get_if<OpStep>(&step)) {
      const std::string where = "step " + std::to_string(index) + " (" + g.value(op->result).name + " = " +
                                op->op.ToString() + ")";
      std::vector<const DTensor*> args;
      for (size_t i = 0; i < op->operands.size(); ++i) {
        const DTensor* d = find(op->operands[i], op->operand_layouts[i]);
        if (d == nullptr) return InternalError(where + ": operand '" + g.value(op->operands[i]).name + "' not in " +
                                               op->operand_layouts[i].PlacementsString());
        args.push_back(d);
      }
      StatusOr<DTensor> out = RunStrategy(op->op, *op->choice, args, ctx);
      if (!out.ok()) return out.status().WithContext(where);
      avail[static_cast<size_t>(op->result)].push_back(std::move(*out));
      release(index - 1);
      continue;
    }
    const RedistributeStep& r = std::get<RedistributeStep>(step);
    const std::string where = "step " + std::to_string(index) + " (redistribute '" + g.value(r.value).name + "')";
    const DTensor* src = find(r.value, r.from);
    if (src == nullptr) return InternalError(where + ": value not in " + r.from.PlacementsString());
    Tensor local = src->local();
    const int rank = src->rank();
    Status s = ExecutePlan(*r.plan, ctx, local);
    if (!s.ok()) return s.WithContext(where);
    StatusOr<DTensor> moved = DTensor::FromLocal(std::move(local), r.to, rank);
    if (!moved.ok()) return moved.status().WithContext(where);
    avail[static_cast<size_t>(r.value)].push_back(std::move(*moved));
    release(index - 1);
  }
  // Outputs: this call's copies are moved out (by the last output reading each value and
  // layout); the caller's borrowed inputs, and copies a later output still reads, are copied.
  std::vector<DTensor> outs;
  outs.reserve(g.outputs().size());
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const ValueId v = g.outputs()[i];
    const Layout& layout = program.output_layouts[i];
    const DTensor* d = find(v, layout);
    if (d == nullptr) return InternalError("execute: output '" + g.value(v).name + "' not materialized");
    bool read_later = false;
    for (size_t j = i + 1; j < g.outputs().size(); ++j) {
      read_later = read_later || (g.outputs()[j] == v && program.output_layouts[j] == layout);
    }
    DTensor* own = nullptr;
    if (d != borrowed[static_cast<size_t>(v)] && !read_later) {
      for (DTensor& c : avail[static_cast<size_t>(v)]) {
        if (&c == d) own = &c;
      }
    }
    outs.push_back(own != nullptr ? std::move(*own) : *d);
  }
  return outs;
}

StatusOr<std::vector<DTensor>> ExecuteLocal(const Program& program, RankContext& ctx, std::span<const Tensor> locals) {
  const Graph& g = program.graph;
  if (locals.size() != g.inputs().size()) {
    return InvalidArgumentError("execute: expected " + std::to_string(g.inputs().size()) + " inputs, got " +
                                std::to_string(locals.size()));
  }
  std::vector<DTensor> inputs;
  for (size_t i = 0; i < locals.size(); ++i) {
    StatusOr<DTensor> d = DTensor::FromLocal(locals[i], program.input_layouts[i], ctx.world_rank());
    if (!d.ok()) return d.status().WithContext("execute: input '" + g.value(g.inputs()[i]).name + "'");
    inputs.push_back(std::move(*d));
  }
  return Execute(program, ctx, inputs);
}

StatusOr<std::vector<DTensor>> DistributeInputs(const Program& program, const std::vector<Tensor>& globals, int rank) {
  const Graph& g = program.graph;
  if (globals.size() != g.inputs().size()) {
    return InvalidArgumentError("distribute inputs: expected " + std::to_string(g.inputs().size()) + " tensors, got " +
                                std::to_string(globals.size()));
  }
  std::vector<DTensor> out;
  for (size_t i = 0; i < globals.size(); ++i) {
    StatusOr<DTensor> d = Distribute(globals[i], program.input_layouts[i], rank);
    if (!d.ok()) return d.status().WithContext("distribute input '" + g.value(g.inputs()[i]).name + "'");
    out.push_back(std::move(*d));
  }
  return out;
}

}  // namespace meshflow
