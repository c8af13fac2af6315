#include "meshflow/planner/plan_format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "meshflow/base/json.h"
#include "meshflow/base/strings.h"

namespace meshflow {
namespace {

std::string TensorDims(const PlanStep& s) {
  if (s.kind == StepKind::kAllToAll) return std::to_string(s.tensor_dim) + "->" + std::to_string(s.dst_tensor_dim);
  return s.tensor_dim < 0 ? "-" : std::to_string(s.tensor_dim);
}

std::string Pad(std::string s, size_t w) {
  if (s.size() < w) s.append(w - s.size(), ' ');
  return s;
}

std::string PadLeft(std::string s, size_t w) {
  if (s.size() < w) s.insert(0, w - s.size(), ' ');
  return s;
}

std::string JoinRanks(const std::vector<int>& r) {
  std::string s;
  for (size_t i = 0; i < r.size(); ++i) s += (i ? "," : "") + std::to_string(r[i]);
  return s;
}

}  // namespace

std::string PlanToText(const Plan& plan) {
  std::string out = "plan (" + std::string(PlannerKindName(plan.planner)) + "): " + plan.from.PlacementsString() + " -> " +
                    plan.to.PlacementsString() + " on " + plan.from.mesh().ToString() + " shape ";
  {
    std::string shape = "[";
    for (size_t i = 0; i < plan.from.global_shape().size(); ++i) {
      shape += (i ? "," : "") + std::to_string(plan.from.global_shape()[i]);
    }
    out += shape + "]";
  }
  out += ", " + std::string(DTypeName(plan.dtype)) + ", " + std::to_string(plan.steps.size()) +
         (plan.steps.size() == 1 ? " step\n" : " steps\n");
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PlanStep& s = plan.steps[i];
    out += "  " + std::to_string(i + 1) + ". " + Pad(std::string(StepKindName(s.kind)), 15) + " " +
           Pad("mesh_dims=" + ListString(s.mesh_dims), 16) + " " + Pad("tensor_dim=" + TensorDims(s), 16) + " " +
           Pad("bytes/rank=" + std::to_string(s.bytes_per_rank), 16) + " " + FixedString(s.modelled_us, 3) + " us  " +
           s.from.PlacementsString() + " -> " + s.to.PlacementsString() + "\n";
  }
  out += "total: " + FixedString(plan.modelled_us, 3) + " us, max bytes received per rank " +
         std::to_string(plan.max_bytes_received_per_rank) + ", lower bound ";
  if (plan.lower_bound_bytes_per_rank.has_value()) {
    const int64_t lb = *plan.lower_bound_bytes_per_rank;
    out += std::to_string(lb) + ", ratio ";
    if (lb > 0) {
      out += FixedString(static_cast<double>(plan.max_bytes_received_per_rank) / static_cast<double>(lb), 2);
    } else {
      out += plan.max_bytes_received_per_rank == 0 ? "1.00" : "inf";
    }
  } else {
    out += "n/a (Partial source)";
  }
  out += "\n";
  if (plan.planner == PlannerKind::kOptimal && !plan.proven_optimal) {
    out += "not proven optimal: the search budget ran out after " + std::to_string(plan.search_edges) +
           " edges; best plan found (never worse than greedy)\n";
  }
  return out;
}

void WritePlanJsonFields(const Plan& plan, JsonWriter& w) {
  w.Key("steps").BeginArray();
  for (const PlanStep& s : plan.steps) {
    w.BeginObject();
    w.Key("kind").String(StepKindName(s.kind));
    w.Key("mesh_dims").Ints(s.mesh_dims);
    w.Key("tensor_dim").Int(s.tensor_dim);
    w.Key("bytes_per_rank").Int(s.bytes_per_rank);
    w.EndObject();
  }
  w.EndArray();
  w.Key("modelled_us").Double(plan.modelled_us);
  w.Key("max_bytes_received_per_rank").Int(plan.max_bytes_received_per_rank);
  w.Key("lower_bound_bytes_per_rank");
  if (plan.lower_bound_bytes_per_rank.has_value()) {
    w.Int(*plan.lower_bound_bytes_per_rank);
  } else {
    w.Null();
  }
  w.Key("planner").String(std::string(PlannerKindName(plan.planner)));
  w.Key("proven_optimal").Bool(plan.proven_optimal);
  w.Key("search_edges").Int(plan.search_edges);
}

std::string PlanToJson(const Plan& plan) {
  JsonWriter w;
  w.BeginObject();
  WritePlanJsonFields(plan, w);
  w.EndObject();
  return *std::move(w).Finish();  // well formed by construction
}

