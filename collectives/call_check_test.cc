#include "meshflow/collectives/call_check.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace meshflow {
namespace {

const std::vector<int> kWorld = {4, 5, 6};

CallSite Site(const char* what, int rank = 0) { return CallSite{"x ", what, kWorld, rank}; }

void ExpectError(const Status& s, StatusCode code, const std::string& message) {
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_EQ(s.message(), message) << s;
}

TEST(CallCheckTest, Names) {
  EXPECT_EQ(Site("all_reduce").Describe(), "x all_reduce on group [4,5,6] (world ranks)");
  EXPECT_EQ(Site("").RankName(2), "group rank 2 (world 6)");
  EXPECT_STREQ(CollectiveKindName(CollectiveKind::kAllToAll), "all_to_all");
  EXPECT_STREQ(CollectiveKindName(static_cast<CollectiveKind>(99)), "?");
  EXPECT_EQ(ListString(std::vector<int64_t>{}), "[]");
  EXPECT_EQ(ListString(std::vector<int>{1, -2}), "[1,-2]");
}

TEST(CallCheckTest, LargeGroupsAreElidedSoTheCauseStaysNearTheStart) {
  std::vector<int> world(2048);
  for (int i = 0; i < 2048; ++i) world[static_cast<size_t>(i)] = i;
  const CallSite site{"x ", "all_gather", world, 3};
  const std::vector<int64_t> counts(2047, 1);
  const Status s = CheckCounts(site, "recv_counts", counts);
  EXPECT_EQ(s.message(),
            "x all_gather on group [0,1,2,3,4,5,6,7,...,2040,2041,2042,2043,2044,2045,2046,2047] (2048 entries) "
            "(world ranks): recv_counts has 2047 entries, expected the group size 2048");
}

TEST(CallCheckTest, Arguments) {
  const CallSite site = Site("all_gather", 1);
  const std::vector<int64_t> ok = {1, 2, 3}, two = {1, 1}, neg = {1, -4, 1};
  EXPECT_TRUE(CheckCounts(site, "recv_counts", ok).ok());
  ExpectError(CheckCounts(site, "recv_counts", two), StatusCode::kInvalidArgument,
              "x all_gather on group [4,5,6] (world ranks): recv_counts has 2 entries, expected the group size 3");
  ExpectError(CheckCounts(site, "counts", neg), StatusCode::kInvalidArgument,
              "x all_gather on group [4,5,6] (world ranks): counts[1] = -4 is negative");
  EXPECT_TRUE(CheckSendCount(site, 2, ok).ok());
  ExpectError(CheckSendCount(site, 5, ok), StatusCode::kInvalidArgument,
              "x all_gather on group [4,5,6] (world ranks): send_count 5 != recv_counts[1] = 2");
  float x = 0;
  EXPECT_TRUE(CheckBuffer(site, "send", nullptr, 0).ok());
  EXPECT_TRUE(CheckBuffer(site, "send", &x, 1).ok());
  ExpectError(CheckBuffer(site, "send", nullptr, 4), StatusCode::kInvalidArgument,
              "x all_gather on group [4,5,6] (world ranks): send is null for 4 elements");
  ExpectError(CheckBuffer(site, "recv", &x, -2), StatusCode::kInvalidArgument,
              "x all_gather on group [4,5,6] (world ranks): negative count -2 for recv");
  EXPECT_TRUE(CheckRoot(site, 2).ok());
  ExpectError(CheckRoot(site, 3), StatusCode::kInvalidArgument,
              "x all_gather on group [4,5,6] (world ranks): root 3 outside [0, 3)");
  ExpectError(CheckRoot(site, -1), StatusCode::kInvalidArgument,
              "x all_gather on group [4,5,6] (world ranks): root -1 outside [0, 3)");
}

TEST(CallCheckTest, SendRecv) {
  const CallSite site = Site("send_recv", 1);
  const SpecCheck spec = [&](const std::string& name, const void* buffer, int64_t count) {
    return CheckSpecBuffer(site, name, buffer, count);
  };
  float buf[8] = {};
  const std::vector<SendSpec> sends = {{0, buf, 1}, {1, buf, 2}};
  const std::vector<RecvSpec> recvs = {{1, buf + 4, 2}, {2, buf + 6, 1}};
  SelfTransfers self;
  ASSERT_TRUE(CheckSendRecv(site, sends, recvs, spec, &self).ok());
  ASSERT_EQ(self.sends.size(), 1u);
  ASSERT_EQ(self.recvs.size(), 1u);
  EXPECT_EQ(self.sends[0], &sends[1]);
  EXPECT_EQ(self.recvs[0], &recvs[0]);

  const std::string where = "x send_recv on group [4,5,6] (world ranks): ";
  const SendSpec bad_peer{3, buf, 1};
  ExpectError(CheckSendRecv(site, {&bad_peer, 1}, {}, spec, nullptr), StatusCode::kInvalidArgument,
              where + "send 0 has peer 3 outside [0, 3)");
  const RecvSpec null_recv{0, nullptr, 2};
  ExpectError(CheckSendRecv(site, {}, {&null_recv, 1}, spec, nullptr), StatusCode::kInvalidArgument,
              where + "receive 0 has a null buffer for count 2");
  const SendSpec neg_send{0, buf, -1};
  ExpectError(CheckSendRecv(site, {&neg_send, 1}, {}, spec, nullptr), StatusCode::kInvalidArgument,
              where + "send 0 has negative count -1");
  // A different per-spec check (the MPI backend's wording) is used as given.
  const SpecCheck buffer_spec = [&](const std::string& name, const void* buffer, int64_t count) {
    return CheckBuffer(site, name.c_str(), buffer, count);
  };
  ExpectError(CheckSendRecv(site, {}, {&null_recv, 1}, buffer_spec, nullptr), StatusCode::kInvalidArgument,
              where + "receive 0 is null for 2 elements");
  const SendSpec self_send{1, buf, 2};
  ExpectError(CheckSendRecv(site, {&self_send, 1}, {}, spec, nullptr), StatusCode::kInvalidArgument,
              where + "1 sends to self but 0 receives from self at group rank 1 (world 5)");
  const RecvSpec self_recv{1, buf + 4, 3};
  ExpectError(CheckSendRecv(site, {&self_send, 1}, {&self_recv, 1}, spec, nullptr), StatusCode::kInvalidArgument,
              where + "send to self #0 has count 2 but receive from self #0 has count 3");
}

Status Match(const char* what, const std::vector<CollectiveCall>& calls) {
  return CheckCallsMatch(Site(what), static_cast<int>(calls.size()),
                         [&](int r) -> const CollectiveCall& { return calls[static_cast<size_t>(r)]; });
}

CollectiveCall Call(CollectiveKind kind) {
  CollectiveCall c;
  c.kind = kind;
  return c;
}

TEST(CallCheckTest, MatchingCallsPass) {
  CollectiveCall a = Call(CollectiveKind::kAllToAll);
  a.counts = {1, 2, 3};
  a.counts2 = {1, 1, 1};
  CollectiveCall b = a, c = a;
  b.counts = {1, 2, 3};
  b.counts2 = {2, 2, 2};
  c.counts2 = {3, 3, 3};
  EXPECT_TRUE(Match("all_to_all", {a, b, c}).ok());
  // Fields that a kind does not use are not compared.
  CollectiveCall s0 = Call(CollectiveKind::kSplit), s1 = s0;
  s1.dtype = DType::kI64;
  s1.count = 9;
  EXPECT_TRUE(Match("split", {s0, s1}).ok());
}

TEST(CallCheckTest, MismatchesNameBothRanksAndValues) {
  const std::string where = "x all_reduce on group [4,5,6] (world ranks): ";
  CollectiveCall a = Call(CollectiveKind::kAllReduce);
  a.count = 4;
  CollectiveCall b = a;
  b.dtype = DType::kI32;
  ExpectError(Match("all_reduce", {a, a, b}), StatusCode::kFailedPrecondition,
              where + "mismatched dtype: f32 at group rank 0 (world 4) vs i32 at group rank 2 (world 6)");
  b = a;
  b.op = ReduceOp::kMax;
  ExpectError(Match("all_reduce", {a, b, a}), StatusCode::kFailedPrecondition,
              where + "mismatched reduce op: sum at group rank 0 (world 4) vs max at group rank 1 (world 5)");
  b = a;
  b.count = 5;
  ExpectError(Match("all_reduce", {a, b, a}), StatusCode::kFailedPrecondition,
              where + "mismatched count: 4 at group rank 0 (world 4) vs 5 at group rank 1 (world 5)");
  b = Call(CollectiveKind::kBarrier);
  ExpectError(Match("all_reduce", {a, b, a}), StatusCode::kFailedPrecondition,
              where + "mismatched collectives: all_reduce at group rank 0 (world 4) vs barrier at group rank 1 (world 5)");
  b = a;
  b.seq = 3;
  ExpectError(Match("all_reduce", {a, a, b}), StatusCode::kFailedPrecondition,
              where +
                  "mismatched collective sequence: group rank 0 (world 4) is at its collective #0 (all_reduce) but "
                  "group rank 2 (world 6) at #3 (all_reduce); a rank skipped or repeated a collective");
  // Per rank, the sequence and kind are checked before any other field of any rank.
  CollectiveCall c = a;
  c.dtype = DType::kF64;
  b = Call(CollectiveKind::kBroadcast);
  ExpectError(Match("all_reduce", {a, c, b}), StatusCode::kFailedPrecondition,
              where +
                  "mismatched collectives: all_reduce at group rank 0 (world 4) vs broadcast at group rank 2 (world 6)");

  // Count vectors: rank `at` posts `other` where the others post `base`.
  struct CountsCase {
    CollectiveKind kind;
    std::vector<int64_t> base, other;
    int at;
    std::string message;
  };
  const std::vector<CountsCase> counts_cases = {
      {CollectiveKind::kAllGather, {1, 1, 1}, {1, 1, 2}, 1,
       "x all_gather on group [4,5,6] (world ranks): mismatched recv_counts: [1,1,1] at group rank 0 (world 4) vs "
       "[1,1,2] at group rank 1 (world 5)"},
      {CollectiveKind::kReduceScatter, {1, 1, 1}, {2, 1, 1}, 2,
       "x reduce_scatter on group [4,5,6] (world ranks): mismatched counts: [1,1,1] at group rank 0 (world 4) vs "
       "[2,1,1] at group rank 2 (world 6)"},
      {CollectiveKind::kAllToAll, {1, 1, 1}, {1, 1, 2}, 0,
       "x all_to_all on group [4,5,6] (world ranks): mismatched counts: group rank 0 (world 4) sends 2 elements to "
       "group rank 2 (world 6), which expects 1 from it"},
  };
  for (const CountsCase& cc : counts_cases) {
    std::vector<CollectiveCall> calls(3, Call(cc.kind));
    for (CollectiveCall& call : calls) call.counts = call.counts2 = cc.base;
    calls[static_cast<size_t>(cc.at)].counts = cc.other;
    ExpectError(Match(CollectiveKindName(cc.kind), calls), StatusCode::kFailedPrecondition, cc.message);
  }
  CollectiveCall r0 = Call(CollectiveKind::kBroadcast), r1 = r0;
  r1.root = 1;
  ExpectError(Match("broadcast", {r0, r0, r1}), StatusCode::kFailedPrecondition,
              "x broadcast on group [4,5,6] (world ranks): mismatched root: 0 at group rank 0 (world 4) vs 1 at group "
              "rank 2 (world 6)");
}

TEST(CallCheckTest, CallSitesAreComparedAndNamed) {
  const std::string where = "x all_reduce on group [4,5,6] (world ranks): ";
  CollectiveCall a = Call(CollectiveKind::kAllReduce);
  a.count = 4;
  a.seq = 7;
  a.file = "train/step.cc";
  a.line = 10;
  EXPECT_EQ(CallDescription(a), "#7 all_reduce called at train/step.cc:10");
  CollectiveCall b = a;
  // A different buffer holding the same file name is the same site.
  const std::string same_file = "train/step.cc";
  b.file = same_file;
  EXPECT_TRUE(Match("all_reduce", {a, b, a}).ok());
  // Same arguments, another line: a skipped call matched against the next one.
  b.line = 12;
  ExpectError(Match("all_reduce", {a, a, b}), StatusCode::kFailedPrecondition,
              where +
                  "mismatched call sites: group rank 0 (world 4) is at its collective #7 all_reduce called at "
                  "train/step.cc:10, but group rank 2 (world 6) at #7 all_reduce called at train/step.cc:12; a rank "
                  "skipped, repeated or reordered a collective");
  b.line = 10;
  b.file = "train/eval.cc";
  EXPECT_EQ(Match("all_reduce", {a, b, a}).code(), StatusCode::kFailedPrecondition);
  // Other mismatches end with both ranks' calls.
  b = a;
  b.line = 12;
  b.count = 5;
  ExpectError(Match("all_reduce", {a, b, a}), StatusCode::kFailedPrecondition,
              where +
                  "mismatched count: 4 at group rank 0 (world 4) vs 5 at group rank 1 (world 5) [group rank 0 (world "
                  "4): #7 all_reduce called at train/step.cc:10; group rank 1 (world 5): #7 all_reduce called at "
                  "train/step.cc:12]");
  // A member without a call site (check_call_sites off) turns the site comparison off.
  b = a;
  b.line = 12;
  CollectiveCall unknown = a;
  unknown.file = {};
  EXPECT_TRUE(Match("all_reduce", {a, b, unknown}).ok());
  EXPECT_EQ(CallDescription(unknown), "#7 all_reduce");
}

}  // namespace
}  // namespace meshflow
