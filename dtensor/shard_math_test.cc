// Shard math: Layout::LocalBoxAt against an independent reference, exhaustively over small
// meshes, tensor sizes, placements and shard orders.
//
// Reference semantics (DESIGN.md): Shard(d) splits like torch.chunk (chunk = ceil(n/k), rank i
// holds [i*chunk, min(n, (i+1)*chunk)), possibly empty); several mesh dims sharding one tensor
// dim split it one after the other in the shard order (default: ascending mesh dim), each
// chunking the interval left by the previous ones.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/dtensor/box.h"
#include "meshflow/dtensor/layout.h"

namespace meshflow {
namespace {

// ---------------------------------------------------------------------------------------------
// Reference implementation (deliberately written differently from ChunkOf / LocalBoxAt).

struct RefInterval {
  int64_t lo, hi;
};

// torch.chunk part i of k of [lo, hi).
RefInterval RefChunk(RefInterval iv, int64_t k, int64_t i) {
  const int64_t n = iv.hi - iv.lo;
  int64_t chunk = n / k;
  if (chunk * k < n) ++chunk;
  int64_t first = i * chunk;
  int64_t last = (i + 1) * chunk;
  if (first > n) first = n;
  if (last > n) last = n;
  return {iv.lo + first, iv.lo + last};
}

// Mesh coordinate of mesh index `index`, row-major.
std::vector<int64_t> RefCoord(const std::vector<int64_t>& mesh_shape, int64_t index) {
  std::vector<int64_t> c(mesh_shape.size());
  for (size_t k = mesh_shape.size(); k-- > 0;) {
    c[k] = index % mesh_shape[k];
    index /= mesh_shape[k];
  }
  return c;
}

// The box at `coord`. `order[t]` lists the mesh dims sharding tensor dim t in split order; when
// empty (and the dim is sharded) the ascending mesh dims are used.
Box RefBox(const std::vector<int64_t>& shape, const std::vector<int64_t>& mesh_shape, const Placements& ps,
           const ShardOrder& order, const std::vector<int64_t>& coord) {
  Box b;
  for (size_t t = 0; t < shape.size(); ++t) {
    std::vector<int> dims;
    if (t < order.size() && !order[t].empty()) {
      dims = order[t];
    } else {
      for (size_t m = 0; m < ps.size(); ++m) {
        if (IsShard(ps[m], static_cast<int>(t))) dims.push_back(static_cast<int>(m));
      }
    }
    RefInterval iv{0, shape[t]};
    for (int m : dims) iv = RefChunk(iv, mesh_shape[m], coord[m]);
    b.offset.push_back(iv.lo);
    b.shape.push_back(iv.hi - iv.lo);
  }
  return b;
}

int64_t Prod(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t x : v) n *= x;
  return n;
}

// ---------------------------------------------------------------------------------------------
// Enumeration helpers.

// Every shape of `ndim` dims with sizes 1..4 and at most `max_total` ranks.
std::vector<std::vector<int64_t>> MeshShapes(int ndim, int64_t max_total) {
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> s(ndim, 1);
  while (true) {
    if (Prod(s) <= max_total) out.push_back(s);
    int d = ndim - 1;
    while (d >= 0 && s[d] == 4) s[d--] = 1;
    if (d < 0) break;
    ++s[d];
  }
  return out;
}

// Every placement list of length n over {S(0), S(1), R} (plus P when with_partial; Partial
// boxes are those of Replicate, so the larger sweeps leave it out).
std::vector<Placements> AllPlacements(int n, bool with_partial) {
  Placements options = {Shard{0}, Shard{1}, Replicate{}};
  if (with_partial) options.push_back(Partial{});
  std::vector<Placements> out;
  std::vector<int> idx(n, 0);
  while (true) {
    Placements ps;
    for (int i : idx) ps.push_back(options[i]);
    out.push_back(ps);
    int d = n - 1;
    while (d >= 0 && idx[d] == static_cast<int>(options.size()) - 1) idx[d--] = 0;
    if (d < 0) break;
    ++idx[d];
  }
  return out;
}

// Every explicit shard order for `ps` on a rank-2 tensor (all permutations per tensor dim, the
// identity included), plus the empty (default) order first.
std::vector<ShardOrder> AllOrders(const Placements& ps) {
  std::vector<std::vector<std::vector<int>>> perms(2);
  for (int t = 0; t < 2; ++t) {
    std::vector<int> dims;
    for (size_t m = 0; m < ps.size(); ++m) {
      if (IsShard(ps[m], t)) dims.push_back(static_cast<int>(m));
    }
    do {
      perms[t].push_back(dims);
    } while (std::next_permutation(dims.begin(), dims.end()));
  }
  std::vector<ShardOrder> out = {ShardOrder{}};
  for (const auto& a : perms[0]) {
    for (const auto& b : perms[1]) out.push_back(ShardOrder{a, b});
  }
  return out;
}

std::string Describe(const Layout& l) { return l.ToString(); }

bool Overlap(const Box& a, const Box& b) {
  for (int d = 0; d < a.rank(); ++d) {
    if (std::max(a.offset[d], b.offset[d]) >= std::min(a.offset[d] + a.shape[d], b.offset[d] + b.shape[d])) {
      return false;
    }
  }
  return true;
}

// Checks one layout; returns the number of boxes compared (0 after a failure). The hot loops use
// plain comparisons and report once, to keep the exhaustive sweep fast.
int64_t CheckLayout(const Layout& l, const std::vector<int64_t>& mesh_shape, const Placements& ps,
                    const ShardOrder& order) {
  const std::vector<int64_t>& shape = l.global_shape();
  const int64_t nranks = Prod(mesh_shape);
  int64_t expected_holders = 1;
  for (size_t m = 0; m < ps.size(); ++m) {
    if (!IsShard(ps[m])) expected_holders *= mesh_shape[m];
  }
  std::vector<Box> boxes;
  boxes.reserve(static_cast<size_t>(nranks));
  for (int64_t r = 0; r < nranks; ++r) {
    const std::vector<int64_t> coord = RefCoord(mesh_shape, r);
    Box got = l.LocalBoxAt(coord);
    const Box want = RefBox(shape, mesh_shape, ps, order, coord);
    if (got != want) {
      ADD_FAILURE() << Describe(l) << " rank " << r << ": got " << got.ToString() << " want " << want.ToString();
      return 0;
    }
    boxes.push_back(std::move(got));
  }
  // LocalBox / AllLocalBoxes agree with LocalBoxAt.
  if (l.AllLocalBoxes() != boxes) {
    ADD_FAILURE() << Describe(l) << ": AllLocalBoxes differs from LocalBoxAt";
    return 0;
  }

  // Every element is held by exactly expected_holders ranks (boxes inside the tensor).
  const int64_t n0 = shape[0], n1 = shape[1];
  std::vector<int64_t> count(static_cast<size_t>(n0 * n1), 0);
  for (const Box& b : boxes) {
    if (b.shape[0] < 0 || b.shape[1] < 0 || b.offset[0] < 0 || b.offset[1] < 0 ||
        b.offset[0] + b.shape[0] > n0 || b.offset[1] + b.shape[1] > n1) {
      ADD_FAILURE() << Describe(l) << ": box " << b.ToString() << " is outside the tensor";
      return 0;
    }
    for (int64_t i = b.offset[0]; i < b.offset[0] + b.shape[0]; ++i) {
      for (int64_t j = b.offset[1]; j < b.offset[1] + b.shape[1]; ++j) ++count[i * n1 + j];
    }
  }
  for (int64_t e = 0; e < n0 * n1; ++e) {
    if (count[e] != expected_holders) {
      ADD_FAILURE() << Describe(l) << ": element " << e << " held " << count[e] << " times, want "
                    << expected_holders;
      return 0;
    }
  }
  // NumHolders agrees on the corners and the middle.
  if (n0 > 0 && n1 > 0) {
    for (const std::vector<int64_t>& idx : {std::vector<int64_t>{0, 0}, std::vector<int64_t>{n0 - 1, n1 - 1},
                                            std::vector<int64_t>{n0 / 2, n1 / 2}}) {
      if (l.NumHolders(idx) != expected_holders) {
        ADD_FAILURE() << Describe(l) << ": NumHolders(" << idx[0] << "," << idx[1] << ") = " << l.NumHolders(idx)
                      << ", want " << expected_holders;
        return 0;
      }
    }
  }
  // Boxes are pairwise identical or disjoint.
  for (size_t a = 0; a < boxes.size(); ++a) {
    for (size_t b = a + 1; b < boxes.size(); ++b) {
      if (boxes[a] != boxes[b] && Overlap(boxes[a], boxes[b])) {
        ADD_FAILURE() << Describe(l) << ": boxes " << boxes[a].ToString() << " and " << boxes[b].ToString()
                      << " overlap partially";
        return 0;
      }
    }
  }
  // Distinct non-empty boxes partition the tensor.
  std::set<std::pair<std::vector<int64_t>, std::vector<int64_t>>> distinct;
  int64_t covered = 0;
  for (const Box& b : boxes) {
    if (!b.empty() && distinct.insert({b.offset, b.shape}).second) covered += b.NumElements();
  }
  if (covered != n0 * n1) {
    ADD_FAILURE() << Describe(l) << ": distinct boxes cover " << covered << " of " << n0 * n1 << " elements";
    return 0;
  }
  return static_cast<int64_t>(boxes.size());
}

// Runs every mesh of `ndim` dims (sizes 1..4, at most max_ranks ranks), every placement list,
// every shard order, over the given tensor shapes.
void RunExhaustive(int ndim, int64_t min_size, int64_t max_ranks, bool with_partial,
                   const std::vector<std::vector<int64_t>>& shapes, int64_t min_ranks = 1) {
  int64_t layouts = 0, boxes = 0;
  for (const auto& mesh_shape : MeshShapes(ndim, max_ranks)) {
    if (*std::min_element(mesh_shape.begin(), mesh_shape.end()) < min_size) continue;
    if (Prod(mesh_shape) < min_ranks) continue;
    auto mesh = DeviceMesh::Create(mesh_shape);
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    for (const Placements& ps : AllPlacements(ndim, with_partial)) {
      for (const ShardOrder& order : AllOrders(ps)) {
        for (const auto& shape : shapes) {
          auto l = Layout::Create(shape, *mesh, ps, order);
          ASSERT_TRUE(l.ok()) << l.status();
          ++layouts;
          boxes += CheckLayout(*l, mesh_shape, ps, order);
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  }
  ::testing::Test::RecordProperty("layouts", static_cast<int>(layouts));
  EXPECT_GT(layouts, 0);
  EXPECT_GT(boxes, 0);
}

// All (n0, n1) with 0 <= n0, n1 <= 13.
std::vector<std::vector<int64_t>> AllShapes() {
  std::vector<std::vector<int64_t>> out;
  for (int64_t a = 0; a <= 13; ++a) {
    for (int64_t b = 0; b <= 13; ++b) out.push_back({a, b});
  }
  return out;
}

// 14 shapes in which each dim takes every size 0..13 once (a Latin pairing), for the larger
// 3-D sweep. Tensor dims are split independently, so this covers every size per dim.
std::vector<std::vector<int64_t>> PairedShapes() {
  std::vector<std::vector<int64_t>> out;
  for (int64_t a = 0; a <= 13; ++a) out.push_back({a, (a * 5 + 3) % 14});
  return out;
}

// 1-D meshes of size 1..4, every placement incl. Partial, every 2-D tensor shape up to 13x13.
TEST(ShardMathExhaustiveTest, OneDimMeshes) { RunExhaustive(1, 1, 4, /*with_partial=*/true, AllShapes()); }
// 2-D meshes with sizes 1..4, paired shapes; those with both sizes >= 2 also every shape.
TEST(ShardMathExhaustiveTest, TwoDimMeshes) { RunExhaustive(2, 1, 16, /*with_partial=*/false, PairedShapes()); }
TEST(ShardMathExhaustiveTest, TwoDimMeshesAllShapes) {
  RunExhaustive(2, 2, 16, /*with_partial=*/false, AllShapes());
}
// 2-D meshes with Partial in the mix, paired shapes.
TEST(ShardMathExhaustiveTest, TwoDimMeshesWithPartial) {
  RunExhaustive(2, 1, 16, /*with_partial=*/true, PairedShapes());
}
// 3-D meshes with sizes 1..4 and at most 24 ranks, paired shapes.
TEST(ShardMathExhaustiveTest, ThreeDimMeshes) { RunExhaustive(3, 1, 24, /*with_partial=*/false, PairedShapes()); }
// 3-D meshes with every size >= 2 and 8..12 ranks (2x2x2, 2x2x3, 2x3x2, 3x2x2), every shape.
TEST(ShardMathExhaustiveTest, ThreeDimMeshesAllShapes) {
  RunExhaustive(3, 2, 12, /*with_partial=*/false, AllShapes());
}

TEST(ShardMathExhaustiveTest, EnumerationIsComplete) {
  EXPECT_EQ(MeshShapes(1, 4).size(), 4u);
  EXPECT_EQ(MeshShapes(2, 16).size(), 16u);
  EXPECT_EQ(AllPlacements(3, true).size(), 64u);
  EXPECT_EQ(AllPlacements(3, false).size(), 27u);
  // S(0) on all three mesh dims: 3! explicit orders plus the default.
  EXPECT_EQ(AllOrders({Shard{0}, Shard{0}, Shard{0}}).size(), 7u);
  EXPECT_EQ(AllOrders({Shard{0}, Shard{1}, Shard{0}}).size(), 3u);
}

// ---------------------------------------------------------------------------------------------
// Hand-written cases.

std::vector<int64_t> Sizes(const Layout& l, int tensor_dim) {
  std::vector<int64_t> out;
  for (const Box& b : l.AllLocalBoxes()) out.push_back(b.shape[tensor_dim]);
  return out;
}
std::vector<int64_t> Offsets(const Layout& l, int tensor_dim) {
  std::vector<int64_t> out;
  for (const Box& b : l.AllLocalBoxes()) out.push_back(b.offset[tensor_dim]);
  return out;
}

TEST(ShardMathTest, UnevenOneDim) {
  const DeviceMesh m4 = *DeviceMesh::Create({4});
  auto l5 = Layout::Create({5}, m4, {Shard{0}});
  ASSERT_TRUE(l5.ok());
  EXPECT_EQ(Sizes(*l5, 0), (std::vector<int64_t>{2, 2, 1, 0}));
  EXPECT_EQ(Offsets(*l5, 0), (std::vector<int64_t>{0, 2, 4, 5}));
  auto l2 = Layout::Create({2}, m4, {Shard{0}});
  ASSERT_TRUE(l2.ok());
  EXPECT_EQ(Sizes(*l2, 0), (std::vector<int64_t>{1, 1, 0, 0}));
  auto l6 = Layout::Create({6}, m4, {Shard{0}});
  ASSERT_TRUE(l6.ok());
  EXPECT_EQ(Sizes(*l6, 0), (std::vector<int64_t>{2, 2, 2, 0}));
  auto l0 = Layout::Create({0}, m4, {Shard{0}});
  ASSERT_TRUE(l0.ok());
  EXPECT_EQ(Sizes(*l0, 0), (std::vector<int64_t>{0, 0, 0, 0}));
  auto l8 = Layout::Create({8}, m4, {Shard{0}});
  ASSERT_TRUE(l8.ok());
  EXPECT_EQ(Sizes(*l8, 0), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(Offsets(*l8, 0), (std::vector<int64_t>{0, 2, 4, 6}));
}

TEST(ShardMathTest, NestedIsNotFlatChunking) {
  // n=5 on a 2x2 mesh, S(0),S(0): outer halves [0,3) [3,5), then each halved again:
  // sizes 2,1,1,1, unlike torch.chunk(5, 4) = 2,2,1,0.
  const DeviceMesh m = *DeviceMesh::Create({2, 2});
  auto l = Layout::Create({5}, m, {Shard{0}, Shard{0}});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(Sizes(*l, 0), (std::vector<int64_t>{2, 1, 1, 1}));
  EXPECT_EQ(Offsets(*l, 0), (std::vector<int64_t>{0, 2, 3, 4}));
  // n=7: [0,4) [4,7) -> [0,2) [2,4) [4,6) [6,7).
  auto l7 = Layout::Create({7}, m, {Shard{0}, Shard{0}});
  ASSERT_TRUE(l7.ok());
  EXPECT_EQ(Sizes(*l7, 0), (std::vector<int64_t>{2, 2, 2, 1}));
  // Same with mesh dim 1 splitting first: rank (i, j) takes outer chunk j, inner chunk i.
  auto r7 = Layout::Create({7}, m, {Shard{0}, Shard{0}}, {{1, 0}});
  ASSERT_TRUE(r7.ok());
  EXPECT_EQ(Offsets(*r7, 0), (std::vector<int64_t>{0, 4, 2, 6}));
  EXPECT_EQ(Sizes(*r7, 0), (std::vector<int64_t>{2, 2, 2, 1}));
}

TEST(ShardMathTest, NestedWithEmptyShards) {
  // n=3 on 2x3, S(0),S(0): [0,2) [2,3); [0,2) over 3 -> 1,1,0; [2,3) over 3 -> 1,0,0.
  const DeviceMesh m = *DeviceMesh::Create({2, 3});
  auto l = Layout::Create({3}, m, {Shard{0}, Shard{0}});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(Sizes(*l, 0), (std::vector<int64_t>{1, 1, 0, 1, 0, 0}));
  EXPECT_EQ(Offsets(*l, 0), (std::vector<int64_t>{0, 1, 2, 2, 3, 3}));
  // Reversed: [0,1) [1,2) [2,3) over mesh dim 1, then each over 2: 1,0 each.
  auto r = Layout::Create({3}, m, {Shard{0}, Shard{0}}, {{1, 0}});
  ASSERT_TRUE(r.ok());
  // Rank order (0,0) (0,1) (0,2) (1,0) (1,1) (1,2).
  EXPECT_EQ(Sizes(*r, 0), (std::vector<int64_t>{1, 1, 1, 0, 0, 0}));
  EXPECT_EQ(Offsets(*r, 0), (std::vector<int64_t>{0, 1, 2, 1, 2, 3}));
}

TEST(ShardMathTest, ThreeLevelNesting) {
  // n=13 on 2x2x3 with S(0) everywhere, order [2,0,1]: 13 over 3 -> [0,5) [5,10) [10,13);
  // then over 2 -> e.g. [10,12) [12,13); then over 2 -> [12,13) [13,13).
  const DeviceMesh m = *DeviceMesh::Create({2, 2, 3});
  auto l = Layout::Create({13}, m, {Shard{0}, Shard{0}, Shard{0}}, {{2, 0, 1}});
  ASSERT_TRUE(l.ok()) << l.status();
  const int64_t c[] = {1, 0, 2};
  EXPECT_EQ(l->LocalBoxAt(c), (Box{{12}, {1}}));
  const int64_t c2[] = {1, 1, 2};
  EXPECT_EQ(l->LocalBoxAt(c2).shape[0], 0);
  const int64_t c3[] = {0, 1, 1};
  // [5,10) -> [5,8) -> [7,8).
  EXPECT_EQ(l->LocalBoxAt(c3), (Box{{7}, {1}}));
}

TEST(ShardMathTest, ReplicateAndPartialHoldEverything) {
  const DeviceMesh m = *DeviceMesh::Create({2, 3});
  auto l = Layout::Create({4, 5}, m, {Replicate{}, Partial{}});
  ASSERT_TRUE(l.ok());
  for (const Box& b : l->AllLocalBoxes()) EXPECT_EQ(b, (Box{{0, 0}, {4, 5}}));
  EXPECT_EQ(l->NumHolders(std::vector<int64_t>{3, 4}), 6);
}

}  // namespace
}  // namespace meshflow
