#include "meshflow/mesh/device_mesh.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <sys/resource.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace meshflow {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Independent reference: the row-major coordinate of mesh index `index` (last dim fastest).
std::vector<int64_t> RefCoord(const std::vector<int64_t>& shape, int64_t index) {
  std::vector<int64_t> c(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    c[d] = index % shape[d];
    index /= shape[d];
  }
  return c;
}

int64_t Prod(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t x : v) n *= x;
  return n;
}

// ---------------------------------------------------------------------------------------------
// Create errors.

TEST(DeviceMeshCreateTest, EmptyShapeIsAnError) {
  auto m = DeviceMesh::Create({});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("empty"));
}

TEST(DeviceMeshCreateTest, ZeroSizeIsAnError) {
  auto m = DeviceMesh::Create({2, 0});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("mesh dim 1 has size 0"));
  EXPECT_THAT(m.status().message(), HasSubstr("2x0"));
}

TEST(DeviceMeshCreateTest, NegativeSizeIsAnError) {
  auto m = DeviceMesh::Create({-3});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("mesh dim 0 has size -3"));
}

TEST(DeviceMeshCreateTest, HugeShapeIsAnErrorNotACrash) {
  // Regression: Create used to allocate the rank list before validating the shape (and could
  // overflow the product), so a huge shape crashed instead of returning an error.
  auto m = DeviceMesh::Create({int64_t{1} << 40, int64_t{1} << 40});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("too large"));
  auto m2 = DeviceMesh::Create({INT64_MAX, 2});
  ASSERT_FALSE(m2.ok());
  EXPECT_THAT(m2.status().message(), HasSubstr("too large"));
  auto m3 = DeviceMesh::Create({2, -1, INT64_MAX});
  ASSERT_FALSE(m3.ok());
  EXPECT_THAT(m3.status().message(), HasSubstr("mesh dim 1 has size -1"));
}

TEST(DeviceMeshCreateTest, NamesCountMismatch) {
  auto m = DeviceMesh::Create({2, 2}, {"dp"});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("2 dims but 1 names"));
  auto m2 = DeviceMesh::Create({2}, {"a", "b"});
  ASSERT_FALSE(m2.ok());
  EXPECT_THAT(m2.status().message(), HasSubstr("1 dims but 2 names"));
}

TEST(DeviceMeshCreateTest, DuplicateName) {
  auto m = DeviceMesh::Create({2, 2}, {"dp", "dp"});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("'dp' is used twice"));
}

TEST(DeviceMeshCreateTest, EmptyName) {
  auto m = DeviceMesh::Create({2, 2}, {"dp", ""});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("mesh dim 1 has an empty name"));
}

TEST(DeviceMeshCreateTest, RankListMismatch) {
  auto m = DeviceMesh::CreateWithRanks({2, 2}, {0, 1, 2});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("has 4 ranks but 3 ranks were given"));
  auto m2 = DeviceMesh::CreateWithRanks({2}, {0, 1, 2});
  ASSERT_FALSE(m2.ok());
  EXPECT_THAT(m2.status().message(), HasSubstr("has 2 ranks but 3 ranks were given"));
}

TEST(DeviceMeshCreateTest, NegativeOrDuplicateRank) {
  auto m = DeviceMesh::CreateWithRanks({2}, {0, -1});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("-1 is negative"));
  auto m2 = DeviceMesh::CreateWithRanks({3}, {4, 5, 4});
  ASSERT_FALSE(m2.ok());
  EXPECT_THAT(m2.status().message(), HasSubstr("rank 4 appears twice"));
}

TEST(DeviceMeshCreateTest, CreateWithRanksValidatesShapeAndNames) {
  EXPECT_FALSE(DeviceMesh::CreateWithRanks({}, {}).ok());
  EXPECT_FALSE(DeviceMesh::CreateWithRanks({0}, {}).ok());
  EXPECT_FALSE(DeviceMesh::CreateWithRanks({1}, {3}, {""}).ok());
  EXPECT_TRUE(DeviceMesh::CreateWithRanks({1}, {3}, {"x"}).ok());
}

