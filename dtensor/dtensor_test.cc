#include "meshflow/dtensor/dtensor.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace meshflow {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr DType kAllDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64};

DeviceMesh Mesh(std::vector<int64_t> shape) { return *DeviceMesh::Create(std::move(shape)); }

Layout MakeLayout(std::vector<int64_t> shape, DeviceMesh mesh, Placements ps, ShardOrder order = {}) {
  auto l = Layout::Create(std::move(shape), std::move(mesh), std::move(ps), std::move(order));
  EXPECT_TRUE(l.ok()) << l.status();
  return *l;
}

// ---------------------------------------------------------------------------------------------
// FromLocal.

TEST(DTensorTest, FromLocalAcceptsTheBoxShape) {
  const Layout l = MakeLayout({5, 4}, Mesh({2, 2}), {Shard{0}, Shard{1}});
  // Rank 2 = (1, 0): rows [3,5), cols [0,2).
  Tensor local = Tensor::Iota(DType::kI32, {2, 2});
  auto d = DTensor::FromLocal(local, l, 2);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->rank(), 2);
  EXPECT_EQ(d->dtype(), DType::kI32);
  EXPECT_EQ(d->layout(), l);
  EXPECT_THAT(d->global_shape(), ElementsAre(5, 4));
  EXPECT_EQ(d->box(), (Box{{3, 0}, {2, 2}}));
  EXPECT_EQ(d->local(), local);
  EXPECT_EQ(d->to_local(), local);
  d->mutable_local().SetFromDouble(0, 9);
  EXPECT_EQ(d->local().GetAsDouble(0), 9.0);
  EXPECT_EQ(local.GetAsDouble(0), 0.0);  // FromLocal copied the value
}

TEST(DTensorTest, FromLocalShapeMismatch) {
  const Layout l = MakeLayout({5, 4}, Mesh({2, 2}), {Shard{0}, Shard{1}});
  auto d = DTensor::FromLocal(Tensor::Zeros(DType::kF32, {3, 2}), l, 2);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), HasSubstr("rank 2 passed a local tensor of shape [3,2]"));
  EXPECT_THAT(d.status().message(), HasSubstr("box [3:5, 0:2] of shape [2,2]"));
  // Rank mismatch (different tensor rank) is a shape mismatch too.
  EXPECT_FALSE(DTensor::FromLocal(Tensor::Zeros(DType::kF32, {4}), l, 0).ok());
  // Empty shards are legal: n=2 over 4 ranks leaves ranks 2 and 3 empty.
  const Layout e = MakeLayout({2}, Mesh({4}), {Shard{0}});
  EXPECT_TRUE(DTensor::FromLocal(Tensor::Zeros(DType::kF32, {0}), e, 3).ok());
  EXPECT_FALSE(DTensor::FromLocal(Tensor::Zeros(DType::kF32, {1}), e, 3).ok());
}

TEST(DTensorTest, FromLocalRankNotInMesh) {
  const Layout l = MakeLayout({4}, Mesh({2}), {Shard{0}});
  auto d = DTensor::FromLocal(Tensor::Zeros(DType::kF32, {2}), l, 2);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kOutOfRange);
  EXPECT_FALSE(DTensor::FromLocal(Tensor::Zeros(DType::kF32, {2}), l, -1).ok());
}

// ---------------------------------------------------------------------------------------------
// Distribute.

