// Layout: how a global tensor is spread over a DeviceMesh.
//
// A Layout is the global shape, the mesh, one Placement per mesh dim and a shard order: for each
// tensor dim, the mesh dims that shard it, outermost first. The default shard order is mesh-dim
// order (left to right); each later mesh dim splits the interval left by the earlier ones
// (torch.chunk semantics at every level, so shards may be short or empty).
//
// Example (2x2 mesh, shape 8x6):
//   Layout::Create({8, 6}, mesh, {Shard{0}, Shard{0}})            rank (i,j) holds rows
//       ChunkOf(ChunkOf([0,8), 2, i), 2, j)
//   Layout::Create({8, 6}, mesh, {Shard{0}, Shard{0}}, {{1, 0}})  mesh dim 1 splits first
//
// Validation errors (all INVALID_ARGUMENT, naming the value): placement count != mesh ndim,
// shard dim out of range for the tensor rank, negative global size, more than 2^48 elements
// (counting non-zero sizes; keeps shard math and byte counts far from int64 overflow), Partial placements with
// different reduce ops in one layout (the order of mixed reductions is ambiguous), a shard order
// that is not a permutation of exactly the mesh dims sharding that tensor dim.
#ifndef MESHFLOW_DTENSOR_LAYOUT_H_
#define MESHFLOW_DTENSOR_LAYOUT_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "meshflow/base/hash.h"
#include "meshflow/base/status.h"
#include "meshflow/dtensor/box.h"
#include "meshflow/dtensor/placement.h"
#include "meshflow/mesh/device_mesh.h"

namespace meshflow {

// shard_order[t] = mesh dims sharding tensor dim t, outermost first. Empty = default order.
using ShardOrder = std::vector<std::vector<int>>;

// Largest element count of a Layout's global shape (product of its non-zero sizes).
inline constexpr int kMaxLayoutElementsLog2 = 48;
inline constexpr int64_t kMaxLayoutElements = int64_t{1} << kMaxLayoutElementsLog2;

class Layout {
 public:
  static StatusOr<Layout> Create(std::vector<int64_t> global_shape, DeviceMesh mesh,
                                 Placements placements, ShardOrder shard_order = {});
  // Same mesh and shape, other placements / order (validated).
  StatusOr<Layout> WithPlacements(Placements placements, ShardOrder shard_order = {}) const;

  const std::vector<int64_t>& global_shape() const { return global_shape_; }
  int tensor_rank() const { return static_cast<int>(global_shape_.size()); }
  const DeviceMesh& mesh() const { return mesh_; }
  const Placements& placements() const { return placements_; }
  const Placement& placement(int mesh_dim) const { return placements_[mesh_dim]; }
  // Normalized shard order: one entry per tensor dim (empty when the dim is not sharded).
  const ShardOrder& shard_order() const { return shard_order_; }
  // True when every tensor dim uses the default (ascending mesh dim) order.
  bool has_default_shard_order() const;

  bool HasPartial() const;
  // The reduce op of the Partial placements, if any.
  std::optional<ReduceOp> partial_op() const;
  bool IsFullyReplicated() const;

  // The box of the global tensor held by the rank at mesh coordinate `coord`.
  // Precondition: coord is a valid coordinate of mesh().
  Box LocalBoxAt(std::span<const int64_t> coord) const;
  // The box held by a world rank. Errors: rank not in the mesh.
  StatusOr<Box> LocalBox(int rank) const;
  // Boxes of every member, in mesh().ranks() order.
  std::vector<Box> AllLocalBoxes() const;
  // How many ranks hold global element `index` (for Partial, every rank counts as holding it).
  int64_t NumHolders(std::span<const int64_t> index) const;

  // "S(0),S(1) on mesh(2x2) shape [8,6]" plus the order when not default.
  std::string ToString() const;
  // Placements with the order when not default, e.g. "S(0),S(0) order {0:[1,0]}".
  std::string PlacementsString() const;

  friend bool operator==(const Layout& a, const Layout& b) {
    return a.hash_ == b.hash_ && a.global_shape_ == b.global_shape_ && a.mesh_ == b.mesh_ &&
           a.placements_ == b.placements_ && a.shard_order_ == b.shard_order_;
  }
  friend uint64_t HashLayout(const Layout& layout);

 private:
  Layout() = default;
  std::vector<int64_t> global_shape_;
  DeviceMesh mesh_ = *DeviceMesh::Create({1});
  Placements placements_;
  ShardOrder shard_order_;
  uint64_t hash_ = 0;  // HashLayout, computed once by Create
};

// A hash of every field operator== compares (global shape, mesh shape/ranks/names, placements,
// shard order), for hashed caches keyed on layouts (planner/plan_cache.h, runtime/eager.h). Equal
// layouts hash equal; use operator== to confirm a match. O(1): computed once when the layout is
// created (the mesh part from DeviceMesh::fingerprint), so a cache lookup never walks rank lists.
uint64_t HashLayout(const Layout& layout);

// Validates placements + order against a tensor rank and mesh ndim and returns the normalized
// order (shared by Layout::Create and the planner's state space).
StatusOr<ShardOrder> NormalizeShardOrder(int tensor_rank, int mesh_ndim, const Placements& placements,
                                         const ShardOrder& shard_order);

// Parses "0:[1,0];2:[0,2]" (tensor dim: mesh dims outermost first). Empty string = default.
StatusOr<ShardOrder> ParseShardOrder(std::string_view s);

}  // namespace meshflow

#endif  // MESHFLOW_DTENSOR_LAYOUT_H_