TEST(DeviceMeshCreateTest, Accessors) {
  auto m = DeviceMesh::Create({2, 3}, {"dp", "tp"});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->ndim(), 2);
  EXPECT_EQ(m->size(), 6);
  EXPECT_THAT(m->shape(), ElementsAre(2, 3));
  EXPECT_EQ(m->dim_size(0), 2);
  EXPECT_EQ(m->dim_size(1), 3);
  EXPECT_THAT(m->names(), ElementsAre("dp", "tp"));
  EXPECT_THAT(m->ranks(), ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_EQ(m->DimName(0), "dp");
  EXPECT_EQ(m->DimName(1), "tp");

  auto u = DeviceMesh::Create({4});
  ASSERT_TRUE(u.ok());
  EXPECT_TRUE(u->names().empty());
  EXPECT_EQ(u->DimName(0), "d0");
}

TEST(DeviceMeshCreateTest, Equality) {
  EXPECT_EQ(*DeviceMesh::Create({2, 2}), *DeviceMesh::Create({2, 2}));
  EXPECT_FALSE(*DeviceMesh::Create({2, 2}) == *DeviceMesh::Create({4}));
  EXPECT_FALSE(*DeviceMesh::Create({2, 2}) == *DeviceMesh::Create({2, 2}, {"a", "b"}));
  EXPECT_EQ(*DeviceMesh::Create({2}), *DeviceMesh::CreateWithRanks({2}, {0, 1}));
  EXPECT_FALSE(*DeviceMesh::Create({2}) == *DeviceMesh::CreateWithRanks({2}, {1, 0}));
}

// ---------------------------------------------------------------------------------------------
// Coordinates.

TEST(DeviceMeshCoordTest, RowMajorRoundTripOneToFourDims) {
  const std::vector<std::vector<int64_t>> shapes = {
      {1}, {5}, {2, 3}, {3, 1}, {1, 4}, {2, 3, 4}, {3, 1, 2}, {2, 2, 2, 2}, {1, 3, 2, 2}, {2, 1, 1, 3}};
  for (const auto& shape : shapes) {
    auto m = DeviceMesh::Create(shape);
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_EQ(m->size(), Prod(shape));
    for (int r = 0; r < m->size(); ++r) {
      auto c = m->Coordinate(r);
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_EQ(*c, RefCoord(shape, r)) << "rank " << r;
      auto back = m->RankAt(*c);
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_EQ(*back, r);
      EXPECT_TRUE(m->Contains(r));
      EXPECT_EQ(*m->IndexOf(r), r);
    }
    EXPECT_FALSE(m->Contains(m->size()));
    EXPECT_FALSE(m->Contains(-1));
  }
}

TEST(DeviceMeshCoordTest, HandPickedCoordinates) {
  auto m = DeviceMesh::Create({2, 3});
  ASSERT_TRUE(m.ok());
  EXPECT_THAT(*m->Coordinate(4), ElementsAre(1, 1));
  EXPECT_THAT(*m->Coordinate(2), ElementsAre(0, 2));
  EXPECT_THAT(*m->Coordinate(3), ElementsAre(1, 0));
  auto m3 = DeviceMesh::Create({2, 3, 4});
  ASSERT_TRUE(m3.ok());
  EXPECT_THAT(*m3->Coordinate(23), ElementsAre(1, 2, 3));
  EXPECT_THAT(*m3->Coordinate(13), ElementsAre(1, 0, 1));
  const int64_t c[] = {1, 2, 0};
  EXPECT_EQ(*m3->RankAt(c), 20);
}

TEST(DeviceMeshCoordTest, ExplicitRanks) {
  auto m = DeviceMesh::CreateWithRanks({2, 2}, {7, 3, 5, 1});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(*m->Coordinate(7), ElementsAre(0, 0));
  EXPECT_THAT(*m->Coordinate(3), ElementsAre(0, 1));
  EXPECT_THAT(*m->Coordinate(5), ElementsAre(1, 0));
  EXPECT_THAT(*m->Coordinate(1), ElementsAre(1, 1));
  EXPECT_EQ(*m->IndexOf(5), 2);
  EXPECT_FALSE(m->Contains(0));
  EXPECT_FALSE(m->Contains(2));
  const int64_t c[] = {1, 1};
  EXPECT_EQ(*m->RankAt(c), 1);
  auto bad = m->Coordinate(0);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kOutOfRange);
  EXPECT_THAT(bad.status().message(), HasSubstr("rank 0 is not in"));
}