TEST(DistributeTest, Errors) {
  const Layout l = MakeLayout({4, 2}, Mesh({2}), {Shard{0}});
  auto e1 = Distribute(Tensor::Iota(DType::kF32, {4, 3}), l, 0);
  ASSERT_FALSE(e1.ok());
  EXPECT_EQ(e1.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(e1.status().message(), HasSubstr("global tensor has shape [4,3]"));
  EXPECT_THAT(e1.status().message(), HasSubstr("expects [4,2]"));
  auto e2 = Distribute(Tensor::Iota(DType::kF32, {4, 2}), l, 5);
  ASSERT_FALSE(e2.ok());
  EXPECT_EQ(e2.status().code(), StatusCode::kOutOfRange);
  EXPECT_FALSE(ReferenceLocal(Tensor::Iota(DType::kF32, {8}), l, 0).ok());
}

TEST(DistributeTest, ShardAndReplicate) {
  const Tensor g = Tensor::Iota(DType::kF32, {5, 3});
  const Layout l = MakeLayout({5, 3}, Mesh({2, 2}), {Shard{0}, Replicate{}});
  for (int r = 0; r < 4; ++r) {
    auto d = Distribute(g, l, r);
    ASSERT_TRUE(d.ok()) << d.status();
    if (r < 2) {
      EXPECT_EQ(d->local(), *Tensor::FromVector<float>({3, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8}));
    } else {
      EXPECT_EQ(d->local(), *Tensor::FromVector<float>({2, 3}, {9, 10, 11, 12, 13, 14}));
    }
    EXPECT_EQ(d->box(), *l.LocalBox(r));
    EXPECT_EQ(d->rank(), r);
  }
  const Layout col = MakeLayout({5, 3}, Mesh({4}), {Shard{1}});
  // 3 columns over 4 ranks: 1,1,1,0.
  EXPECT_EQ(Distribute(g, col, 1)->local(), *Tensor::FromVector<float>({5, 1}, {1, 4, 7, 10, 13}));
  EXPECT_EQ(Distribute(g, col, 3)->local().shape(), (std::vector<int64_t>{5, 0}));
  const Layout rep = MakeLayout({5, 3}, Mesh({3}), {Replicate{}});
  for (int r = 0; r < 3; ++r) EXPECT_EQ(Distribute(g, rep, r)->local(), g);
}

TEST(DistributeTest, PartialSumKeepsValueOnCoordinateZero) {
  const Tensor g = Tensor::Iota(DType::kI32, {4, 2});
  // P(sum) on mesh dim 1, Shard(0) on mesh dim 0.
  const DeviceMesh m = Mesh({2, 3});
  const Layout l = MakeLayout({4, 2}, m, {Shard{0}, Partial{ReduceOp::kSum}});
  for (int r = 0; r < 6; ++r) {
    auto d = Distribute(g, l, r);
    ASSERT_TRUE(d.ok()) << d.status();
    const auto coord = *m.Coordinate(r);
    const Tensor slice = g.Slice(*l.LocalBox(r));
    if (coord[1] == 0) {
      EXPECT_EQ(d->local(), slice) << "rank " << r;
    } else {
      EXPECT_EQ(d->local(), Tensor::Zeros(DType::kI32, slice.shape())) << "rank " << r;
    }
  }
  // P(sum) on both dims: only coordinate (0, 0) keeps the value.
  const Layout pp = MakeLayout({4, 2}, m, {Partial{}, Partial{}});
  for (int r = 0; r < 6; ++r) {
    const Tensor local = Distribute(g, pp, r)->local();
    EXPECT_EQ(local, r == 0 ? g : Tensor::Zeros(DType::kI32, {4, 2})) << "rank " << r;
  }
  // On a sub-mesh, "coordinate 0" is the sub-mesh coordinate, not world rank 0.
  const std::string names[] = {"tp"};
  const DeviceMesh sub = *DeviceMesh::Create({2, 2}, {"dp", "tp"})->Slice(names, 3);  // ranks {2, 3}
  const Layout ls = MakeLayout({4, 2}, sub, {Partial{}});
  EXPECT_EQ(Distribute(g, ls, 2)->local(), g);
  EXPECT_EQ(Distribute(g, ls, 3)->local(), Tensor::Zeros(DType::kI32, {4, 2}));
}

TEST(DistributeTest, PartialAvgMaxMinKeepValue) {
  const Tensor g = Tensor::Iota(DType::kF64, {3, 2});
  const DeviceMesh m = Mesh({2, 2});
  for (ReduceOp op : {ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
    const Layout l = MakeLayout({3, 2}, m, {Partial{op}, Shard{1}});
    for (int r = 0; r < 4; ++r) {
      auto d = Distribute(g, l, r);
      ASSERT_TRUE(d.ok()) << d.status();
      EXPECT_EQ(d->local(), g.Slice(*l.LocalBox(r))) << ReduceOpName(op) << " rank " << r;
    }
  }
}

TEST(DistributeTest, ReferenceLocalMatchesDistribute) {
  const Tensor g = Tensor::Iota(DType::kBF16, {6, 5});
  const DeviceMesh m = Mesh({2, 2});
  for (const Placements& ps : {Placements{Shard{0}, Shard{1}}, Placements{Partial{}, Shard{0}},
                               Placements{Replicate{}, Partial{ReduceOp::kMax}}}) {
    const Layout l = MakeLayout({6, 5}, m, ps);
    for (int r = 0; r < 4; ++r) {
      auto ref = ReferenceLocal(g, l, r);
      ASSERT_TRUE(ref.ok());
      EXPECT_EQ(*ref, Distribute(g, l, r)->local());
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Property test: Distribute then reassemble gives back the input, bit exact.

struct RandomCase {
  DeviceMesh mesh = Mesh({1});
  std::vector<int64_t> shape;
  Placements placements;
  ShardOrder order;
};

RandomCase MakeRandomCase(std::mt19937& rng, bool allow_partial) {
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  RandomCase c;
  // Mesh: 1-3 dims, sizes 1..4, at most 8 ranks.
  std::vector<int64_t> mesh_shape;
  do {
    mesh_shape.assign(static_cast<size_t>(uni(1, 3)), 1);
    for (auto& s : mesh_shape) s = uni(1, 4);
  } while (mesh_shape[0] * (mesh_shape.size() > 1 ? mesh_shape[1] : 1) * (mesh_shape.size() > 2 ? mesh_shape[2] : 1) > 8);
  c.mesh = Mesh(mesh_shape);
  // Shape: rank 1-4, sizes 0..7.
  const int rank = uni(1, 4);
  for (int d = 0; d < rank; ++d) c.shape.push_back(uni(0, 7));
  // Placements: mostly Shard (often of the same tensor dim, for nesting), some Replicate.
  const int favourite = uni(0, rank - 1);
  const ReduceOp op = static_cast<ReduceOp>(uni(0, 3));
  for (size_t m = 0; m < mesh_shape.size(); ++m) {
    const int k = uni(0, 9);
    if (k < 4) {
      c.placements.push_back(Shard{favourite});
    } else if (k < 7) {
      c.placements.push_back(Shard{uni(0, rank - 1)});
    } else if (allow_partial && k == 9) {
      c.placements.push_back(Partial{op});
    } else {
      c.placements.push_back(Replicate{});
    }
  }
  // Shard order: default (empty) or a random permutation per tensor dim.
  if (uni(0, 2) != 0) {
    c.order.resize(static_cast<size_t>(rank));
    for (int t = 0; t < rank; ++t) {
      for (size_t m = 0; m < mesh_shape.size(); ++m) {
        if (IsShard(c.placements[m], t)) c.order[t].push_back(static_cast<int>(m));
      }
      std::shuffle(c.order[t].begin(), c.order[t].end(), rng);
    }
  }
  return c;
}

// A tensor of random bytes (any bit pattern, NaNs included: the round trip must be bit exact).
Tensor RandomTensor(std::mt19937& rng, DType dt, const std::vector<int64_t>& shape) {
  Tensor t = Tensor::Zeros(dt, shape);
  for (int64_t i = 0; i < t.NumBytes(); ++i) t.raw()[i] = static_cast<std::byte>(rng() & 0xff);
  return t;
}

int64_t Prod(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t x : v) n *= x;
  return n;
}

// Visits every multi-index of `box` (none when empty), as global indices.
template <typename F>
void ForEachIndex(const Box& box, F&& f) {
  if (box.empty()) return;
  std::vector<int64_t> idx = box.offset;
  while (true) {
    f(idx);
    int d = box.rank() - 1;
    while (d >= 0 && ++idx[d] == box.offset[d] + box.shape[d]) {
      idx[d] = box.offset[d];
      --d;
    }
    if (d < 0) return;
  }
}

TEST(DistributePropertyTest, ReassemblyIsBitExact) {
  std::mt19937 rng(1234567);
  int cases = 0, nested = 0, reordered = 0, with_empty = 0;
  for (int iter = 0; iter < 1000; ++iter) {
    const RandomCase c = MakeRandomCase(rng, /*allow_partial=*/false);
    auto layout = Layout::Create(c.shape, c.mesh, c.placements, c.order);
    ASSERT_TRUE(layout.ok()) << layout.status();
    for (int k = 0; k < 2; ++k) {
      const DType dt = kAllDTypes[(iter + 2 * k) % 5];
      const Tensor global = RandomTensor(rng, dt, c.shape);
      // Reassemble from every rank's local tensor and box. Filled with a byte pattern so that an
      // element no rank writes is caught; `writes` counts the writers of each element.
      Tensor out = Tensor::Zeros(dt, c.shape);
      if (out.NumBytes() > 0) std::memset(out.raw(), 0xA5, static_cast<size_t>(out.NumBytes()));
      std::vector<int> writes(static_cast<size_t>(Prod(c.shape)), 0);
      int64_t replicas = 1;
      for (int m = 0; m < c.mesh.ndim(); ++m) {
        if (!IsShard(c.placements[m])) replicas *= c.mesh.dim_size(m);
      }
      for (int r : c.mesh.ranks()) {
        auto d = Distribute(global, *layout, r);
        ASSERT_TRUE(d.ok()) << d.status();
        const Box& box = d->box();
        ASSERT_EQ(d->local().shape(), box.shape);
        ASSERT_EQ(d->local().dtype(), dt);
        if (box.empty()) ++with_empty;
        // Each replica holds exactly the global values of its box.
        const int64_t es = DTypeSize(dt);
        int64_t local_flat = 0;
        ForEachIndex(box, [&](const std::vector<int64_t>& idx) {
          const int64_t g = global.FlatIndex(idx);
          ++writes[g];
          ASSERT_EQ(std::memcmp(d->local().raw() + local_flat * es, global.raw() + g * es, static_cast<size_t>(es)), 0)
              << layout->ToString() << " rank " << r;
          ++local_flat;
        });
        out.Insert(box.offset, d->local());
      }
      ASSERT_EQ(out, global) << layout->ToString() << " dtype " << DTypeName(dt);
      for (size_t e = 0; e < writes.size(); ++e) {
        ASSERT_EQ(writes[e], replicas) << layout->ToString() << " element " << e;
      }
      ++cases;
    }
    for (const auto& o : layout->shard_order()) {
      nested += o.size() > 1;
      reordered += !std::is_sorted(o.begin(), o.end());
    }
  }
  EXPECT_EQ(cases, 2000);
  // The generator does reach the interesting corners.
  EXPECT_GT(nested, 100);
  EXPECT_GT(reordered, 30);
  EXPECT_GT(with_empty, 100);
}

TEST(DistributePropertyTest, PartialReducesBackToTheInput) {
  // With Partial placements, the reduction over the Partial dims of the ranks that share the
  // other coordinates gives back the input (exact: sum over integers, where only coordinate 0 is
  // non-zero; avg/max/min keep the value).
  std::mt19937 rng(777);
  int partial_cases = 0;
  for (int iter = 0; iter < 1000; ++iter) {
    const RandomCase c = MakeRandomCase(rng, /*allow_partial=*/true);
    auto layout = Layout::Create(c.shape, c.mesh, c.placements, c.order);
    ASSERT_TRUE(layout.ok()) << layout.status();
    if (!layout->HasPartial()) continue;
    ++partial_cases;
    const ReduceOp op = *layout->partial_op();
    const DType dt = (iter % 2) ? DType::kI64 : DType::kI32;
    Tensor global = Tensor::Zeros(dt, c.shape);
    for (int64_t i = 0; i < global.NumElements(); ++i) {
      global.SetFromDouble(i, std::uniform_int_distribution<int>(-1000, 1000)(rng));
    }
    // Accumulate sum / max / min per element over the ranks whose Replicate coordinates are 0
    // (one representative per Partial group).
    const int64_t n = global.NumElements();
    std::vector<double> sum(static_cast<size_t>(n), 0.0), count(static_cast<size_t>(n), 0.0);
    std::vector<double> mx(static_cast<size_t>(n), -1e18), mn(static_cast<size_t>(n), 1e18);
    for (int r : c.mesh.ranks()) {
      const auto coord = *c.mesh.Coordinate(r);
      bool representative = true;
      for (int m = 0; m < c.mesh.ndim(); ++m) {
        if (IsReplicate(c.placements[m]) && coord[m] != 0) representative = false;
      }
      auto d = Distribute(global, *layout, r);
      ASSERT_TRUE(d.ok()) << d.status();
      if (!representative) continue;
      int64_t local_flat = 0;
      ForEachIndex(d->box(), [&](const std::vector<int64_t>& idx) {
        const int64_t g = global.FlatIndex(idx);
        const double v = d->local().GetAsDouble(local_flat++);
        sum[g] += v;
        count[g] += 1;
        mx[g] = std::max(mx[g], v);
        mn[g] = std::min(mn[g], v);
      });
    }
    for (int64_t g = 0; g < n; ++g) {
      ASSERT_GT(count[g], 0) << layout->ToString();
      double got = 0;
      switch (op) {
        case ReduceOp::kSum: got = sum[g]; break;
        case ReduceOp::kAvg: got = sum[g] / count[g]; break;
        case ReduceOp::kMax: got = mx[g]; break;
        case ReduceOp::kMin: got = mn[g]; break;
      }
      ASSERT_EQ(got, global.GetAsDouble(g)) << layout->ToString() << " element " << g;
    }
  }
  EXPECT_GT(partial_cases, 100);
}

}  // namespace
}  // namespace meshflow
