// Tests of plan printing: the text form, JSON well-formedness and key sets (checked with a small
// JSON parser written here), and layout pictures.
#include "meshflow/planner/plan_format.h"

#include <gtest/gtest.h>

#include <cctype>
#include <map>
#include <set>

#include "meshflow/planner/search.h"
#include "meshflow/planner/test_util.h"

namespace meshflow {
namespace {

using testing::MakeLayout;
using testing::MakeMesh;

// A minimal JSON value and parser (objects, arrays, strings, numbers, true/false/null).
struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  double number = 0;
  std::string str;
  std::vector<Json> items;
  std::map<std::string, Json> fields;
  std::set<std::string> Keys() const {
    std::set<std::string> k;
    for (const auto& [name, v] : fields) k.insert(name);
    return k;
  }
};

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}
  bool Parse(Json& out) {
    if (!Value(out)) return false;
    Ws();
    return pos_ == s_.size();
  }

 private:
  void Ws() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool Lit(const char* w) {
    const std::string word(w);
    if (s_.compare(pos_, word.size(), word) != 0) return false;
    pos_ += word.size();
    return true;
  }
  bool String(std::string& out) {
    if (pos_ >= s_.size() || s_[pos_] != '"') return false;
    ++pos_;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      if (s_[pos_] == '\\') ++pos_;
      if (pos_ < s_.size()) out += s_[pos_++];
    }
    if (pos_ >= s_.size()) return false;
    ++pos_;
    return true;
  }
  bool Value(Json& v) {
    Ws();
    if (pos_ >= s_.size()) return false;
    const char c = s_[pos_];
    if (c == '{') {
      v.kind = Json::kObject;
      ++pos_;
      Ws();
      if (pos_ < s_.size() && s_[pos_] == '}') return ++pos_, true;
      while (true) {
        Ws();
        std::string key;
        if (!String(key)) return false;
        Ws();
        if (pos_ >= s_.size() || s_[pos_++] != ':') return false;
        if (v.fields.count(key)) return false;  // duplicate key
        if (!Value(v.fields[key])) return false;
        Ws();
        if (pos_ >= s_.size()) return false;
        if (s_[pos_] == ',') {
          ++pos_;
          continue;
        }
        return s_[pos_++] == '}';
      }
    }
    if (c == '[') {
      v.kind = Json::kArray;
      ++pos_;
      Ws();
      if (pos_ < s_.size() && s_[pos_] == ']') return ++pos_, true;
      while (true) {
        v.items.emplace_back();
        if (!Value(v.items.back())) return false;
        Ws();
        if (pos_ >= s_.size()) return false;
        if (s_[pos_] == ',') {
          ++pos_;
          continue;
        }
        return s_[pos_++] == ']';
      }
    }
    if (c == '"') {
      v.kind = Json::kString;
      return String(v.str);
    }
    if (Lit("null")) return v.kind = Json::kNull, true;
    if (Lit("true") || Lit("false")) return v.kind = Json::kBool, true;
    size_t used = 0;
    try {
      v.number = std::stod(s_.substr(pos_), &used);
    } catch (...) {
      return false;
    }
    if (used == 0) return false;
    pos_ += used;
    v.kind = Json::kNumber;
    return true;
  }
  const std::string& s_;
  size_t pos_ = 0;
};

TEST(PlanFormatTest, JsonKeysAndValues) {
  const DeviceMesh m = MakeMesh({2, 2});
  const std::set<std::string> top = {"steps", "modelled_us", "max_bytes_received_per_rank",
                                     "lower_bound_bytes_per_rank", "planner", "proven_optimal",
                                     "search_edges"};
  const std::set<std::string> step_keys = {"kind", "mesh_dims", "tensor_dim", "bytes_per_rank"};
  for (const char* from : {"S(0),S(1)", "P,S(1)", "S(0),S(0)"}) {
    StatusOr<Plan> plan =
        PlanRedistribution(MakeLayout({8, 6}, m, from), MakeLayout({8, 6}, m, "R,S(0)"), DType::kF32, Topology());
    ASSERT_TRUE(plan.ok()) << plan.status();
    const std::string text = PlanToJson(*plan);
    Json j;
    ASSERT_TRUE(Parser(text).Parse(j)) << text;
    ASSERT_EQ(j.kind, Json::kObject);
    EXPECT_EQ(j.Keys(), top) << text;
    EXPECT_EQ(j.fields["planner"].str, "optimal");
    EXPECT_EQ(j.fields["proven_optimal"].kind, Json::kBool) << text;
    EXPECT_EQ(j.fields["search_edges"].number, plan->search_edges);
    EXPECT_EQ(j.fields["max_bytes_received_per_rank"].number, plan->max_bytes_received_per_rank);
    EXPECT_NEAR(j.fields["modelled_us"].number, plan->modelled_us, 1e-9);
    if (plan->lower_bound_bytes_per_rank) {
      EXPECT_EQ(j.fields["lower_bound_bytes_per_rank"].number, *plan->lower_bound_bytes_per_rank);
    } else {
      EXPECT_EQ(j.fields["lower_bound_bytes_per_rank"].kind, Json::kNull);
    }
    ASSERT_EQ(j.fields["steps"].items.size(), plan->steps.size());
    for (size_t i = 0; i < plan->steps.size(); ++i) {
      Json& s = j.fields["steps"].items[i];
      EXPECT_EQ(s.Keys(), step_keys);
      EXPECT_EQ(s.fields["kind"].str, StepKindName(plan->steps[i].kind));
      EXPECT_EQ(s.fields["mesh_dims"].items.size(), plan->steps[i].mesh_dims.size());
      EXPECT_EQ(s.fields["bytes_per_rank"].number, plan->steps[i].bytes_per_rank);
    }
  }
  // Empty plan.
  const Layout a = MakeLayout({4}, m, "R,R");
  StatusOr<Plan> empty = PlanRedistribution(a, a, DType::kF32, Topology());
  ASSERT_TRUE(empty.ok());
  Json j;
  ASSERT_TRUE(Parser(PlanToJson(*empty)).Parse(j));
  EXPECT_EQ(j.Keys(), top);
  EXPECT_TRUE(j.fields["steps"].items.empty());
}