TEST(DeviceMeshCoordTest, Errors) {
  auto m = DeviceMesh::Create({2, 3});
  ASSERT_TRUE(m.ok());
  auto c = m->Coordinate(6);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kOutOfRange);
  EXPECT_THAT(c.status().message(), HasSubstr("rank 6 is not in mesh(2x3)"));
  EXPECT_FALSE(m->Coordinate(-1).ok());
  EXPECT_FALSE(m->IndexOf(-1).ok());

  const int64_t short_coord[] = {1};
  auto r1 = m->RankAt(short_coord);
  ASSERT_FALSE(r1.ok());
  EXPECT_EQ(r1.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r1.status().message(), HasSubstr("1 components"));
  const int64_t out[] = {1, 3};
  auto r2 = m->RankAt(out);
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.status().code(), StatusCode::kOutOfRange);
  EXPECT_THAT(r2.status().message(), HasSubstr("coordinate 1,3 is outside"));
  const int64_t neg[] = {-1, 0};
  EXPECT_FALSE(m->RankAt(neg).ok());
}

// ---------------------------------------------------------------------------------------------
// Groups.

// Reference flattened group: all ranks that differ from `rank` only in `dims`, ordered
// row-major over `dims` in the given order (last listed dim fastest).
std::vector<int> RefGroup(const DeviceMesh& m, int rank, const std::vector<int>& dims) {
  const std::vector<int64_t> base = *m.Coordinate(rank);
  std::vector<int64_t> sub_shape;
  for (int d : dims) sub_shape.push_back(m.dim_size(d));
  std::vector<int> out;
  const int64_t n = Prod(sub_shape);
  for (int64_t j = 0; j < n; ++j) {
    std::vector<int64_t> c = base;
    const std::vector<int64_t> sub = sub_shape.empty() ? std::vector<int64_t>{} : RefCoord(sub_shape, j);
    for (size_t k = 0; k < dims.size(); ++k) c[dims[k]] = sub[k];
    out.push_back(*m.RankAt(c));
  }
  return out;
}

// Every ordered subset (subsequence permutations) of {0..n-1}.
std::vector<std::vector<int>> AllDimLists(int n) {
  std::vector<std::vector<int>> out;
  for (int mask = 0; mask < (1 << n); ++mask) {
    std::vector<int> dims;
    for (int d = 0; d < n; ++d) {
      if (mask & (1 << d)) dims.push_back(d);
    }
    do {
      out.push_back(dims);
    } while (std::next_permutation(dims.begin(), dims.end()));
  }
  return out;
}

TEST(DeviceMeshGroupTest, DocExample) {
  auto m = DeviceMesh::Create({2, 2}, {"dp", "tp"});
  ASSERT_TRUE(m.ok());
  EXPECT_THAT(*m->Group(3, 0), ElementsAre(1, 3));
  EXPECT_THAT(*m->Group(3, 1), ElementsAre(2, 3));
  const int d01[] = {0, 1};
  EXPECT_THAT(*m->Group(3, d01), ElementsAre(0, 1, 2, 3));
  const int d10[] = {1, 0};
  EXPECT_THAT(*m->Group(3, d10), ElementsAre(0, 2, 1, 3));
}

TEST(DeviceMeshGroupTest, PerDimGroupsOrderedByCoordinate) {
  auto m = DeviceMesh::Create({2, 3, 4});
  ASSERT_TRUE(m.ok());
  // Rank 17 = (1, 1, 1).
  EXPECT_THAT(*m->Group(17, 0), ElementsAre(5, 17));
  EXPECT_THAT(*m->Group(17, 1), ElementsAre(13, 17, 21));
  EXPECT_THAT(*m->Group(17, 2), ElementsAre(16, 17, 18, 19));
  const int d20[] = {2, 0};
  EXPECT_THAT(*m->Group(17, d20), ElementsAre(4, 16, 5, 17, 6, 18, 7, 19));
  const int d02[] = {0, 2};
  EXPECT_THAT(*m->Group(17, d02), ElementsAre(4, 5, 6, 7, 16, 17, 18, 19));
  const int d21[] = {2, 1};
  EXPECT_THAT(*m->Group(0, d21), ElementsAre(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11));
}

TEST(DeviceMeshGroupTest, EmptyDimsGivesTheRankItself) {
  auto m = DeviceMesh::Create({2, 3});
  ASSERT_TRUE(m.ok());
  EXPECT_THAT(*m->Group(4, std::span<const int>()), ElementsAre(4));
  auto all = m->AllGroups(std::span<const int>());
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 6u);
  for (int r = 0; r < 6; ++r) EXPECT_THAT((*all)[r], ElementsAre(r));
}

