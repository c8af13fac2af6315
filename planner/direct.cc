#include "meshflow/planner/direct.h"

#include <algorithm>
#include <map>

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
  std::vector<int64_t> out(src.size());
  for (size_t r = 0; r < src.size(); ++r) {
    out[r] = dst[r].NumElements() - Intersect(src[r], dst[r]).NumElements();
  }
  return out;
}

}  // namespace meshflow
