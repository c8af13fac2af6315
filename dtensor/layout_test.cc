#include "meshflow/dtensor/layout.h"

#include <limits>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace meshflow {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

DeviceMesh Mesh(std::vector<int64_t> shape) { return *DeviceMesh::Create(std::move(shape)); }

void ExpectInvalid(const StatusOr<Layout>& l, std::string_view substr) {
  ASSERT_FALSE(l.ok()) << "expected an error containing '" << substr << "', got " << l->ToString();
  EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(l.status().message(), HasSubstr(std::string(substr)));
}

TEST(LayoutTest, CreateAndAccessors) {
  auto l = Layout::Create({8, 6}, Mesh({2, 2}), {Shard{0}, Replicate{}});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_THAT(l->global_shape(), ElementsAre(8, 6));
  EXPECT_EQ(l->tensor_rank(), 2);
  EXPECT_EQ(l->mesh(), Mesh({2, 2}));
  EXPECT_EQ(l->placements(), (Placements{Shard{0}, Replicate{}}));
  EXPECT_EQ(l->placement(0), Placement(Shard{0}));
  EXPECT_EQ(l->placement(1), Placement(Replicate{}));
  EXPECT_EQ(l->shard_order(), (ShardOrder{{0}, {}}));
  EXPECT_TRUE(l->has_default_shard_order());
  EXPECT_FALSE(l->HasPartial());
  EXPECT_EQ(l->partial_op(), std::nullopt);
  EXPECT_FALSE(l->IsFullyReplicated());
  EXPECT_EQ(l->ToString(), "S(0),R on mesh(2x2) shape [8,6]");
}

TEST(LayoutTest, PartialAndReplicatedQueries) {
  auto l = Layout::Create({4}, Mesh({2, 2}), {Partial{ReduceOp::kMax}, Partial{ReduceOp::kMax}});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_TRUE(l->HasPartial());
  EXPECT_EQ(l->partial_op(), ReduceOp::kMax);
  EXPECT_FALSE(l->IsFullyReplicated());
  auto r = Layout::Create({4}, Mesh({2, 2}), {Replicate{}, Replicate{}});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->IsFullyReplicated());
  EXPECT_FALSE(r->HasPartial());
  // Rank-0 tensors are legal.
  auto s = Layout::Create({}, Mesh({3}), {Partial{}});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->tensor_rank(), 0);
  EXPECT_EQ(*s->LocalBox(2), (Box{{}, {}}));
}

TEST(LayoutTest, PlacementCountMismatch) {
  ExpectInvalid(Layout::Create({8}, Mesh({2, 2}), {Shard{0}}), "have 1 entries but the mesh has 2 dims");
  ExpectInvalid(Layout::Create({8}, Mesh({2}), {Shard{0}, Replicate{}}), "have 2 entries but the mesh has 1 dims");
  ExpectInvalid(Layout::Create({8}, Mesh({2}), {}), "have 0 entries");
}

TEST(LayoutTest, ShardDimOutOfRange) {
  ExpectInvalid(Layout::Create({8, 6}, Mesh({2}), {Shard{2}}),
                "placement S(2) on mesh dim 0 shards tensor dim 2, out of range for a rank-2 tensor");
  ExpectInvalid(Layout::Create({8, 6}, Mesh({2, 2}), {Replicate{}, Shard{-1}}), "on mesh dim 1");
  ExpectInvalid(Layout::Create({}, Mesh({2}), {Shard{0}}), "rank-0 tensor");
}

TEST(LayoutTest, NegativeShape) {
  ExpectInvalid(Layout::Create({8, -1}, Mesh({2}), {Shard{0}}), "global shape [8,-1] has negative size at dim 1");
}

// Regression (tests/fuzz corpus layout_parser/seed_layout_huge_shape): a size near INT64_MAX
// overflowed ChunkOf (len + k - 1) and produced a box with a negative extent.
TEST(LayoutTest, HugeShapeIsRejected) {
  ExpectInvalid(Layout::Create({std::numeric_limits<int64_t>::max()}, Mesh({2}), {Shard{0}}),
                "global shape [9223372036854775807] is too large");
  ExpectInvalid(Layout::Create({int64_t{1} << 30, int64_t{1} << 30, 0}, Mesh({2}), {Replicate{}}),
                "is too large (more than 2^48 elements)");
  auto largest = Layout::Create({kMaxLayoutElements, 0, 1}, Mesh({2}), {Shard{0}});
  ASSERT_TRUE(largest.ok()) << largest.status();
  EXPECT_EQ(largest->AllLocalBoxes()[1].shape[0], kMaxLayoutElements / 2);
}

