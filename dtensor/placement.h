// Placement: how a DTensor is laid out along one mesh dim.
//
//   Shard(d)     tensor dim d is split over the mesh dim like torch.chunk
//   Replicate    every rank of the mesh dim holds the same values
//   Partial(op)  the global value is the reduction (sum/avg/max/min) of the ranks' local values
//
// Short forms (parsed and printed): "S(0)", "R", "P" (= "P(sum)"), "P(avg)", "P(max)", "P(min)".
// A placements list is comma separated: "S(0),R,P(sum)". Whitespace is ignored.
#ifndef MESHFLOW_DTENSOR_PLACEMENT_H_
#define MESHFLOW_DTENSOR_PLACEMENT_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "meshflow/base/status.h"

namespace meshflow {

enum class ReduceOp { kSum, kAvg, kMax, kMin };

std::string_view ReduceOpName(ReduceOp op);  // "sum", "avg", "max", "min"
StatusOr<ReduceOp> ParseReduceOp(std::string_view s);

struct Shard {
  int dim = 0;
  friend bool operator==(const Shard&, const Shard&) = default;
};
struct Replicate {
  friend bool operator==(const Replicate&, const Replicate&) = default;
};
struct Partial {
  ReduceOp op = ReduceOp::kSum;
  friend bool operator==(const Partial&, const Partial&) = default;
};

using Placement = std::variant<Shard, Replicate, Partial>;
using Placements = std::vector<Placement>;

inline bool IsShard(const Placement& p) { return std::holds_alternative<Shard>(p); }
inline bool IsShard(const Placement& p, int dim) { return IsShard(p) && std::get<Shard>(p).dim == dim; }
inline bool IsReplicate(const Placement& p) { return std::holds_alternative<Replicate>(p); }
inline bool IsPartial(const Placement& p) { return std::holds_alternative<Partial>(p); }
// How many mesh dims are Shard / Partial (strategy tie-breaks in ops/ prefer more Shard dims and
// fewer Partial dims).
inline int NumShardDims(const Placements& p) {
  int n = 0;
  for (const Placement& x : p) n += IsShard(x) ? 1 : 0;
  return n;
}
inline int NumPartialDims(const Placements& p) {
  int n = 0;
  for (const Placement& x : p) n += IsPartial(x) ? 1 : 0;
  return n;
}

std::string ToString(const Placement& p);
// "S(0),R,P(sum)" (P prints with its op, so printing then parsing round-trips).
std::string ToString(std::span<const Placement> ps);

// Errors name the bad text, e.g. "bad placement 'S(x)': ...".
StatusOr<Placement> ParsePlacement(std::string_view s);
StatusOr<Placements> ParsePlacements(std::string_view s);

}  // namespace meshflow

#endif  // MESHFLOW_DTENSOR_PLACEMENT_H_
