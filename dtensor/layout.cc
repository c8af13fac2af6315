#include "meshflow/dtensor/layout.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <functional>
#include <sstream>

#include "meshflow/base/strings.h"

namespace meshflow {

StatusOr<ShardOrder> NormalizeShardOrder(int tensor_rank, int mesh_ndim, const Placements& placements,
                                         const ShardOrder& shard_order) {
  if (static_cast<int>(placements.size()) != mesh_ndim) {
    return InvalidArgumentError("placements " + ToString(placements) + " have " +
                                std::to_string(placements.size()) + " entries but the mesh has " +
                                std::to_string(mesh_ndim) + " dims");
  }
  std::optional<ReduceOp> partial;
  ShardOrder def(static_cast<size_t>(tensor_rank));
  for (int m = 0; m < mesh_ndim; ++m) {
    const Placement& p = placements[m];
    if (const auto* s = std::get_if<Shard>(&p)) {
      if (s->dim < 0 || s->dim >= tensor_rank) {
        return InvalidArgumentError("placement " + ToString(p) + " on mesh dim " + std::to_string(m) +
                                    " shards tensor dim " + std::to_string(s->dim) +
                                    ", out of range for a rank-" + std::to_string(tensor_rank) + " tensor");
      }
      def[s->dim].push_back(m);
    } else if (const auto* q = std::get_if<Partial>(&p)) {
      if (partial && *partial != q->op) {
        return InvalidArgumentError("placements " + ToString(placements) +
                                    " mix Partial reduce ops; one layout may hold only one kind of Partial");
      }
      partial = q->op;
    }
  }
  if (shard_order.empty()) return def;
  if (static_cast<int>(shard_order.size()) > tensor_rank) {
    return InvalidArgumentError("shard order has " + std::to_string(shard_order.size()) +
                                " entries for a rank-" + std::to_string(tensor_rank) + " tensor");
  }
  ShardOrder out = def;
  for (size_t t = 0; t < shard_order.size(); ++t) {
    if (shard_order[t].empty()) continue;  // default for this dim
    std::vector<int> given = shard_order[t];
    std::vector<int> sorted_given = given;
    std::sort(sorted_given.begin(), sorted_given.end());
    if (sorted_given != def[t]) {
      std::ostringstream os;
      os << "shard order for tensor dim " << t << " is [";
      for (size_t i = 0; i < given.size(); ++i) os << (i ? "," : "") << given[i];
      os << "] but the mesh dims sharding it are [";
      for (size_t i = 0; i < def[t].size(); ++i) os << (i ? "," : "") << def[t][i];
      os << "]";
      return InvalidArgumentError(os.str());
    }
    out[t] = given;
  }
  return out;
}

StatusOr<ShardOrder> ParseShardOrder(std::string_view text) {
  ShardOrder out;
  std::string s;
  for (char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c))) s += c;
  }
  if (s.empty()) return out;
  auto bad = [&](std::string why) {
    return InvalidArgumentError("bad shard order '" + std::string(text) + "': " + why +
                                " (expected e.g. 0:[1,0];2:[0,2])");
  };
  size_t pos = 0;
  while (pos < s.size()) {
    size_t end = s.find(';', pos);
    if (end == std::string::npos) end = s.size();
    const std::string item = s.substr(pos, end - pos);
    pos = end + 1;
    const size_t colon = item.find(':');
    if (colon == std::string::npos || item.size() < colon + 3 || item[colon + 1] != '[' || item.back() != ']') {
      return bad("entry '" + item + "' is not <dim>:[mesh dims]");
    }
    int t = 0;
    auto [p, ec] = std::from_chars(item.data(), item.data() + colon, t);
    if (ec != std::errc() || p != item.data() + colon || t < 0 || t > 64) return bad("bad tensor dim in '" + item + "'");
    std::vector<int> dims;
    const std::string list = item.substr(colon + 2, item.size() - colon - 3);
    if (list.empty()) return bad("entry '" + item + "' lists no mesh dims");
    if (list.back() == ',') return bad("bad mesh dim in '" + item + "'");
    size_t q = 0;
    while (q < list.size()) {
      size_t e = list.find(',', q);
      if (e == std::string::npos) e = list.size();
      int m = 0;
      auto [pp, ec2] = std::from_chars(list.data() + q, list.data() + e, m);
      if (ec2 != std::errc() || pp != list.data() + e) return bad("bad mesh dim in '" + item + "'");
      dims.push_back(m);
      q = e + 1;
    }
    if (out.size() <= static_cast<size_t>(t)) out.resize(t + 1);
    if (!out[t].empty()) return bad("tensor dim " + std::to_string(t) + " given twice");
    out[t] = dims;
  }
  return out;
}

uint64_t HashLayout(const Layout& layout) { return layout.hash_; }

