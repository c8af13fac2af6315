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

StatusOr<DeviceMesh> DeviceMesh::Create(std::vector<int64_t> shape, std::vector<std::string> names) {
  // Validate the shape before allocating the rank list: a bad or huge shape must give an error,
  // not an overflow or an allocation failure.
  MF_ASSIGN_OR_RETURN(const int64_t n, CheckedSize(shape));
  std::vector<int> ranks(static_cast<size_t>(n));
  std::iota(ranks.begin(), ranks.end(), 0);
  return CreateWithRanks(std::move(shape), std::move(ranks), std::move(names));
}

StatusOr<DeviceMesh> DeviceMesh::CreateWithRanks(std::vector<int64_t> shape, std::vector<int> ranks,
                                                 std::vector<std::string> names) {
  MF_ASSIGN_OR_RETURN(const int64_t n, CheckedSize(shape));
  if (!names.empty()) {
    if (names.size() != shape.size()) {
      return InvalidArgumentError("mesh has " + std::to_string(shape.size()) + " dims but " +
                                  std::to_string(names.size()) + " names were given");
    }
    std::set<std::string> seen;
    for (size_t d = 0; d < names.size(); ++d) {
      if (names[d].empty()) return InvalidArgumentError("mesh dim " + std::to_string(d) + " has an empty name");
      if (!seen.insert(names[d]).second) {
        return InvalidArgumentError("mesh dim name '" + names[d] + "' is used twice");
      }
    }
  }
  if (static_cast<int64_t>(ranks.size()) != n) {
    return InvalidArgumentError("mesh shape " + JoinInts(shape, "x") + " has " + std::to_string(n) +
                                " ranks but " + std::to_string(ranks.size()) + " ranks were given");
  }
  std::set<int> seen_ranks;
  bool identity = true;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0) return InvalidArgumentError("mesh rank " + std::to_string(ranks[i]) + " is negative");
    if (!seen_ranks.insert(ranks[i]).second) {
      return InvalidArgumentError("rank " + std::to_string(ranks[i]) + " appears twice in the mesh");
    }
    identity = identity && ranks[i] == static_cast<int>(i);
  }
  DeviceMesh mesh;
  uint64_t h = 0x6d657368ull;  // "mesh"
  for (int64_t d : shape) HashMix(h, static_cast<uint64_t>(d));
  HashMix(h, names.size());
  for (const std::string& name : names) HashMix(h, std::hash<std::string>()(name));
  for (int r : ranks) HashMix(h, static_cast<uint64_t>(r));
  mesh.fingerprint_ = h;
  mesh.shape_ = std::move(shape);
  mesh.names_ = std::move(names);
  mesh.ranks_ = std::make_shared<const std::vector<int>>(std::move(ranks));
  mesh.identity_ranks_ = identity;
  mesh.strides_.assign(mesh.shape_.size(), 1);
  for (int d = mesh.ndim() - 2; d >= 0; --d) mesh.strides_[d] = mesh.strides_[d + 1] * mesh.shape_[d + 1];
  return mesh;
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
    auto it = std::find(ranks_->begin(), ranks_->end(), rank);
    if (it != ranks_->end()) return static_cast<int>(it - ranks_->begin());
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
  return (*ranks_)[index];
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
    group.push_back((*ranks_)[base + offset]);
  }
  return group;
}

StatusOr<std::vector<std::vector<int>>> DeviceMesh::AllGroups(std::span<const int> dims) const {
  MF_RETURN_IF_ERROR(CheckDims(dims));
  std::vector<std::vector<int>> groups;
  std::vector<bool> done(ranks_->size(), false);
  for (int i = 0; i < size(); ++i) {
    if (done[i]) continue;
    MF_ASSIGN_OR_RETURN(std::vector<int> g, Group((*ranks_)[i], dims));
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
    for (size_t i = 0; i < ranks_->size(); ++i) os << (i ? "," : "") << (*ranks_)[i];
    os << "}";
  }
  os << ")";
  return os.str();
}

}  // namespace meshflow
