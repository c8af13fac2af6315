#include "meshflow/planner/direct.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

namespace meshflow {

StatusOr<std::vector<Transfer>> DirectTransfers(const Layout& from, const Layout& to) {
  if (!(from.mesh() == to.mesh()) || from.global_shape() != to.global_shape()) {
    return InvalidArgumentError("direct transfer needs the same mesh and shape: " + from.ToString() + " vs " +
                                to.ToString());
  }
  if (from.HasPartial()) {
    return InvalidArgumentError("direct transfer cannot start from a Partial layout (" + from.PlacementsString() +
                                "); reduce first");
  }
  const std::vector<int>& ranks = from.mesh().ranks();
  const std::vector<Box> src = from.AllLocalBoxes();
  const std::vector<Box> dst = to.AllLocalBoxes();
  // Distinct source blocks and their holders (mesh index order).
  std::vector<Box> blocks;
  std::vector<std::vector<int>> holders;
  {
    std::map<std::pair<std::vector<int64_t>, std::vector<int64_t>>, size_t> index;
    for (size_t i = 0; i < src.size(); ++i) {
      auto key = std::make_pair(src[i].offset, src[i].shape);
      auto [it, inserted] = index.emplace(key, blocks.size());
      if (inserted) {
        blocks.push_back(src[i]);
        holders.emplace_back();
      }
      holders[it->second].push_back(static_cast<int>(i));
    }
  }
  std::vector<Transfer> out;
  for (size_t r = 0; r < dst.size(); ++r) {
    std::vector<Transfer> mine;
    for (size_t b = 0; b < blocks.size(); ++b) {
      if (src[r] == blocks[b]) continue;  // already held
      Box piece = Intersect(blocks[b], dst[r]);
      if (piece.empty()) continue;
      const int holder = holders[b][r % holders[b].size()];
      mine.push_back(Transfer{ranks[holder], ranks[r], std::move(piece)});
    }
    std::sort(mine.begin(), mine.end(), [](const Transfer& a, const Transfer& b) { return a.src_rank < b.src_rank; });
    out.insert(out.end(), mine.begin(), mine.end());
  }
  return out;
}

std::vector<int64_t> LowerBoundElementsPerRank(const Layout& from, const Layout& to) {
  const std::vector<Box> src = from.AllLocalBoxes();
  const std::vector<Box> dst = to.AllLocalBoxes();
  const DeviceMesh& mesh = from.mesh();
  std::vector<int> partial_dims;
  for (int m = 0; m < to.mesh().ndim(); ++m) {
    if (IsPartial(to.placement(m))) partial_dims.push_back(m);
  }
  std::vector<int64_t> out(src.size(), -1);
  for (size_t r = 0; r < src.size(); ++r) {
    if (out[r] >= 0) continue;  // filled with its group
    std::vector<size_t> group{r};
    if (!partial_dims.empty()) {
      group.clear();
      // ranks()[r] is in the mesh and partial_dims are valid mesh dims: Group cannot fail.
      const std::vector<int> members = mesh.Group(mesh.ranks()[r], partial_dims).value();
      for (int q : members) group.push_back(static_cast<size_t>(mesh.IndexOf(q).value()));
    }
    std::set<std::pair<std::vector<int64_t>, std::vector<int64_t>>> seen;
    int64_t held = 0;
    for (size_t q : group) {
      if (!seen.emplace(src[q].offset, src[q].shape).second) continue;
      held += Intersect(src[q], dst[r]).NumElements();
    }
    const int64_t missing = dst[r].NumElements() - held;
    const int64_t g = static_cast<int64_t>(group.size());
    for (size_t q : group) out[q] = (missing + g - 1) / g;
  }
  return out;
}

}  // namespace meshflow
