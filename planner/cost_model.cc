#include "meshflow/planner/cost_model.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "meshflow/planner/direct.h"

namespace meshflow {
namespace {

std::string FormatDouble(double v) {
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  if (ec != std::errc()) return "nan";
  return std::string(buf, p);
}

std::string Trim(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c != ' ' && c != '\t') out += c;
  }
  return out;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    const size_t e = s.find(sep, pos);
    out.push_back(s.substr(pos, e == std::string::npos ? std::string::npos : e - pos));
    if (e == std::string::npos) break;
    pos = e + 1;
  }
  return out;
}

// Row-major coordinate of mesh index i.
std::vector<int64_t> CoordOf(const DeviceMesh& mesh, int64_t i) {
  std::vector<int64_t> c(static_cast<size_t>(mesh.ndim()));
  for (int d = mesh.ndim() - 1; d >= 0; --d) {
    c[d] = i % mesh.dim_size(d);
    i /= mesh.dim_size(d);
  }
  return c;
}

int64_t IndexOf(const DeviceMesh& mesh, const std::vector<int64_t>& c) {
  int64_t i = 0;
  for (int d = 0; d < mesh.ndim(); ++d) i = i * mesh.dim_size(d) + c[d];
  return i;
}

// Mesh indices of the group of `dims` containing index i, in flattened (row-major over `dims`
// in the order given) order; *pos is i's position.
std::vector<int64_t> GroupOf(const DeviceMesh& mesh, std::span<const int> dims, int64_t i, int64_t* pos) {
  const std::vector<int64_t> base = CoordOf(mesh, i);
  int64_t g = 1;
  for (int d : dims) g *= mesh.dim_size(d);
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(g));
  std::vector<int64_t> c = base;
  for (int64_t k = 0; k < g; ++k) {
    int64_t rem = k;
    for (int j = static_cast<int>(dims.size()) - 1; j >= 0; --j) {
      c[dims[j]] = rem % mesh.dim_size(dims[j]);
      rem /= mesh.dim_size(dims[j]);
    }
    out.push_back(IndexOf(mesh, c));
  }
  int64_t p = 0;
  for (int d : dims) p = p * mesh.dim_size(d) + base[d];
  if (pos != nullptr) *pos = p;
  return out;
}

double BetaUs(double factor, int64_t bytes, double bw_gbps) {
  // 1 GB/s = 1e3 bytes per microsecond.
  return factor * static_cast<double>(bytes) / (bw_gbps * 1e3);
}

}  // namespace

bool Topology::IsIntra(int mesh_dim) const {
  if (!intra_dims.has_value()) return true;
  return std::find(intra_dims->begin(), intra_dims->end(), mesh_dim) != intra_dims->end();
}

std::string Topology::ToString() const {
  std::string out = "intra=";
  if (!intra_dims.has_value()) {
    out += "all";
  } else {
    for (size_t i = 0; i < intra_dims->size(); ++i) out += (i ? "," : "") + std::to_string((*intra_dims)[i]);
  }
  out += ";bw_intra=" + FormatDouble(bw_intra_gbps);
  out += ";bw_inter=" + FormatDouble(bw_inter_gbps);
  out += ";lat_intra=" + FormatDouble(lat_intra_us);
  out += ";lat_inter=" + FormatDouble(lat_inter_us);
  return out;
}

StatusOr<Topology> ParseTopology(std::string_view text) {
  Topology t;
  const std::string s = Trim(text);
  if (s.empty()) return t;
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError("bad topology '" + std::string(text) + "': " + why +
                                " (e.g. intra=1,2;bw_intra=150;bw_inter=25;lat_intra=2;lat_inter=10)");
  };
  for (const std::string& item : Split(s, ';')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) return bad("item '" + item + "' has no '='");
    const std::string key = item.substr(0, eq);
    const std::string val = item.substr(eq + 1);
    if (key == "intra") {
      if (val == "all") {
        t.intra_dims.reset();
        continue;
      }
      std::vector<int> dims;
      if (!val.empty()) {
        for (const std::string& d : Split(val, ',')) {
          int m = 0;
          auto [p, ec] = std::from_chars(d.data(), d.data() + d.size(), m);
          if (d.empty() || ec != std::errc() || p != d.data() + d.size() || m < 0) {
            return bad("mesh dim '" + d + "' in intra= is not a non-negative integer");
          }
          if (std::find(dims.begin(), dims.end(), m) != dims.end()) {
            return bad("mesh dim " + d + " repeated in intra=");
          }
          dims.push_back(m);
        }
      }
      t.intra_dims = std::move(dims);
      continue;
    }
    double v = 0;
    auto [p, ec] = std::from_chars(val.data(), val.data() + val.size(), v);
    if (val.empty() || ec != std::errc() || p != val.data() + val.size() || !std::isfinite(v)) {
      return bad("value '" + val + "' of " + key + " is not a number");
    }
    if (key == "bw_intra" || key == "bw_inter") {
      if (v <= 0) return bad(key + "=" + val + " must be > 0");
      (key == "bw_intra" ? t.bw_intra_gbps : t.bw_inter_gbps) = v;
    } else if (key == "lat_intra" || key == "lat_inter") {
      if (v < 0) return bad(key + "=" + val + " must be >= 0");
      (key == "lat_intra" ? t.lat_intra_us : t.lat_inter_us) = v;
    } else {
      return bad("unknown key '" + key + "'; expected one of intra, bw_intra, bw_inter, lat_intra, lat_inter");
    }
  }
  return t;
}