namespace {

uint64_t ComputeLayoutHash(const Layout& layout) {
  uint64_t h = 0x6c61796f7574ull;  // "layout"
  for (int64_t s : layout.global_shape()) HashMix(h, static_cast<uint64_t>(s));
  HashMix(h, 0xabcdu);
  HashMix(h, layout.mesh().fingerprint());  // shape, names and ranks, hashed once by the mesh
  for (const Placement& p : layout.placements()) {
    uint64_t v = static_cast<uint64_t>(p.index()) * 64;
    if (IsShard(p)) v += static_cast<uint64_t>(std::get<Shard>(p).dim);
    if (IsPartial(p)) v += static_cast<uint64_t>(std::get<Partial>(p).op);
    HashMix(h, v);
  }
  for (const std::vector<int>& order : layout.shard_order()) {
    HashMix(h, 0x5eedu);
    for (int m : order) HashMix(h, static_cast<uint64_t>(m));
  }
  return h;
}

}  // namespace

StatusOr<Layout> Layout::Create(std::vector<int64_t> global_shape, DeviceMesh mesh, Placements placements,
                                ShardOrder shard_order) {
  for (size_t d = 0; d < global_shape.size(); ++d) {
    if (global_shape[d] < 0) {
      return InvalidArgumentError("global shape " + ListString(global_shape) + " has negative size at dim " +
                                  std::to_string(d));
    }
  }
  // Shard math (ChunkOf: len + k - 1) and element / byte counts (Box::NumElements times the dtype
  // size, times group sizes in the cost model) must not overflow int64: bound the element count
  // (the product of the non-zero sizes, so every partial product is bounded too).
  int64_t elements = 1;
  for (int64_t s : global_shape) {
    if (s != 0 && s > kMaxLayoutElements / elements) {
      return InvalidArgumentError("global shape " + ListString(global_shape) + " is too large (more than 2^" +
                                  std::to_string(kMaxLayoutElementsLog2) + " elements)");
    }
    if (s != 0) elements *= s;
  }
  MF_ASSIGN_OR_RETURN(ShardOrder order, NormalizeShardOrder(static_cast<int>(global_shape.size()), mesh.ndim(),
                                                            placements, shard_order));
  Layout l;
  l.global_shape_ = std::move(global_shape);
  l.mesh_ = std::move(mesh);
  l.placements_ = std::move(placements);
  l.shard_order_ = std::move(order);
  l.hash_ = ComputeLayoutHash(l);
  return l;
}

StatusOr<Layout> Layout::WithPlacements(Placements placements, ShardOrder shard_order) const {
  return Create(global_shape_, mesh_, std::move(placements), std::move(shard_order));
}

bool Layout::has_default_shard_order() const {
  for (const auto& o : shard_order_) {
    if (!std::is_sorted(o.begin(), o.end())) return false;
  }
  return true;
}

bool Layout::HasPartial() const { return partial_op().has_value(); }

std::optional<ReduceOp> Layout::partial_op() const {
  for (const Placement& p : placements_) {
    if (const auto* q = std::get_if<Partial>(&p)) return q->op;
  }
  return std::nullopt;
}

bool Layout::IsFullyReplicated() const {
  return std::all_of(placements_.begin(), placements_.end(), [](const Placement& p) { return IsReplicate(p); });
}

Box Layout::LocalBoxAt(std::span<const int64_t> coord) const {
  Box box = FullBox(global_shape_);
  for (int t = 0; t < tensor_rank(); ++t) {
    Interval iv{0, global_shape_[t]};
    for (int m : shard_order_[t]) iv = ChunkOf(iv, mesh_.dim_size(m), coord[m]);
    box.offset[t] = iv.begin;
    box.shape[t] = iv.size();
  }
  return box;
}

StatusOr<Box> Layout::LocalBox(int rank) const {
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> coord, mesh_.Coordinate(rank));
  return LocalBoxAt(coord);
}

std::vector<Box> Layout::AllLocalBoxes() const {
  std::vector<Box> boxes;
  boxes.reserve(mesh_.size());
  for (int r : mesh_.ranks()) boxes.push_back(*LocalBox(r));
  return boxes;
}

int64_t Layout::NumHolders(std::span<const int64_t> index) const {
  int64_t n = 0;
  for (int r : mesh_.ranks()) n += LocalBox(r)->Contains(index) ? 1 : 0;
  return n;
}

std::string Layout::PlacementsString() const {
  std::string out = ::meshflow::ToString(std::span<const Placement>(placements_));
  if (!has_default_shard_order()) {
    out += " order {";
    bool first = true;
    for (int t = 0; t < tensor_rank(); ++t) {
      if (shard_order_[t].size() < 2) continue;
      out += first ? "" : ";";
      first = false;
      out += std::to_string(t) + ":[";
      for (size_t i = 0; i < shard_order_[t].size(); ++i) {
        out += (i ? "," : "") + std::to_string(shard_order_[t][i]);
      }
      out += "]";
    }
    out += "}";
  }
  return out;
}

std::string Layout::ToString() const {
  return PlacementsString() + " on " + mesh_.ToString() + " shape " + ListString(global_shape_);
}


}  // namespace meshflow