TEST(DeviceMeshGroupTest, MatchesReferenceForEveryDimListOneToFourDims) {
  const std::vector<std::vector<int64_t>> shapes = {{3}, {2, 3}, {3, 2}, {2, 3, 2}, {2, 1, 3}, {2, 2, 3, 2}};
  for (const auto& shape : shapes) {
    for (bool explicit_ranks : {false, true}) {
      std::vector<int> ranks(static_cast<size_t>(Prod(shape)));
      // A scrambled world rank list for the explicit case: 3*i+1 reversed.
      for (size_t i = 0; i < ranks.size(); ++i) {
        ranks[i] = explicit_ranks ? static_cast<int>(3 * (ranks.size() - i) + 1) : static_cast<int>(i);
      }
      auto m = DeviceMesh::CreateWithRanks(shape, ranks);
      ASSERT_TRUE(m.ok()) << m.status();
      for (const auto& dims : AllDimLists(m->ndim())) {
        for (int r : m->ranks()) {
          auto g = m->Group(r, dims);
          ASSERT_TRUE(g.ok()) << g.status();
          EXPECT_EQ(*g, RefGroup(*m, r, dims)) << m->ToString() << " rank " << r;
          EXPECT_NE(std::find(g->begin(), g->end(), r), g->end());
          if (dims.size() == 1) {
            EXPECT_EQ(*m->Group(r, dims[0]), *g);
          }
        }
        // AllGroups: a partition of ranks(), ordered by first member (mesh order), each group
        // equal to Group() of its members.
        auto all = m->AllGroups(dims);
        ASSERT_TRUE(all.ok()) << all.status();
        int64_t group_size = 1;
        for (int d : dims) group_size *= shape[d];
        EXPECT_EQ(static_cast<int64_t>(all->size()), Prod(shape) / group_size);
        std::multiset<int> seen;
        int last_first_index = -1;
        for (const auto& g : *all) {
          EXPECT_EQ(static_cast<int64_t>(g.size()), group_size);
          for (int r : g) {
            seen.insert(r);
            EXPECT_EQ(*m->Group(r, dims), g);
          }
          const int first_index = *m->IndexOf(g.front());
          EXPECT_GT(first_index, last_first_index);
          last_first_index = first_index;
        }
        EXPECT_EQ(seen, std::multiset<int>(ranks.begin(), ranks.end()));
      }
    }
  }
}

TEST(DeviceMeshGroupTest, AllGroupsHandPicked) {
  auto m = DeviceMesh::Create({2, 3});
  ASSERT_TRUE(m.ok());
  const int d0[] = {0};
  auto g0 = m->AllGroups(d0);
  ASSERT_TRUE(g0.ok());
  EXPECT_EQ(*g0, (std::vector<std::vector<int>>{{0, 3}, {1, 4}, {2, 5}}));
  const int d1[] = {1};
  auto g1 = m->AllGroups(d1);
  ASSERT_TRUE(g1.ok());
  EXPECT_EQ(*g1, (std::vector<std::vector<int>>{{0, 1, 2}, {3, 4, 5}}));
  const int d10[] = {1, 0};
  auto g10 = m->AllGroups(d10);
  ASSERT_TRUE(g10.ok());
  EXPECT_EQ(*g10, (std::vector<std::vector<int>>{{0, 3, 1, 4, 2, 5}}));
}

