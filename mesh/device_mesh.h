// DeviceMesh: an N-D grid of ranks with optional dim names.
//
// Ranks are laid out row-major over the mesh shape: in a 2x3 mesh, rank 4 sits at coordinate
// (1, 1). A mesh may be a sub-mesh of a larger world (see `Slice`): it then holds the world
// ranks of its members, still row-major over its own shape.
//
// The group of mesh dim d for a rank is the ordered list of ranks that differ from it only in
// coordinate d, ordered by that coordinate. The group of a set of mesh dims {d1, d2, ...} is the
// flattened group: all ranks that differ only in those coordinates, ordered row-major over the
// dims in the order given (so {0, 1} and {1, 0} hold the same ranks in different orders).
//
// Example:
//   MF_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create({2, 2}, {"dp", "tp"}));
//   mesh.Group(/*rank=*/3, /*dim=*/0)                ->  {1, 3}
//   mesh.Group(3, std::vector<int>{0, 1})            ->  {0, 1, 2, 3}
//   mesh.Slice(std::vector<std::string>{"tp"}, 3)    ->  1-D mesh "tp" over world ranks {2, 3}
#ifndef MESHFLOW_MESH_DEVICE_MESH_H_
#define MESHFLOW_MESH_DEVICE_MESH_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "meshflow/base/hash.h"
#include "meshflow/base/status.h"

namespace meshflow {

class DeviceMesh {
 public:
  // A mesh over world ranks 0..prod(shape)-1. Errors: empty shape, a size < 1, names given but
  // not one per dim, an empty or duplicate name.
  static StatusOr<DeviceMesh> Create(std::vector<int64_t> shape, std::vector<std::string> names = {});
  // A mesh over explicit world ranks (row-major over `shape`). Errors as Create, plus a rank
  // count != prod(shape), a negative or duplicate rank.
  static StatusOr<DeviceMesh> CreateWithRanks(std::vector<int64_t> shape, std::vector<int> ranks,
                                              std::vector<std::string> names = {});

  int ndim() const { return static_cast<int>(shape_.size()); }
  // Number of ranks in the mesh.
  int size() const { return size_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  // Precondition: 0 <= d < ndim().
  int64_t dim_size(int d) const { return shape_[d]; }
  // Row-major strides over shape(): a member's position is the sum of coordinate[d] * strides()[d].
  const std::vector<int64_t>& strides() const { return strides_; }
  // Empty when the mesh has no names.
  const std::vector<std::string>& names() const { return names_; }
  // World rank of the member at position `index` (row-major over shape()): O(1) and allocation
  // free for every mesh. Precondition: 0 <= index < size().
  int rank(int index) const { return identity_ranks_ ? index : ranks_->list[static_cast<size_t>(index)]; }
  // World ranks of the members, row-major over shape(). Copies of a mesh share one rank list.
  // A mesh over world ranks 0..size()-1 (`Create`) stores no list: it is built on the first call
  // (O(size()) memory, 4 GiB for the 2^30-rank maximum), so code that may see large meshes walks
  // positions with size() and rank(i) instead. Thread-safe.
  const std::vector<int>& ranks() const;
  // Whether ranks() is 0..size()-1 (then rank(i) == i and IndexOf(r) == r).
  bool identity_ranks() const { return identity_ranks_; }
  // A hash of everything operator== compares (shape, names, ranks), computed once by Create, so
  // that hashing a mesh (e.g. a layout-keyed cache lookup) costs O(1), not O(size()).
  uint64_t fingerprint() const { return fingerprint_; }

  // Index of the dim called `name`. Errors: the mesh has no dim of that name.
  StatusOr<int> DimIndex(std::string_view name) const;
  // Name of dim d, or "d<d>" when the mesh is unnamed.
  std::string DimName(int d) const;

  bool Contains(int rank) const;
  // Position (0..size-1) of a world rank in ranks(). Errors: rank not in the mesh.
  StatusOr<int> IndexOf(int rank) const;
  // Coordinate of a world rank. Errors: rank not in the mesh.
  StatusOr<std::vector<int64_t>> Coordinate(int rank) const;
  // World rank at a coordinate. Errors: wrong length, a component out of range.
  StatusOr<int> RankAt(std::span<const int64_t> coord) const;

  // Ordered group of mesh dim `dim` containing `rank`. Errors: dim or rank out of range.
  StatusOr<std::vector<int>> Group(int rank, int dim) const;
  // Flattened group over a set of mesh dims (order given by `dims`). Errors: dim out of range or
  // repeated, rank not in the mesh. An empty `dims` gives {rank}.
  StatusOr<std::vector<int>> Group(int rank, std::span<const int> dims) const;
  // All groups of `dims`: a partition of ranks(); groups ordered by their first member.
  StatusOr<std::vector<std::vector<int>>> AllGroups(std::span<const int> dims) const;

  // The sub-mesh over the named dims (kept in the order given) that contains `rank`. Errors:
  // unknown or repeated name, rank not in the mesh.
  StatusOr<DeviceMesh> Slice(std::span<const std::string> names, int rank) const;

  // "mesh(2x2, [dp, tp])" or "mesh(2x2)"; sub-meshes append their ranks.
  std::string ToString() const;

  // O(ndim) when the two meshes share their rank list (copies of one mesh) or both are meshes
  // over world ranks 0..size()-1; O(size()) only for equal-looking meshes created separately
  // over explicit ranks.
  friend bool operator==(const DeviceMesh& a, const DeviceMesh& b) {
    return a.fingerprint_ == b.fingerprint_ && a.shape_ == b.shape_ && a.names_ == b.names_ &&
           a.identity_ranks_ == b.identity_ranks_ &&
           (a.identity_ranks_ || a.ranks_ == b.ranks_ || a.ranks_->list == b.ranks_->list);
  }

 private:
  DeviceMesh() = default;
  // The mesh with validated fields; `explicit_ranks` is empty for Create (nothing stored).
  static DeviceMesh Make(std::vector<int64_t> shape, std::vector<std::string> names, int64_t n,
                         std::vector<int> explicit_ranks, bool identity);
  Status CheckDims(std::span<const int> dims) const;

  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;  // row-major strides over shape_
  std::vector<std::string> names_;
  // The member list, shared by copies. Explicit ranks are stored by CreateWithRanks; for identity
  // meshes `list` stays empty until ranks() first asks for it (`built` guards that one fill).
  struct RankStore {
    std::vector<int> list;
    std::once_flag built;
  };
  std::shared_ptr<RankStore> ranks_;  // never null
  int size_ = 0;
  bool identity_ranks_ = true;  // rank(i) == i
  uint64_t fingerprint_ = 0;
};

}  // namespace meshflow

#endif  // MESHFLOW_MESH_DEVICE_MESH_H_