Status Topology::Validate() const {
  for (const auto& [key, v] : {std::pair<const char*, double>{"bw_intra", bw_intra_gbps},
                               std::pair<const char*, double>{"bw_inter", bw_inter_gbps}}) {
    if (!(v > 0) || !std::isfinite(v)) {
      return InvalidArgumentError("topology " + std::string(key) + "=" + FormatDouble(v) + " must be > 0 and finite");
    }
  }
  for (const auto& [key, v] : {std::pair<const char*, double>{"lat_intra", lat_intra_us},
                               std::pair<const char*, double>{"lat_inter", lat_inter_us}}) {
    if (!(v >= 0) || !std::isfinite(v)) {
      return InvalidArgumentError("topology " + std::string(key) + "=" + FormatDouble(v) + " must be >= 0 and finite");
    }
  }
  return Status();
}

Link LinkOf(const Topology& topo, std::span<const int> mesh_dims) {
  Link l{0.0, std::numeric_limits<double>::infinity()};
  for (int d : mesh_dims) {
    l.alpha_us = std::max(l.alpha_us, topo.LatencyUs(d));
    l.bw_gbps = std::min(l.bw_gbps, topo.BandwidthGBps(d));
  }
  return l;
}

double AllGatherUs(int64_t g, int64_t bytes, Link link) {
  if (g <= 1) return 0;
  return static_cast<double>(g - 1) * link.alpha_us +
         BetaUs(static_cast<double>(g - 1) / static_cast<double>(g), bytes, link.bw_gbps);
}

double ReduceScatterUs(int64_t g, int64_t bytes, Link link) { return AllGatherUs(g, bytes, link); }

double AllReduceUs(int64_t g, int64_t bytes, Link link) {
  if (g <= 1) return 0;
  return 2.0 * static_cast<double>(g - 1) * link.alpha_us +
         BetaUs(2.0 * static_cast<double>(g - 1) / static_cast<double>(g), bytes, link.bw_gbps);
}

double AllToAllUs(int64_t g, int64_t bytes, Link link) { return AllGatherUs(g, bytes, link); }

int64_t AllReduceElementsReceived(int64_t count, int64_t g, int64_t p) {
  if (g <= 1) return 0;
  const int64_t chunk = (count + g - 1) / g;
  const int64_t b = std::min(count, p * chunk);
  const int64_t e = std::min(count, (p + 1) * chunk);
  const int64_t mine = e - b;
  return (g - 1) * mine + (count - mine);
}