TEST(LayoutTest, ZeroSizesAreLegal) {
  auto l = Layout::Create({0, 3}, Mesh({2, 2}), {Shard{0}, Shard{1}});
  ASSERT_TRUE(l.ok()) << l.status();
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(l->LocalBox(r)->empty());
}

TEST(LayoutTest, MixedPartialOps) {
  ExpectInvalid(Layout::Create({8}, Mesh({2, 2}), {Partial{ReduceOp::kSum}, Partial{ReduceOp::kMax}}),
                "mix Partial reduce ops");
  ExpectInvalid(Layout::Create({8}, Mesh({2, 2, 2}), {Partial{ReduceOp::kAvg}, Shard{0}, Partial{ReduceOp::kMin}}),
                "P(avg),S(0),P(min)");
  EXPECT_TRUE(Layout::Create({8}, Mesh({2, 2}), {Partial{ReduceOp::kMin}, Partial{ReduceOp::kMin}}).ok());
}

TEST(LayoutTest, ShardOrders) {
  const DeviceMesh m = Mesh({2, 2, 2});
  const Placements ps = {Shard{0}, Shard{1}, Shard{0}};
  auto def = Layout::Create({8, 6}, m, ps);
  ASSERT_TRUE(def.ok()) << def.status();
  EXPECT_EQ(def->shard_order(), (ShardOrder{{0, 2}, {1}}));
  EXPECT_TRUE(def->has_default_shard_order());

  // An explicit order equal to the default normalizes to the same layout.
  auto same = Layout::Create({8, 6}, m, ps, {{0, 2}, {1}});
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(*same, *def);
  // Empty entries mean "default for this dim"; a short order covers the leading dims only.
  auto short_order = Layout::Create({8, 6}, m, ps, {{}});
  ASSERT_TRUE(short_order.ok()) << short_order.status();
  EXPECT_EQ(*short_order, *def);

  auto rev = Layout::Create({8, 6}, m, ps, {{2, 0}});
  ASSERT_TRUE(rev.ok()) << rev.status();
  EXPECT_EQ(rev->shard_order(), (ShardOrder{{2, 0}, {1}}));
  EXPECT_FALSE(rev->has_default_shard_order());
  EXPECT_FALSE(*rev == *def);
  EXPECT_EQ(rev->PlacementsString(), "S(0),S(1),S(0) order {0:[2,0]}");
  EXPECT_EQ(rev->ToString(), "S(0),S(1),S(0) order {0:[2,0]} on mesh(2x2x2) shape [8,6]");
  EXPECT_EQ(def->PlacementsString(), "S(0),S(1),S(0)");
}

TEST(LayoutTest, BadShardOrders) {
  const DeviceMesh m = Mesh({2, 2, 2});
  const Placements ps = {Shard{0}, Shard{1}, Shard{0}};
  ExpectInvalid(Layout::Create({8, 6}, m, ps, {{0}}),
                "shard order for tensor dim 0 is [0] but the mesh dims sharding it are [0,2]");
  ExpectInvalid(Layout::Create({8, 6}, m, ps, {{0, 0}}), "is [0,0]");
  ExpectInvalid(Layout::Create({8, 6}, m, ps, {{0, 1, 2}}), "is [0,1,2]");
  ExpectInvalid(Layout::Create({8, 6}, m, ps, {{2, 0}, {0}}), "tensor dim 1 is [0] but the mesh dims sharding it are [1]");
  ExpectInvalid(Layout::Create({8, 6}, m, ps, {{0, 2}, {1}, {}}), "shard order has 3 entries for a rank-2 tensor");
  ExpectInvalid(Layout::Create({8, 6}, m, ps, {{0, -2}}), "is [0,-2]");
  // An order for an unsharded tensor dim.
  ExpectInvalid(Layout::Create({8, 6}, Mesh({2}), {Shard{0}}, {{0}, {0}}), "tensor dim 1 is [0] but the mesh dims sharding it are []");
  // The standalone normalizer agrees.
  auto n = NormalizeShardOrder(2, 3, ps, {{2, 0}});
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, (ShardOrder{{2, 0}, {1}}));
  EXPECT_FALSE(NormalizeShardOrder(2, 3, ps, {{1, 0}}).ok());
  EXPECT_FALSE(NormalizeShardOrder(2, 2, ps, {}).ok());
}

