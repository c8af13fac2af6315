#include "meshflow/mesh/device_mesh.h"

#include <functional>

#include <algorithm>
#include <numeric>
#include <set>
#include <sstream>

namespace meshflow {
namespace {

std::string JoinInts(std::span<const int64_t> v, const char* sep) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? sep : "") << v[i];
  return os.str();
}

// Number of ranks of a mesh shape. Errors: empty shape, a size < 1, more than 2^30 ranks.
StatusOr<int64_t> CheckedSize(std::span<const int64_t> shape) {
  if (shape.empty()) return InvalidArgumentError("mesh shape is empty; a mesh needs at least one dim");
  constexpr int64_t kMaxRanks = int64_t{1} << 30;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 1) {
      return InvalidArgumentError("mesh dim " + std::to_string(d) + " has size " +
                                  std::to_string(shape[d]) + " (mesh shape " + JoinInts(shape, "x") +
                                  "); every size must be >= 1");
    }
  }
  int64_t n = 1;
  for (int64_t s : shape) {
    // n <= kMaxRanks here, so the check below cannot overflow.
    if (s > kMaxRanks / n) return InvalidArgumentError("mesh shape " + JoinInts(shape, "x") + " is too large");
    n *= s;
  }
  return n;
}

}  // namespace

namespace {

// Checks the dim names of a mesh of `ndim` dims (none, or one non-empty unique name per dim).
Status CheckNames(size_t ndim, const std::vector<std::string>& names) {
  if (names.empty()) return Status();
  if (names.size() != ndim) {
    return InvalidArgumentError("mesh has " + std::to_string(ndim) + " dims but " + std::to_string(names.size()) +
                                " names were given");
  }
  std::set<std::string> seen;
  for (size_t d = 0; d < names.size(); ++d) {
    if (names[d].empty()) return InvalidArgumentError("mesh dim " + std::to_string(d) + " has an empty name");
    if (!seen.insert(names[d]).second) return InvalidArgumentError("mesh dim name '" + names[d] + "' is used twice");
  }
  return Status();
}

}  // namespace

DeviceMesh DeviceMesh::Make(std::vector<int64_t> shape, std::vector<std::string> names, int64_t n,
                            std::vector<int> explicit_ranks, bool identity) {
  DeviceMesh mesh;
  uint64_t h = 0x6d657368ull;  // "mesh"
  for (int64_t d : shape) HashMix(h, static_cast<uint64_t>(d));
  HashMix(h, names.size());
  for (const std::string& name : names) HashMix(h, std::hash<std::string>()(name));
  // Identity meshes hash a marker instead of 0..n-1: O(ndim), and equal for Create and for
  // CreateWithRanks given 0..n-1 (identity is decided by the content, so equal meshes agree).
  HashMix(h, identity ? 0x696f7461ull : 0x6c697374ull);  // "iota" / "list"
  if (!identity) {
    for (int r : explicit_ranks) HashMix(h, static_cast<uint64_t>(r));
  }
  mesh.fingerprint_ = h;
  mesh.shape_ = std::move(shape);
  mesh.names_ = std::move(names);
  mesh.size_ = static_cast<int>(n);
  mesh.identity_ranks_ = identity;
  mesh.ranks_ = std::make_shared<RankStore>();
  if (!explicit_ranks.empty()) {
    // Given explicitly (identity or not): stored as given, nothing left to build.
    mesh.ranks_->list = std::move(explicit_ranks);
    std::call_once(mesh.ranks_->built, [] {});
  }
  mesh.strides_.assign(mesh.shape_.size(), 1);
  for (int d = mesh.ndim() - 2; d >= 0; --d) mesh.strides_[d] = mesh.strides_[d + 1] * mesh.shape_[d + 1];
  return mesh;
}

