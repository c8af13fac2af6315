// DirectTransfersOfRank against DirectTransfers filtered to each rank, on random layouts.
#include "meshflow/planner/direct.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/planner/test_util.h"

namespace meshflow {
namespace {

std::string Describe(const Layout& from, const Layout& to) { return from.ToString() + " -> " + to.ToString(); }

std::string ListTransfers(const std::vector<Transfer>& v) {
  std::string s;
  for (const Transfer& t : v) {
    s += std::to_string(t.src_rank) + "->" + std::to_string(t.dst_rank) + " " + t.box.ToString() + "\n";
  }
  return s;
}

// Compares DirectTransfersOfRank with DirectTransfers filtered to the rank, for every rank of
// the mesh. Returns the number of transfers seen (so tests can check they exercise something).
int64_t ExpectMatchesFiltered(const Layout& from, const Layout& to) {
  StatusOr<std::vector<Transfer>> all = DirectTransfers(from, to);
  EXPECT_TRUE(all.ok()) << Describe(from, to) << ": " << all.status().ToString();
  if (!all.ok()) return 0;
  for (int rank : from.mesh().ranks()) {
    std::vector<Transfer> want;
    for (const Transfer& t : *all) {
      if (t.src_rank == rank || t.dst_rank == rank) want.push_back(t);
    }
    StatusOr<std::vector<Transfer>> got = DirectTransfersOfRank(from, to, rank);
    EXPECT_TRUE(got.ok()) << Describe(from, to) << " rank " << rank << ": " << got.status().ToString();
    if (!got.ok()) continue;
    EXPECT_EQ(*got, want) << Describe(from, to) << " rank " << rank << "\ngot:\n"
                          << ListTransfers(*got) << "want:\n"
                          << ListTransfers(want);
    if (*got != want) return static_cast<int64_t>(all->size());  // one report per case is enough
  }
  return static_cast<int64_t>(all->size());
}

class RandomLayouts {
 public:
  explicit RandomLayouts(uint32_t seed) : rng_(seed) {}

  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  // 1-D..4-D meshes of 1..64 ranks, over shuffled world ranks in a third of the cases.
  DeviceMesh Mesh() {
    const int ndim = Uniform(1, 4);
    std::vector<int64_t> shape;
    int64_t size = 1;
    for (int d = 0; d < ndim; ++d) {
      const int64_t s = Uniform(1, ndim <= 2 ? 5 : 3);
      shape.push_back(s);
      size *= s;
    }
    if (Uniform(0, 2) != 0) return *DeviceMesh::Create(shape);
    std::vector<int> ranks(static_cast<size_t>(size));
    std::iota(ranks.begin(), ranks.end(), 0);
    std::shuffle(ranks.begin(), ranks.end(), rng_);
    for (int& r : ranks) r = r * 3 + 1;  // not 0..size-1 either
    return *DeviceMesh::CreateWithRanks(shape, ranks);
  }

  // Rank 0..4; sizes 0..11 (uneven and empty shards), sometimes one large dim.
  std::vector<int64_t> Shape() {
    const int rank = Uniform(0, 4);
    std::vector<int64_t> shape;
    for (int t = 0; t < rank; ++t) shape.push_back(Uniform(0, 9) == 0 ? 0 : Uniform(1, rank >= 3 ? 7 : 11));
    if (rank > 0 && Uniform(0, 3) == 0) shape[static_cast<size_t>(Uniform(0, rank - 1))] = Uniform(20, 70);
    return shape;
  }

  // Shard / Replicate (and Partial when allowed) placements with a random shard order.
  Layout Make(const std::vector<int64_t>& shape, const DeviceMesh& mesh, bool allow_partial) {
    const int k = static_cast<int>(shape.size());
    Placements p;
    for (int m = 0; m < mesh.ndim(); ++m) {
      const int pick = Uniform(0, 9);
      if (k > 0 && pick < 6) {
        p.push_back(Shard{Uniform(0, k - 1)});
      } else if (allow_partial && pick == 9) {
        p.push_back(Partial{ReduceOp::kSum});
      } else {
        p.push_back(Replicate{});
      }
    }
    ShardOrder order(static_cast<size_t>(k));
    for (int m = 0; m < mesh.ndim(); ++m) {
      if (IsShard(p[m])) order[std::get<Shard>(p[m]).dim].push_back(m);
    }
    for (std::vector<int>& o : order) std::shuffle(o.begin(), o.end(), rng_);
    return *Layout::Create(shape, mesh, p, order);
  }