TEST(LayoutTest, WithPlacements) {
  auto l = Layout::Create({8, 6}, Mesh({2, 2}), {Shard{0}, Replicate{}});
  ASSERT_TRUE(l.ok());
  auto w = l->WithPlacements({Shard{0}, Shard{0}}, {{1, 0}});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->global_shape(), l->global_shape());
  EXPECT_EQ(w->mesh(), l->mesh());
  EXPECT_EQ(w->shard_order(), (ShardOrder{{1, 0}, {}}));
  ExpectInvalid(l->WithPlacements({Shard{2}, Replicate{}}), "out of range");
  ExpectInvalid(l->WithPlacements({Shard{0}}), "entries");
}

TEST(LayoutTest, HeaderExampleBoxes) {
  const DeviceMesh m = Mesh({2, 2});
  auto def = Layout::Create({8, 6}, m, {Shard{0}, Shard{0}});
  ASSERT_TRUE(def.ok());
  EXPECT_EQ(def->AllLocalBoxes(), (std::vector<Box>{
                                      Box{{0, 0}, {2, 6}}, Box{{2, 0}, {2, 6}}, Box{{4, 0}, {2, 6}}, Box{{6, 0}, {2, 6}}}));
  auto rev = Layout::Create({8, 6}, m, {Shard{0}, Shard{0}}, {{1, 0}});
  ASSERT_TRUE(rev.ok());
  // Mesh dim 1 splits first: rank (i, j) holds chunk j, then sub-chunk i.
  EXPECT_EQ(rev->AllLocalBoxes(), (std::vector<Box>{
                                      Box{{0, 0}, {2, 6}}, Box{{4, 0}, {2, 6}}, Box{{2, 0}, {2, 6}}, Box{{6, 0}, {2, 6}}}));
  auto two = Layout::Create({8, 6}, m, {Shard{1}, Shard{0}});
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(*two->LocalBox(1), (Box{{4, 0}, {4, 3}}));
  EXPECT_EQ(*two->LocalBox(2), (Box{{0, 3}, {4, 3}}));
  const int64_t c[] = {1, 1};
  EXPECT_EQ(two->LocalBoxAt(c), (Box{{4, 3}, {4, 3}}));
}

TEST(LayoutTest, LocalBoxOnSubMesh) {
  auto world = DeviceMesh::Create({2, 3}, {"dp", "tp"});
  ASSERT_TRUE(world.ok());
  const std::string tp[] = {"tp"};
  auto sub = world->Slice(tp, 4);  // world ranks {3, 4, 5}
  ASSERT_TRUE(sub.ok());
  auto l = Layout::Create({7}, *sub, {Shard{0}});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(*l->LocalBox(3), (Box{{0}, {3}}));
  EXPECT_EQ(*l->LocalBox(4), (Box{{3}, {3}}));
  EXPECT_EQ(*l->LocalBox(5), (Box{{6}, {1}}));
  auto bad = l->LocalBox(0);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(l->AllLocalBoxes().size(), 3u);
}

TEST(LayoutTest, NumHolders) {
  const DeviceMesh m = Mesh({2, 3});
  auto l = Layout::Create({5, 4}, m, {Shard{0}, Replicate{}});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->NumHolders(std::vector<int64_t>{0, 0}), 3);
  EXPECT_EQ(l->NumHolders(std::vector<int64_t>{4, 3}), 3);
  // Outside the tensor, or an index of the wrong length: nobody holds it.
  EXPECT_EQ(l->NumHolders(std::vector<int64_t>{5, 0}), 0);
  EXPECT_EQ(l->NumHolders(std::vector<int64_t>{0}), 0);
  // Partial: every rank counts as holding every element.
  auto p = Layout::Create({5, 4}, m, {Partial{}, Partial{}});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->NumHolders(std::vector<int64_t>{2, 2}), 6);
  auto ps = Layout::Create({5, 4}, m, {Partial{}, Shard{1}});
  ASSERT_TRUE(ps.ok());
  EXPECT_EQ(ps->NumHolders(std::vector<int64_t>{2, 2}), 2);
  auto ss = Layout::Create({5, 4}, m, {Shard{1}, Shard{0}});
  ASSERT_TRUE(ss.ok());
  EXPECT_EQ(ss->NumHolders(std::vector<int64_t>{2, 2}), 1);
  // Rank-0 tensor.
  auto s = Layout::Create({}, m, {Replicate{}, Partial{}});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->NumHolders(std::vector<int64_t>{}), 6);
}