StatusOr<DeviceMesh> DeviceMesh::Create(std::vector<int64_t> shape, std::vector<std::string> names) {
  // O(ndim): a mesh over world ranks 0..n-1 stores no rank list (rank(i) == i), so even the
  // 2^30-rank maximum costs a few bytes. A bad or huge shape is an error, never an overflow.
  MF_ASSIGN_OR_RETURN(const int64_t n, CheckedSize(shape));
  MF_RETURN_IF_ERROR(CheckNames(shape.size(), names));
  return Make(std::move(shape), std::move(names), n, {}, /*identity=*/true);
}

StatusOr<DeviceMesh> DeviceMesh::CreateWithRanks(std::vector<int64_t> shape, std::vector<int> ranks,
                                                 std::vector<std::string> names) {
  MF_ASSIGN_OR_RETURN(const int64_t n, CheckedSize(shape));
  MF_RETURN_IF_ERROR(CheckNames(shape.size(), names));
  if (static_cast<int64_t>(ranks.size()) != n) {
    return InvalidArgumentError("mesh shape " + JoinInts(shape, "x") + " has " + std::to_string(n) +
                                " ranks but " + std::to_string(ranks.size()) + " ranks were given");
  }
  bool identity = true;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0) return InvalidArgumentError("mesh rank " + std::to_string(ranks[i]) + " is negative");
    identity = identity && ranks[i] == static_cast<int>(i);
  }
  if (!identity) {
    // Duplicates: a sorted copy (4 bytes a rank; a std::set would take ~40).
    std::vector<int> sorted = ranks;
    std::sort(sorted.begin(), sorted.end());
    const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
    if (dup != sorted.end()) return InvalidArgumentError("rank " + std::to_string(*dup) + " appears twice in the mesh");
  }
  return Make(std::move(shape), std::move(names), n, std::move(ranks), identity);
}

const std::vector<int>& DeviceMesh::ranks() const {
  // Identity meshes build 0..n-1 once, on first use; explicit lists were marked built by Make.
  std::call_once(ranks_->built, [this] {
    ranks_->list.resize(static_cast<size_t>(size_));
    std::iota(ranks_->list.begin(), ranks_->list.end(), 0);
  });
  return ranks_->list;
}

StatusOr<int> DeviceMesh::DimIndex(std::string_view name) const {
  for (int d = 0; d < ndim(); ++d) {
    if (!names_.empty() && names_[d] == name) return d;
  }
  return NotFoundError("mesh " + ToString() + " has no dim named '" + std::string(name) + "'");
}

std::string DeviceMesh::DimName(int d) const {
  if (!names_.empty()) return names_[d];
  return "d" + std::to_string(d);
}

bool DeviceMesh::Contains(int rank) const { return IndexOf(rank).ok(); }

StatusOr<int> DeviceMesh::IndexOf(int rank) const {
  if (identity_ranks_) {
    if (rank >= 0 && rank < size()) return rank;
  } else {
    const std::vector<int>& list = ranks_->list;
    auto it = std::find(list.begin(), list.end(), rank);
    if (it != list.end()) return static_cast<int>(it - list.begin());
  }
  return OutOfRangeError("rank " + std::to_string(rank) + " is not in " + ToString());
}

StatusOr<std::vector<int64_t>> DeviceMesh::Coordinate(int rank) const {
  MF_ASSIGN_OR_RETURN(int index, IndexOf(rank));
  std::vector<int64_t> coord(shape_.size());
  for (int d = 0; d < ndim(); ++d) coord[d] = (index / strides_[d]) % shape_[d];
  return coord;
}

StatusOr<int> DeviceMesh::RankAt(std::span<const int64_t> coord) const {
  if (static_cast<int>(coord.size()) != ndim()) {
    return InvalidArgumentError("coordinate has " + std::to_string(coord.size()) + " components; " +
                                ToString() + " has " + std::to_string(ndim()) + " dims");
  }
  int64_t index = 0;
  for (int d = 0; d < ndim(); ++d) {
    if (coord[d] < 0 || coord[d] >= shape_[d]) {
      return OutOfRangeError("coordinate " + JoinInts(coord, ",") + " is outside " + ToString());
    }
    index += coord[d] * strides_[d];
  }
  return rank(static_cast<int>(index));
}