 private:
  std::mt19937 rng_;
};

TEST(DirectTransfersOfRankTest, EqualsDirectTransfersFilteredOnRandomCases) {
  RandomLayouts gen(20240611);
  int64_t transfers = 0;
  for (int i = 0; i < 3000; ++i) {
    const DeviceMesh mesh = gen.Mesh();
    const std::vector<int64_t> shape = gen.Shape();
    const Layout from = gen.Make(shape, mesh, /*allow_partial=*/false);
    const Layout to = gen.Make(shape, mesh, /*allow_partial=*/true);
    transfers += ExpectMatchesFiltered(from, to);
    if (HasFailure()) return;
  }
  EXPECT_GT(transfers, 10000);
}

TEST(DirectTransfersOfRankTest, ReplicatedSourcesSpreadOverReplicas) {
  // Many replicas in the source and free (Replicate/Partial) target dims: the send side solves the
  // replica congruence; every rank's sends must match.
  const DeviceMesh mesh = testing::MakeMesh({2, 3, 4});
  for (const char* from : {"R,R,S(0)", "S(0),R,R", "R,S(1),R", "R,R,R", "S(0),S(0),R", "R,S(0),S(1)"}) {
    for (const char* to : {"R,R,R", "P(sum),R,S(1)", "S(1),R,R", "R,P(sum),R", "S(0),S(1),S(0)", "R,R,S(0)"}) {
      for (const std::vector<int64_t>& shape : {std::vector<int64_t>{7, 5}, {24, 24}, {1, 3}, {0, 4}}) {
        ExpectMatchesFiltered(testing::MakeLayout(shape, mesh, from), testing::MakeLayout(shape, mesh, to));
      }
    }
  }
}

TEST(DirectTransfersOfRankTest, NestedShardOrdersAndUnevenChunks) {
  const DeviceMesh mesh = testing::MakeMesh({3, 2, 4});
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{10, 7, 5}, {23, 1, 9}, {5, 5, 5}}) {
    ExpectMatchesFiltered(testing::MakeLayout(shape, mesh, "S(0),S(0),S(0)", "0:[2,0,1]"),
                          testing::MakeLayout(shape, mesh, "S(1),S(1),S(0)", "1:[1,0]"));
    ExpectMatchesFiltered(testing::MakeLayout(shape, mesh, "S(0),S(1),S(2)"),
                          testing::MakeLayout(shape, mesh, "S(2),S(1),S(0)"));
    ExpectMatchesFiltered(testing::MakeLayout(shape, mesh, "S(2),S(2),S(0)", "2:[1,0]"),
                          testing::MakeLayout(shape, mesh, "S(0),S(0),S(2)", "0:[1,0]"));
  }
}

TEST(DirectTransfersOfRankTest, EveryRankOf512) {
  const DeviceMesh mesh = testing::MakeMesh({8, 8, 8});
  const std::vector<int64_t> shape = {1000, 999, 13};
  ExpectMatchesFiltered(testing::MakeLayout(shape, mesh, "S(0),S(1),S(2)"),
                        testing::MakeLayout(shape, mesh, "S(2),S(1),S(0)"));
  ExpectMatchesFiltered(testing::MakeLayout(shape, mesh, "S(0),S(0),S(0)"),
                        testing::MakeLayout(shape, mesh, "S(1),S(1),S(1)"));
}

