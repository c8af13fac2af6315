// JsonWriter: one JSON value (an object, an array or a scalar) built call by call, for the JSON
// that meshflow's tools and examples print (dtplan --json, PlanToJson, train_mlp's lines). No
// parser, no DOM: values are written in call order, so an object's keys keep insertion order.
//
//   JsonWriter w;
//   w.BeginObject();
//   w.Key("plan").String("fsdp \"v2\"");
//   w.Key("ranks").Int(4);
//   w.Key("loss").Double(0.25);
//   w.Key("mesh_dims").Ints(std::vector<int>{0, 1});
//   w.Key("lower_bound").Null();
//   w.Key("steps").BeginArray().BeginObject().Key("kind").String("all_gather").EndObject().EndArray();
//   w.EndObject();
//   StatusOr<std::string> json = std::move(w).Finish();
//   // {"plan":"fsdp \"v2\"","ranks":4,"loss":0.25,"mesh_dims":[0,1],"lower_bound":null,
//   //  "steps":[{"kind":"all_gather"}]}
//
// JsonWriter(JsonStyle::kSpaced) writes ", " and ": " between items instead of "," and ":"
// ({"plan": "fsdp", "ranks": 4}); there are no newlines either way.
//
// Numbers: Int writes the integer exactly (9007199254740993, not 9.007199254740992e+15). Double
// writes the shortest text that parses back to the same double (std::to_chars: 0.1, 1e+06, -0,
// 0.10000000149011612 for the double nearest 0.1f); inf and nan, which JSON cannot express, are
// null (JsonDouble). Strings: '"' and '\\' escaped, \n \r \t \b \f as such, the other control
// characters as \u00XX; other bytes (UTF-8) are copied as they are.
//
// Misuse (a value where an object expects a key, a key outside an object, an End of the wrong
// kind, a second top-level value, Finish with an open object or array) makes Finish return
// FAILED_PRECONDITION naming the first misuse; the calls after it are ignored.
#ifndef MESHFLOW_BASE_JSON_H_
#define MESHFLOW_BASE_JSON_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "meshflow/base/status.h"

namespace meshflow {

// The JSON text of a double: the shortest decimal that parses back to the same double
// ("0.1", "528", "1e+06", "-0"); "null" for inf, -inf and nan.
std::string JsonDouble(double v);
// The JSON string literal of `s`, quotes included: "a\"b" for a"b.
std::string JsonQuote(std::string_view s);

enum class JsonStyle {
  kCompact,  // {"a":1,"b":[1,2]}
  kSpaced,   // {"a": 1, "b": [1, 2]}
};

class JsonWriter {
 public:
  explicit JsonWriter(JsonStyle style = JsonStyle::kCompact) : style_(style) {}

  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  // The next member's key; inside an object, every value follows a Key.
  JsonWriter& Key(std::string_view key);

  JsonWriter& String(std::string_view s);
  JsonWriter& Int(int64_t v);
  JsonWriter& Double(double v);
  JsonWriter& Bool(bool v);
  JsonWriter& Null();
  // An array of integers: [0,1] (shapes, offsets, mesh dims).
  JsonWriter& Ints(std::span<const int64_t> v);
  JsonWriter& Ints(std::span<const int> v);
  // A value that is already JSON text (e.g. FormatElementJson's), copied as it is (not checked).
  JsonWriter& Raw(std::string_view json);

  // The document. Errors: FAILED_PRECONDITION on misuse (see above) or when nothing was written.
  StatusOr<std::string> Finish() &&;

 private:
  struct Frame {
    bool object = false;
    bool has_items = false;
    bool key_pending = false;  // objects: Key was called, its value not yet written
  };
  // Separators and checks before a value; false (and the error recorded) on misuse.
  bool BeginValue(const char* what);
  void Fail(std::string message);

  JsonStyle style_;
  std::string out_;
  std::vector<Frame> stack_;
  bool done_ = false;  // a complete top-level value was written
  Status error_;
};

}  // namespace meshflow

#endif  // MESHFLOW_BASE_JSON_H_