std::string DrawLayout(const Layout& layout) {
  const std::vector<Box> boxes = layout.AllLocalBoxes();
  const std::vector<int>& ranks = layout.mesh().ranks();
  const int rank = layout.tensor_rank();
  std::string out = layout.ToString() + "\n";
  bool any_elements = true;
  for (int64_t n : layout.global_shape()) any_elements = any_elements && n > 0;

  if (rank == 0 || rank > 2 || !any_elements) {
    // Distinct blocks with their holders, in first-holder order.
    std::vector<Box> blocks;
    std::vector<std::vector<int>> holders;
    for (size_t i = 0; i < boxes.size(); ++i) {
      if (boxes[i].empty() && rank > 0) continue;
      auto it = std::find(blocks.begin(), blocks.end(), boxes[i]);
      if (it == blocks.end()) {
        blocks.push_back(boxes[i]);
        holders.push_back({ranks[i]});
      } else {
        holders[it - blocks.begin()].push_back(ranks[i]);
      }
    }
    if (blocks.empty()) out += "  (no elements)\n";
    for (size_t b = 0; b < blocks.size(); ++b) {
      out += "  block " + blocks[b].ToString() + ": ranks " + JoinRanks(holders[b]) + "\n";
    }
  } else {
    // Cut points per dim; a rank-1 tensor is one row of columns.
    std::vector<std::vector<int64_t>> cuts(2);
    std::vector<int64_t> extent(2, 1);
    for (int g = 0; g < 2; ++g) {
      const int d = rank == 2 ? g : (g == 1 ? 0 : -1);
      std::set<int64_t> c{0};
      if (d >= 0) {
        extent[g] = layout.global_shape()[d];
        c.insert(extent[g]);
        for (const Box& b : boxes) {
          if (b.empty()) continue;
          c.insert(b.offset[d]);
          c.insert(b.offset[d] + b.shape[d]);
        }
      } else {
        c.insert(1);
      }
      cuts[g].assign(c.begin(), c.end());
    }
    const size_t nrows = cuts[0].size() - 1, ncols = cuts[1].size() - 1;
    std::vector<std::vector<std::string>> label(nrows, std::vector<std::string>(ncols));
    for (size_t r = 0; r < nrows; ++r) {
      for (size_t c = 0; c < ncols; ++c) {
        std::vector<int64_t> index = rank == 2 ? std::vector<int64_t>{cuts[0][r], cuts[1][c]}
                                               : std::vector<int64_t>{cuts[1][c]};
        std::vector<int> holders;
        for (size_t i = 0; i < boxes.size(); ++i) {
          if (boxes[i].Contains(index)) holders.push_back(ranks[i]);
        }
        label[r][c] = JoinRanks(holders);
      }
    }
    auto interval = [](int64_t a, int64_t b) { return std::to_string(a) + ":" + std::to_string(b); };
    std::vector<size_t> width(ncols);
    for (size_t c = 0; c < ncols; ++c) {
      width[c] = interval(cuts[1][c], cuts[1][c + 1]).size();
      for (size_t r = 0; r < nrows; ++r) width[c] = std::max(width[c], label[r][c].size());
    }
    size_t row_w = 0;
    if (rank == 2) {
      for (size_t r = 0; r < nrows; ++r) row_w = std::max(row_w, interval(cuts[0][r], cuts[0][r + 1]).size());
    }
    std::string indent(row_w + 2, ' ');
    std::string header = indent;
    std::string rule = indent + "+";
    for (size_t c = 0; c < ncols; ++c) {
      header += "  " + Pad(interval(cuts[1][c], cuts[1][c + 1]), width[c]) + " ";
      rule += std::string(width[c] + 2, '-') + "+";
    }
    while (!header.empty() && header.back() == ' ') header.pop_back();
    out += header + "\n" + rule + "\n";
    for (size_t r = 0; r < nrows; ++r) {
      std::string line = "  " + PadLeft(rank == 2 ? interval(cuts[0][r], cuts[0][r + 1]) : "", row_w) + "|";
      for (size_t c = 0; c < ncols; ++c) line += " " + Pad(label[r][c], width[c]) + " |";
      out += line + "\n" + rule + "\n";
    }
  }
  std::vector<int> partial_dims;
  for (int m = 0; m < layout.mesh().ndim(); ++m) {
    if (IsPartial(layout.placement(m))) partial_dims.push_back(m);
  }
  if (!partial_dims.empty()) {
    out += "  Partial(" + std::string(ReduceOpName(*layout.partial_op())) + ") on mesh dims " + ListString(partial_dims) +
           ": each block's value is the reduction over those dims' groups\n";
  }
  if (rank > 0 && any_elements) {
    std::vector<int> empty;
    for (size_t i = 0; i < boxes.size(); ++i) {
      if (boxes[i].empty()) empty.push_back(ranks[i]);
    }
    if (!empty.empty()) out += "  ranks with empty shards: " + JoinRanks(empty) + "\n";
  }
  return out;
}

}  // namespace meshflow