// The flat form (DirectTransfersOfRank is built from it): peers are mesh indices, sends and
// receives apart, in DirectTransfers' order, on a mesh whose world ranks run backwards (the
// receives, keyed by world rank, come out of the enumeration reversed and must be reordered).
TEST(DirectPiecesOfRankTest, PeersAreMeshIndicesInWorldRankOrder) {
  const DeviceMesh mesh = *DeviceMesh::CreateWithRanks({4}, {70, 50, 30, 10});
  const Layout rows = testing::MakeLayout({8, 7}, mesh, "S(0)");
  const Layout cols = testing::MakeLayout({8, 7}, mesh, "S(1)");
  StatusOr<RankPieces> p = DirectPiecesOfRank(rows, cols, 50);  // mesh index 1: rows 2..3, cols 2..3
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->recvs.size(), 3u);
  EXPECT_EQ(p->recvs.peers, (std::vector<int>{3, 2, 0}));  // world ranks 10, 30, 70
  EXPECT_EQ(p->recvs.box(0), (Box{{6, 2}, {2, 2}}));
  EXPECT_EQ(p->recvs.box(2), (Box{{0, 2}, {2, 2}}));
  EXPECT_EQ(p->recvs.NumElements(1), 4);
  ASSERT_EQ(p->sends.size(), 3u);
  EXPECT_EQ(p->sends.peers, (std::vector<int>{0, 2, 3}));  // by destination mesh index
  EXPECT_EQ(p->sends.box(0), (Box{{2, 0}, {2, 2}}));
  EXPECT_EQ(p->sends.box(2), (Box{{2, 6}, {2, 1}}));  // uneven: the last column chunk is 1 wide
  EXPECT_EQ(p->sends.offset(2)[1], 6);
  EXPECT_EQ(p->sends.shape(2)[1], 1);
}

// A true all-to-all on 512 ranks: every rank exchanges with all others, each piece one block.
TEST(DirectPiecesOfRankTest, AllToAllPiecesCoverTheBoxes) {
  const DeviceMesh mesh = testing::MakeMesh({8, 8, 8});
  const Layout from = testing::MakeLayout({1024, 1536, 3}, mesh, "S(0),S(0),S(0)");
  const Layout to = testing::MakeLayout({1024, 1536, 3}, mesh, "S(1),S(1),S(1)");
  for (int rank : {0, 1, 255, 511}) {
    StatusOr<RankPieces> p = DirectPiecesOfRank(from, to, rank);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ASSERT_EQ(p->recvs.size(), 511u);
    ASSERT_EQ(p->sends.size(), 511u);
    int64_t in = 0, out = 0;
    for (size_t i = 0; i < 511; ++i) {
      in += p->recvs.NumElements(i);
      out += p->sends.NumElements(i);
    }
    const Box fb = *from.LocalBox(rank), tb = *to.LocalBox(rank);
    const int64_t kept = Intersect(fb, tb).NumElements();
    EXPECT_EQ(in + kept, tb.NumElements()) << rank;
    EXPECT_EQ(out + kept, fb.NumElements()) << rank;
  }
}

TEST(DirectTransfersOfRankTest, Errors) {
  const DeviceMesh mesh = testing::MakeMesh({2, 2});
  const Layout s0 = testing::MakeLayout({4, 4}, mesh, "S(0),R");
  const Layout s1 = testing::MakeLayout({4, 4}, mesh, "R,S(1)");
  const Layout p = testing::MakeLayout({4, 4}, mesh, "P(sum),R");
  StatusOr<std::vector<Transfer>> r = DirectTransfersOfRank(s0, s1, 4);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("rank 4"), std::string::npos) << r.status().ToString();
  r = DirectTransfersOfRank(p, s1, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("Partial"), std::string::npos) << r.status().ToString();
  r = DirectTransfersOfRank(s0, testing::MakeLayout({4, 5}, mesh, "R,S(1)"), 0);
  EXPECT_FALSE(r.ok());
  StatusOr<RankPieces> f = DirectPiecesOfRank(s0, s1, -1);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().ToString().find("rank -1"), std::string::npos) << f.status().ToString();
  EXPECT_FALSE(DirectPiecesOfRank(p, s1, 0).ok());
}

}  // namespace
}  // namespace meshflow