TEST(PlanFormatTest, Text) {
  const DeviceMesh m = MakeMesh({2, 2});
  StatusOr<Plan> plan = PlanRedistribution(MakeLayout({8, 8}, m, "S(0),S(1)"), MakeLayout({8, 8}, m, "S(1),S(0)"),
                                           DType::kF32, Topology());
  ASSERT_TRUE(plan.ok());
  const std::string text = PlanToText(*plan);
  EXPECT_NE(text.find("plan (optimal): S(0),S(1) -> S(1),S(0) on mesh(2x2) shape [8,8], f32, 1 step"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("1. send_recv"), std::string::npos) << text;
  EXPECT_NE(text.find("bytes/rank=64"), std::string::npos) << text;
  EXPECT_NE(text.find("lower bound 64, ratio 1.00"), std::string::npos) << text;
  StatusOr<Plan> partial =
      PlanRedistribution(MakeLayout({8}, m, "P,R"), MakeLayout({8}, m, "R,R"), DType::kF32, Topology());
  ASSERT_TRUE(partial.ok());
  EXPECT_NE(PlanToText(*partial).find("lower bound n/a"), std::string::npos);
}

TEST(PlanFormatTest, LocalShardToPartialName) {
  const DeviceMesh m = MakeMesh({4});
  StatusOr<Plan> plan = PlanRedistribution(MakeLayout({1024, 256}, m, "S(0)"), MakeLayout({1024, 256}, m, "P(sum)"),
                                           DType::kF32, Topology());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(PlanToJson(*plan),
            "{\"steps\":[{\"kind\":\"local_shard_to_partial\",\"mesh_dims\":[0],\"tensor_dim\":0,"
            "\"bytes_per_rank\":0}],\"modelled_us\":0,\"max_bytes_received_per_rank\":0,"
            "\"lower_bound_bytes_per_rank\":0,\"planner\":\"optimal\",\"proven_optimal\":true,"
            "\"search_edges\":4}");
  const std::string text = PlanToText(*plan);
  EXPECT_NE(text.find("1. local_shard_to_partial mesh_dims=[0]"), std::string::npos) << text;
  EXPECT_NE(text.find("lower bound 0, ratio 1.00"), std::string::npos) << text;
}

TEST(PlanFormatTest, DrawTwoD) {
  const DeviceMesh m = MakeMesh({2, 2});
  // Compared whole: the picture is the contract (like DTensor's visualize_sharding).
  EXPECT_EQ(DrawLayout(MakeLayout({8, 8}, m, "S(0),S(1)")),
            "S(0),S(1) on mesh(2x2) shape [8,8]\n"
            "       0:4   4:8\n"
            "     +-----+-----+\n"
            "  0:4| 0   | 1   |\n"
            "     +-----+-----+\n"
            "  4:8| 2   | 3   |\n"
            "     +-----+-----+\n");
  const std::string r = DrawLayout(MakeLayout({3, 2}, m, "S(0),R"));
  EXPECT_NE(r.find("| 0,1 |"), std::string::npos) << r;
  EXPECT_NE(r.find("| 2,3 |"), std::string::npos) << r;
  const std::string p = DrawLayout(MakeLayout({3, 2}, m, "P(max),S(1)"));
  EXPECT_NE(p.find("Partial(max) on mesh dims [0]"), std::string::npos) << p;
}

TEST(PlanFormatTest, DrawOneDUnevenAndHigherRank) {
  const DeviceMesh m = MakeMesh({4});
  const std::string one = DrawLayout(MakeLayout({5}, m, "S(0)"));
  // 5 over 4: [0:2], [2:4], [4:5], [5:5] (empty on rank 3).
  EXPECT_NE(one.find("| 0   | 1   | 2   |"), std::string::npos) << one;
  EXPECT_NE(one.find("ranks with empty shards: 3"), std::string::npos) << one;
  const std::string three = DrawLayout(MakeLayout({2, 3, 4}, m, "S(2)"));
  EXPECT_NE(three.find("block [0:2, 0:3, 0:1]: ranks 0"), std::string::npos) << three;
  const std::string zero = DrawLayout(MakeLayout({0, 3}, m, "S(0)"));
  EXPECT_NE(zero.find("(no elements)"), std::string::npos) << zero;
  const std::string scalar = DrawLayout(MakeLayout({}, m, "R"));
  EXPECT_NE(scalar.find("block []: ranks 0,1,2,3"), std::string::npos) << scalar;
}

}  // namespace
}  // namespace meshflow
