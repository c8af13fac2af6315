#include "meshflow/planner/topology.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "meshflow/base/strings.h"

namespace meshflow {
namespace {

std::string FormatDouble(double v) { return DoubleString(v); }

std::string Trim(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c != ' ' && c != '\t') out += c;
  }
  return out;
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
  for (const std::string_view item_view : SplitString(s, ';')) {
    const std::string item(item_view);
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
        for (const std::string_view d_view : SplitString(val, ',')) {
          const std::string d(d_view);
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
      if (!(v >= Topology::kMinBandwidthGBps)) {
        return bad(key + "=" + val + " must be > 0 and at least " + FormatDouble(Topology::kMinBandwidthGBps) +
                   " GB/s (1 kB/s)");
      }
      (key == "bw_intra" ? t.bw_intra_gbps : t.bw_inter_gbps) = v;
    } else if (key == "lat_intra" || key == "lat_inter") {
      if (v < 0) return bad(key + "=" + val + " must be >= 0");
      if (v > Topology::kMaxLatencyUs) {
        return bad(key + "=" + val + " must be at most " + FormatDouble(Topology::kMaxLatencyUs) + " us");
      }
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
    if (!(v >= kMinBandwidthGBps) || !std::isfinite(v)) {
      return InvalidArgumentError("topology " + std::string(key) + "=" + FormatDouble(v) +
                                  " must be > 0 and finite, at least " + FormatDouble(kMinBandwidthGBps) +
                                  " GB/s (1 kB/s)");
    }
  }
  for (const auto& [key, v] : {std::pair<const char*, double>{"lat_intra", lat_intra_us},
                               std::pair<const char*, double>{"lat_inter", lat_inter_us}}) {
    if (!(v >= 0) || !std::isfinite(v) || v > kMaxLatencyUs) {
      return InvalidArgumentError("topology " + std::string(key) + "=" + FormatDouble(v) +
                                  " must be >= 0 and finite, at most " + FormatDouble(kMaxLatencyUs) + " us");
    }
  }
  if (intra_dims.has_value()) {
    for (int d : *intra_dims) {
      if (d < 0) return InvalidArgumentError("topology intra= names mesh dim " + std::to_string(d) + ", which is negative");
    }
  }
  return Status();
}

Status Topology::ValidateForMesh(int mesh_ndim) const {
  MF_RETURN_IF_ERROR(Validate());
  if (intra_dims.has_value()) {
    for (int d : *intra_dims) {
      if (d >= mesh_ndim) {
        return InvalidArgumentError("topology intra= names mesh dim " + std::to_string(d) + " but the mesh has " +
                                    std::to_string(mesh_ndim) + (mesh_ndim == 1 ? " dim" : " dims") + " (0.." +
                                    std::to_string(mesh_ndim - 1) + ")");
      }
    }
  }
  return Status();
}

}  // namespace meshflow