Status DeviceMesh::CheckDims(std::span<const int> dims) const {
  std::vector<bool> seen(shape_.size(), false);
  for (int d : dims) {
    if (d < 0 || d >= ndim()) {
      return OutOfRangeError("mesh dim " + std::to_string(d) + " is out of range for " + ToString());
    }
    if (seen[d]) return InvalidArgumentError("mesh dim " + std::to_string(d) + " is repeated");
    seen[d] = true;
  }
  return Status();
}

StatusOr<std::vector<int>> DeviceMesh::Group(int rank, int dim) const {
  const int dims[1] = {dim};
  return Group(rank, std::span<const int>(dims, 1));
}

StatusOr<std::vector<int>> DeviceMesh::Group(int rank, std::span<const int> dims) const {
  MF_RETURN_IF_ERROR(CheckDims(dims));
  MF_ASSIGN_OR_RETURN(int index, IndexOf(rank));
  // Base index: this rank with the coordinates of `dims` zeroed.
  int64_t base = index;
  int64_t count = 1;
  for (int d : dims) {
    base -= ((index / strides_[d]) % shape_[d]) * strides_[d];
    count *= shape_[d];
  }
  std::vector<int> group;
  group.reserve(static_cast<size_t>(count));
  for (int64_t j = 0; j < count; ++j) {
    // Decompose j row-major over dims (last dim fastest).
    int64_t rem = j, offset = 0;
    for (int k = static_cast<int>(dims.size()) - 1; k >= 0; --k) {
      const int d = dims[k];
      offset += (rem % shape_[d]) * strides_[d];
      rem /= shape_[d];
    }
    group.push_back(this->rank(static_cast<int>(base + offset)));
  }
  return group;
}

StatusOr<std::vector<std::vector<int>>> DeviceMesh::AllGroups(std::span<const int> dims) const {
  MF_RETURN_IF_ERROR(CheckDims(dims));
  std::vector<std::vector<int>> groups;
  std::vector<bool> done(static_cast<size_t>(size()), false);
  for (int i = 0; i < size(); ++i) {
    if (done[i]) continue;
    MF_ASSIGN_OR_RETURN(std::vector<int> g, Group(rank(i), dims));
    for (int r : g) done[*IndexOf(r)] = true;
    groups.push_back(std::move(g));
  }
  return groups;
}

StatusOr<DeviceMesh> DeviceMesh::Slice(std::span<const std::string> names, int rank) const {
  std::vector<int> dims;
  for (const std::string& n : names) {
    MF_ASSIGN_OR_RETURN(int d, DimIndex(n));
    dims.push_back(d);
  }
  if (dims.empty()) return InvalidArgumentError("Slice needs at least one dim name");
  MF_ASSIGN_OR_RETURN(std::vector<int> group, Group(rank, dims));
  std::vector<int64_t> shape;
  for (int d : dims) shape.push_back(shape_[d]);
  return CreateWithRanks(std::move(shape), std::move(group),
                         std::vector<std::string>(names.begin(), names.end()));
}

std::string DeviceMesh::ToString() const {
  std::ostringstream os;
  os << "mesh(" << JoinInts(shape_, "x");
  if (!names_.empty()) {
    os << ", [";
    for (size_t i = 0; i < names_.size(); ++i) os << (i ? ", " : "") << names_[i];
    os << "]";
  }
  if (!identity_ranks_) {
    os << ", ranks {";
    for (int i = 0; i < size(); ++i) os << (i ? "," : "") << rank(i);
    os << "}";
  }
  os << ")";
  return os.str();
}

}  // namespace meshflow