StatusOr<StepModel> ModelStep(const PlanStep& step, DType dtype, const Topology& topo) {
  const DeviceMesh& mesh = step.from.mesh();
  const int64_t n = mesh.size();
  const int64_t esize = DTypeSize(dtype);
  StepModel out;
  out.bytes_per_rank.assign(static_cast<size_t>(n), 0);
  for (int d : step.mesh_dims) {
    if (d < 0 || d >= mesh.ndim()) {
      return OutOfRangeError("step " + std::string(StepKindName(step.kind)) + " names mesh dim " +
                             std::to_string(d) + " of a " + std::to_string(mesh.ndim()) + "-D mesh");
    }
  }
  if (IsLocalStep(step.kind)) return out;

  if (step.kind == StepKind::kSendRecv) {
    MF_ASSIGN_OR_RETURN(std::vector<Transfer> transfers, DirectTransfers(step.from, step.to));
    std::vector<double> in_us(static_cast<size_t>(n), 0.0), out_us(static_cast<size_t>(n), 0.0);
    for (const Transfer& t : transfers) {
      MF_ASSIGN_OR_RETURN(int si, mesh.IndexOf(t.src_rank));
      MF_ASSIGN_OR_RETURN(int di, mesh.IndexOf(t.dst_rank));
      const std::vector<int64_t> sc = CoordOf(mesh, si), dc = CoordOf(mesh, di);
      std::vector<int> path;
      for (int d = 0; d < mesh.ndim(); ++d) {
        if (sc[d] != dc[d]) path.push_back(d);
      }
      const Link link = LinkOf(topo, path);
      const int64_t bytes = t.box.NumElements() * esize;
      const double us = link.alpha_us + BetaUs(1.0, bytes, link.bw_gbps);
      in_us[di] += us;
      out_us[si] += us;
      out.bytes_per_rank[di] += bytes;
    }
    for (int64_t i = 0; i < n; ++i) out.us = std::max(out.us, std::max(in_us[i], out_us[i]));
    return out;
  }

  const std::vector<Box> from = step.from.AllLocalBoxes();
  const std::vector<Box> to = step.to.AllLocalBoxes();
  int64_t g = 1;
  for (int d : step.mesh_dims) g *= mesh.dim_size(d);
  const Link link = LinkOf(topo, step.mesh_dims);
  int64_t max_from = 0, max_to = 0;
  for (int64_t i = 0; i < n; ++i) {
    max_from = std::max(max_from, from[i].NumElements());
    max_to = std::max(max_to, to[i].NumElements());
  }
  switch (step.kind) {
    case StepKind::kAllGather:
      for (int64_t i = 0; i < n; ++i) {
        out.bytes_per_rank[i] = (to[i].NumElements() - Intersect(from[i], to[i]).NumElements()) * esize;
      }
      out.us = AllGatherUs(g, max_to * esize, link);
      break;
    case StepKind::kReduceScatter:
      for (int64_t i = 0; i < n; ++i) out.bytes_per_rank[i] = (g - 1) * to[i].NumElements() * esize;
      out.us = ReduceScatterUs(g, max_from * esize, link);
      break;
    case StepKind::kAllReduce:
      for (int64_t i = 0; i < n; ++i) {
        int64_t pos = 0;
        GroupOf(mesh, step.mesh_dims, i, &pos);
        out.bytes_per_rank[i] = AllReduceElementsReceived(from[i].NumElements(), g, pos) * esize;
      }
      out.us = AllReduceUs(g, max_from * esize, link);
      break;
    case StepKind::kAllToAll:
      for (int64_t i = 0; i < n; ++i) {
        int64_t elems = 0;
        for (int64_t q : GroupOf(mesh, step.mesh_dims, i, nullptr)) {
          if (q != i) elems += Intersect(from[q], to[i]).NumElements();
        }
        out.bytes_per_rank[i] = elems * esize;
      }
      out.us = AllToAllUs(g, std::max(max_from, max_to) * esize, link);
      break;
    default:
      break;
  }
  return out;
}

Status FillPlanCosts(Plan& plan, const Topology& topo) {
  const size_t n = static_cast<size_t>(plan.from.mesh().size());
  plan.bytes_received_per_rank.assign(n, 0);
  plan.modelled_us = 0;
  for (PlanStep& step : plan.steps) {
    MF_ASSIGN_OR_RETURN(StepModel m, ModelStep(step, plan.dtype, topo));
    step.modelled_us = m.us;
    step.bytes_per_rank = 0;
    for (size_t i = 0; i < n; ++i) {
      step.bytes_per_rank = std::max(step.bytes_per_rank, m.bytes_per_rank[i]);
      plan.bytes_received_per_rank[i] += m.bytes_per_rank[i];
    }
    plan.modelled_us += m.us;
  }
  plan.max_bytes_received_per_rank = 0;
  for (int64_t b : plan.bytes_received_per_rank) {
    plan.max_bytes_received_per_rank = std::max(plan.max_bytes_received_per_rank, b);
  }
  plan.lower_bound_bytes_per_rank.reset();
  if (!plan.from.HasPartial()) {
    int64_t lb = 0;
    for (int64_t e : LowerBoundElementsPerRank(plan.from, plan.to)) lb = std::max(lb, e);
    plan.lower_bound_bytes_per_rank = lb * DTypeSize(plan.dtype);
  }
  return Status();
}

int64_t CostUnits(double us) { return std::llround(us * 1e6); }

}  // namespace meshflow