TEST(DeviceMeshGroupTest, Errors) {
  auto m = DeviceMesh::Create({2, 3});
  ASSERT_TRUE(m.ok());
  auto e1 = m->Group(0, 2);
  ASSERT_FALSE(e1.ok());
  EXPECT_EQ(e1.status().code(), StatusCode::kOutOfRange);
  EXPECT_THAT(e1.status().message(), HasSubstr("mesh dim 2 is out of range"));
  EXPECT_FALSE(m->Group(0, -1).ok());
  auto e2 = m->Group(6, 0);
  ASSERT_FALSE(e2.ok());
  EXPECT_EQ(e2.status().code(), StatusCode::kOutOfRange);
  EXPECT_THAT(e2.status().message(), HasSubstr("rank 6"));
  const int rep[] = {1, 1};
  auto e3 = m->Group(0, rep);
  ASSERT_FALSE(e3.ok());
  EXPECT_EQ(e3.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(e3.status().message(), HasSubstr("mesh dim 1 is repeated"));
  EXPECT_FALSE(m->AllGroups(rep).ok());
  const int oob[] = {0, 5};
  EXPECT_FALSE(m->AllGroups(oob).ok());
}

// ---------------------------------------------------------------------------------------------
// Names and slicing.

TEST(DeviceMeshNamesTest, DimIndex) {
  auto m = DeviceMesh::Create({2, 2, 2}, {"pp", "dp", "tp"});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(*m->DimIndex("pp"), 0);
  EXPECT_EQ(*m->DimIndex("dp"), 1);
  EXPECT_EQ(*m->DimIndex("tp"), 2);
  auto e = m->DimIndex("ep");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(e.status().message(), HasSubstr("no dim named 'ep'"));
  EXPECT_FALSE(m->DimIndex("").ok());

  auto u = DeviceMesh::Create({2});
  ASSERT_TRUE(u.ok());
  auto e2 = u->DimIndex("d0");
  ASSERT_FALSE(e2.ok());
  EXPECT_EQ(e2.status().code(), StatusCode::kNotFound);
}

TEST(DeviceMeshSliceTest, DocExample) {
  auto m = DeviceMesh::Create({2, 2}, {"dp", "tp"});
  ASSERT_TRUE(m.ok());
  const std::string tp[] = {"tp"};
  auto s = m->Slice(tp, 3);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(s->shape(), ElementsAre(2));
  EXPECT_THAT(s->names(), ElementsAre("tp"));
  EXPECT_THAT(s->ranks(), ElementsAre(2, 3));
  EXPECT_EQ(s->ToString(), "mesh(2, [tp], ranks {2,3})");
  // World ranks: coordinates in the sub-mesh refer to world ranks.
  EXPECT_THAT(*s->Coordinate(3), ElementsAre(1));
  EXPECT_FALSE(s->Contains(0));
  EXPECT_THAT(*s->Group(2, 0), ElementsAre(2, 3));
}

TEST(DeviceMeshSliceTest, SliceKeepsWorldRanksAndNameOrder) {
  auto m = DeviceMesh::Create({2, 3, 2}, {"pp", "dp", "tp"});
  ASSERT_TRUE(m.ok());
  // Rank 9 = (1, 1, 1).
  const std::string dp[] = {"dp"};
  auto s1 = m->Slice(dp, 9);
  ASSERT_TRUE(s1.ok());
  EXPECT_THAT(s1->ranks(), ElementsAre(7, 9, 11));
  EXPECT_THAT(s1->names(), ElementsAre("dp"));

  const std::string tp_pp[] = {"tp", "pp"};
  auto s2 = m->Slice(tp_pp, 9);
  ASSERT_TRUE(s2.ok());
  EXPECT_THAT(s2->shape(), ElementsAre(2, 2));
  EXPECT_THAT(s2->names(), ElementsAre("tp", "pp"));
  EXPECT_THAT(s2->ranks(), ElementsAre(2, 8, 3, 9));
  EXPECT_EQ(*s2->DimIndex("pp"), 1);
  const int64_t c[] = {1, 0};
  EXPECT_EQ(*s2->RankAt(c), 3);

  const std::string pp_tp[] = {"pp", "tp"};
  auto s3 = m->Slice(pp_tp, 9);
  ASSERT_TRUE(s3.ok());
  EXPECT_THAT(s3->ranks(), ElementsAre(2, 3, 8, 9));

  // Every member of a slice gives the same slice.
  for (int r : s3->ranks()) EXPECT_EQ(*m->Slice(pp_tp, r), *s3);

  // Slicing a slice.
  const std::string pp[] = {"pp"};
  auto s4 = s2->Slice(pp, 8);
  ASSERT_TRUE(s4.ok());
  EXPECT_THAT(s4->ranks(), ElementsAre(2, 8));

  // The slice over every dim in order, from rank 0, is the mesh itself.
  const std::string all[] = {"pp", "dp", "tp"};
  EXPECT_EQ(*m->Slice(all, 0), *m);
}

TEST(DeviceMeshSliceTest, Errors) {
  auto m = DeviceMesh::Create({2, 2}, {"dp", "tp"});
  ASSERT_TRUE(m.ok());
  const std::string unknown[] = {"ep"};
  auto e1 = m->Slice(unknown, 0);
  ASSERT_FALSE(e1.ok());
  EXPECT_EQ(e1.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(e1.status().message(), HasSubstr("'ep'"));
  const std::string rep[] = {"tp", "tp"};
  auto e2 = m->Slice(rep, 0);
  ASSERT_FALSE(e2.ok());
  EXPECT_THAT(e2.status().message(), HasSubstr("repeated"));
  const std::string tp[] = {"tp"};
  auto e3 = m->Slice(tp, 4);
  ASSERT_FALSE(e3.ok());
  EXPECT_EQ(e3.status().code(), StatusCode::kOutOfRange);
  EXPECT_FALSE(m->Slice(std::span<const std::string>(), 0).ok());
  auto u = DeviceMesh::Create({2});
  ASSERT_TRUE(u.ok());
  const std::string d0[] = {"d0"};
  EXPECT_FALSE(u->Slice(d0, 0).ok());
}

// Equality and the fingerprint see shape, names and ranks; equal meshes built separately (with
// identity or explicit ranks) are equal and fingerprint equal, so layout-keyed caches hit.
TEST(DeviceMeshEqualityTest, FingerprintAndEqualityFollowShapeNamesAndRanks) {
  const DeviceMesh a = *DeviceMesh::Create({2, 4}, {"dp", "tp"});
  const DeviceMesh same = *DeviceMesh::Create({2, 4}, {"dp", "tp"});
  const DeviceMesh same_explicit = *DeviceMesh::CreateWithRanks({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7}, {"dp", "tp"});
  EXPECT_EQ(a, same);
  EXPECT_EQ(a, same_explicit);
  EXPECT_EQ(a.fingerprint(), same.fingerprint());
  EXPECT_EQ(a.fingerprint(), same_explicit.fingerprint());
  const DeviceMesh copy = a;  // copies share the rank list
  EXPECT_EQ(copy, a);
  EXPECT_EQ(&copy.ranks(), &a.ranks());

  const std::vector<DeviceMesh> different = {
      *DeviceMesh::Create({4, 2}, {"dp", "tp"}),                                     // shape
      *DeviceMesh::Create({2, 4}, {"tp", "dp"}),                                     // names
      *DeviceMesh::Create({2, 4}),                                                   // no names
      *DeviceMesh::CreateWithRanks({2, 4}, {0, 1, 2, 3, 4, 5, 7, 6}, {"dp", "tp"}),  // ranks
      *DeviceMesh::CreateWithRanks({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}, {"dp", "tp"}),  // ranks
  };
  for (const DeviceMesh& d : different) {
    EXPECT_FALSE(d == a) << d.ToString();
    EXPECT_NE(d.fingerprint(), a.fingerprint()) << d.ToString();
  }
  // Explicit-rank meshes built separately compare their rank lists.
  const DeviceMesh sub = *DeviceMesh::CreateWithRanks({2}, {5, 9}, {"tp"});
  EXPECT_EQ(sub, *DeviceMesh::CreateWithRanks({2}, {5, 9}, {"tp"}));
  EXPECT_FALSE(sub == *DeviceMesh::CreateWithRanks({2}, {9, 5}, {"tp"}));
}

TEST(DeviceMeshToStringTest, Forms) {
  EXPECT_EQ(DeviceMesh::Create({2, 2}, {"dp", "tp"})->ToString(), "mesh(2x2, [dp, tp])");
  EXPECT_EQ(DeviceMesh::Create({2, 2})->ToString(), "mesh(2x2)");
  EXPECT_EQ(DeviceMesh::Create({8})->ToString(), "mesh(8)");
  EXPECT_EQ(DeviceMesh::Create({1, 2, 3, 4})->ToString(), "mesh(1x2x3x4)");
  EXPECT_EQ(DeviceMesh::CreateWithRanks({2}, {4, 6})->ToString(), "mesh(2, ranks {4,6})");
  EXPECT_EQ(DeviceMesh::CreateWithRanks({1, 2}, {5, 1}, {"a", "b"})->ToString(), "mesh(1x2, [a, b], ranks {5,1})");
  // A member list that is exactly 0..n-1 prints like a plain mesh (it is equal to one).
  EXPECT_EQ(DeviceMesh::CreateWithRanks({2}, {0, 1})->ToString(), "mesh(2)");
}

// Peak resident memory of this process (ru_maxrss, KiB on Linux), in MiB.
int64_t PeakRssMiB() {
  struct rusage u {};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) / 1024;
}

// The documented maximum, 2^30 ranks, stores no rank list (it once took ~40 GB: a std::set of
// every rank plus the list): creating, copying, comparing and asking for ranks, coordinates and
// groups stays O(ndim) or O(group size) in memory.
TEST(DeviceMeshLargeTest, TwoToTheThirtyRanksAreArithmetic) {
  const int64_t rss_before = PeakRssMiB();
  constexpr int kMax = 1 << 30;
  StatusOr<DeviceMesh> flat = DeviceMesh::Create({kMax});
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_EQ(flat->size(), kMax);
  EXPECT_TRUE(flat->identity_ranks());
  EXPECT_EQ(flat->rank(0), 0);
  EXPECT_EQ(flat->rank(kMax - 1), kMax - 1);
  EXPECT_EQ(*flat->IndexOf(kMax - 1), kMax - 1);
  EXPECT_FALSE(flat->Contains(kMax));
  EXPECT_EQ(*flat->Coordinate(123456789), (std::vector<int64_t>{123456789}));
  EXPECT_EQ(flat->ToString(), "mesh(1073741824)");

  StatusOr<DeviceMesh> grid = DeviceMesh::Create({1024, 1024, 1024}, {"pp", "dp", "tp"});
  ASSERT_TRUE(grid.ok()) << grid.status();
  const DeviceMesh copy = *grid;
  EXPECT_EQ(copy, *grid);
  EXPECT_EQ(*grid, *DeviceMesh::Create({1024, 1024, 1024}, {"pp", "dp", "tp"}));
  EXPECT_FALSE(*grid == *flat);
  const int r = (5 * 1024 + 7) * 1024 + 1023;
  EXPECT_EQ(*grid->Coordinate(r), (std::vector<int64_t>{5, 7, 1023}));
  const int64_t last[] = {1023, 1023, 1023};
  EXPECT_EQ(*grid->RankAt(last), kMax - 1);
  const std::vector<int> tp = *grid->Group(r, 2);
  ASSERT_EQ(tp.size(), 1024u);
  EXPECT_EQ(tp.front(), r - 1023);
  EXPECT_EQ(tp.back(), r);
  const std::vector<int> dp = *grid->Group(r, 1);
  ASSERT_EQ(dp.size(), 1024u);
  EXPECT_EQ(dp[3], (5 * 1024 + 3) * 1024 + 1023);
  const std::string tp_name[] = {"tp"};
  const DeviceMesh tp_mesh = *grid->Slice(tp_name, r);
  EXPECT_EQ(tp_mesh.size(), 1024);
  EXPECT_EQ(tp_mesh.rank(1023), r);
  EXPECT_EQ(*tp_mesh.IndexOf(r - 1), 1022);
  // All of the above stays far below the 4 GiB a materialized list of 2^30 ints would take.
  EXPECT_LT(PeakRssMiB() - rss_before, 256) << "peak RSS grew from " << rss_before << " MiB";
}

// rank(i) agrees with ranks() for identity and explicit meshes; ranks() of an identity mesh is
// built once and shared by copies.
TEST(DeviceMeshLargeTest, RankAccessorMatchesRankList) {
  const DeviceMesh a = *DeviceMesh::Create({2, 3});
  const DeviceMesh b = *DeviceMesh::CreateWithRanks({2, 2}, {7, 3, 5, 1});
  for (const DeviceMesh* m : {&a, &b}) {
    ASSERT_EQ(static_cast<int>(m->ranks().size()), m->size());
    for (int i = 0; i < m->size(); ++i) EXPECT_EQ(m->rank(i), m->ranks()[static_cast<size_t>(i)]);
  }
  EXPECT_TRUE(a.identity_ranks());
  EXPECT_FALSE(b.identity_ranks());
  const DeviceMesh a_copy = a;
  EXPECT_EQ(&a_copy.ranks(), &a.ranks());
  // Equal content, one identity and one explicit: equal; an explicit permutation is not.
  EXPECT_EQ(a, *DeviceMesh::CreateWithRanks({2, 3}, {0, 1, 2, 3, 4, 5}));
  EXPECT_FALSE(a == *DeviceMesh::CreateWithRanks({2, 3}, {1, 0, 2, 3, 4, 5}));
}

}  // namespace
}  // namespace meshflow