TEST(ParseShardOrderTest, Valid) {
  EXPECT_EQ(*ParseShardOrder(""), ShardOrder{});
  EXPECT_EQ(*ParseShardOrder("   "), ShardOrder{});
  EXPECT_EQ(*ParseShardOrder("0:[1,0]"), (ShardOrder{{1, 0}}));
  EXPECT_EQ(*ParseShardOrder("0:[1,0];2:[0,2]"), (ShardOrder{{1, 0}, {}, {0, 2}}));
  EXPECT_EQ(*ParseShardOrder("2:[0,2];0:[1,0]"), (ShardOrder{{1, 0}, {}, {0, 2}}));
  EXPECT_EQ(*ParseShardOrder(" 1 : [ 3 , 0 , 2 ] "), (ShardOrder{{}, {3, 0, 2}}));
  EXPECT_EQ(*ParseShardOrder("0:[1]"), (ShardOrder{{1}}));
  EXPECT_EQ(*ParseShardOrder("0:[1,0];"), (ShardOrder{{1, 0}}));
  EXPECT_EQ(*ParseShardOrder("\t0:[1,0]\n"), (ShardOrder{{1, 0}}));
}

TEST(ParseShardOrderTest, Errors) {
  for (const char* bad : {"0[1]", "0:[1", "0:1]", "x:[1]", ":[1]", "-1:[0]", "65:[0]", "0:[a]", "0:[1,,0]",
                          "0:[1,]", "0:[,1]", "0:[]", "0:[1];0:[0]", ";", "0:[1];;1:[0]", "0:[1]x"}) {
    auto s = ParseShardOrder(bad);
    ASSERT_FALSE(s.ok()) << "'" << bad << "' parsed";
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.status().message(), HasSubstr("bad shard order '" + std::string(bad) + "'"));
  }
  EXPECT_THAT(ParseShardOrder("0:[1];0:[0]").status().message(), HasSubstr("tensor dim 0 given twice"));
  EXPECT_THAT(ParseShardOrder("0:[1,x]").status().message(), HasSubstr("bad mesh dim in '0:[1,x]'"));
}

TEST(ParseShardOrderTest, PrintedOrderParsesBack) {
  const DeviceMesh m = Mesh({2, 2, 2});
  auto l = Layout::Create({8, 6}, m, {Shard{1}, Shard{0}, Shard{1}}, {{}, {2, 0}});
  ASSERT_TRUE(l.ok()) << l.status();
  const std::string s = l->PlacementsString();
  EXPECT_EQ(s, "S(1),S(0),S(1) order {1:[2,0]}");
  const size_t open = s.find('{');
  auto order = ParseShardOrder(s.substr(open + 1, s.size() - open - 2));
  ASSERT_TRUE(order.ok()) << order.status();
  auto placements = ParsePlacements(s.substr(0, s.find(' ')));
  ASSERT_TRUE(placements.ok());
  auto back = Layout::Create({8, 6}, m, *placements, *order);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, *l);
}

}  // namespace
}  // namespace meshflow

namespace meshflow {
namespace {

TEST(HashLayoutTest, EqualLayoutsHashEqualAndFieldsMatter) {
  const DeviceMesh m = *DeviceMesh::Create({2, 2});
  const auto make = [](const DeviceMesh& mesh, std::vector<int64_t> shape, Placements p, ShardOrder order = {}) {
    return *Layout::Create(std::move(shape), mesh, std::move(p), std::move(order));
  };
  const Layout a = make(m, {8, 6}, {Shard{0}, Shard{0}});
  EXPECT_EQ(HashLayout(a), HashLayout(make(*DeviceMesh::Create({2, 2}), {8, 6}, {Shard{0}, Shard{0}})));
  EXPECT_NE(HashLayout(a), HashLayout(make(m, {8, 7}, {Shard{0}, Shard{0}})));
  EXPECT_NE(HashLayout(a), HashLayout(make(m, {8, 6}, {Shard{0}, Shard{1}})));
  EXPECT_NE(HashLayout(a), HashLayout(make(m, {8, 6}, {Shard{0}, Partial{ReduceOp::kSum}})));
  EXPECT_NE(HashLayout(a), HashLayout(make(m, {8, 6}, {Shard{0}, Shard{0}}, ShardOrder{{1, 0}, {}})));
  EXPECT_NE(HashLayout(a), HashLayout(make(*DeviceMesh::Create({2, 2}, {"dp", "tp"}), {8, 6}, {Shard{0}, Shard{0}})));
  EXPECT_NE(HashLayout(a), HashLayout(make(*DeviceMesh::Create({4, 1}), {8, 6}, {Shard{0}, Shard{0}})));
}

}  // namespace
}  // namespace meshflow
