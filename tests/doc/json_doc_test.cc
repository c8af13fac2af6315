// The example in base/json.h is compiled and run here; keep them identical.
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/base/json.h"
#include "meshflow/base/status.h"

namespace meshflow {
namespace {

// base/json.h
TEST(JsonDocTest, WriterExample) {
  JsonWriter w;
  w.BeginObject();
  w.Key("plan").String("fsdp \"v2\"");
  w.Key("ranks").Int(4);
  w.Key("loss").Double(0.25);
  w.Key("mesh_dims").Ints(std::vector<int>{0, 1});
  w.Key("lower_bound").Null();
  w.Key("steps").BeginArray().BeginObject().Key("kind").String("all_gather").EndObject().EndArray();
  w.EndObject();
  StatusOr<std::string> json = std::move(w).Finish();
  // {"plan":"fsdp \"v2\"","ranks":4,"loss":0.25,"mesh_dims":[0,1],"lower_bound":null,
  //  "steps":[{"kind":"all_gather"}]}

  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(*json,
            R"({"plan":"fsdp \"v2\"","ranks":4,"loss":0.25,"mesh_dims":[0,1],"lower_bound":null,)"
            R"("steps":[{"kind":"all_gather"}]})");
  JsonWriter spaced(JsonStyle::kSpaced);
  spaced.BeginObject().Key("plan").String("fsdp").Key("ranks").Int(4).EndObject();
  EXPECT_EQ(*std::move(spaced).Finish(), R"({"plan": "fsdp", "ranks": 4})");
}

}  // namespace
}  // namespace meshflow
