#include "meshflow/base/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <utility>

namespace meshflow {

std::string JsonDouble(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, end) : "null";
}

std::string JsonQuote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

void JsonWriter::Fail(std::string message) {
  if (error_.ok()) error_ = FailedPreconditionError("JsonWriter: " + std::move(message));
}

bool JsonWriter::BeginValue(const char* what) {
  if (!error_.ok()) return false;
  if (stack_.empty()) {
    if (done_) {
      Fail(std::string(what) + " after the complete top-level value");
      return false;
    }
    return true;
  }
  Frame& f = stack_.back();
  if (f.object) {
    if (!f.key_pending) {
      Fail(std::string(what) + " in an object where a Key is expected");
      return false;
    }
    f.key_pending = false;
    return true;
  }
  if (f.has_items) out_ += style_ == JsonStyle::kSpaced ? ", " : ",";
  f.has_items = true;
  return true;
}

JsonWriter& JsonWriter::Key(std::string_view key) {
  if (!error_.ok()) return *this;
  if (stack_.empty() || !stack_.back().object) {
    Fail("Key(\"" + std::string(key) + "\") outside an object");
    return *this;
  }
  Frame& f = stack_.back();
  if (f.key_pending) {
    Fail("Key(\"" + std::string(key) + "\") where the previous key's value is expected");
    return *this;
  }
  if (f.has_items) out_ += style_ == JsonStyle::kSpaced ? ", " : ",";
  f.has_items = true;
  f.key_pending = true;
  out_ += JsonQuote(key);
  out_ += style_ == JsonStyle::kSpaced ? ": " : ":";
  return *this;
}

JsonWriter& JsonWriter::BeginObject() {
  if (!BeginValue("BeginObject")) return *this;
  out_ += '{';
  stack_.push_back(Frame{.object = true});
  return *this;
}

JsonWriter& JsonWriter::BeginArray() {
  if (!BeginValue("BeginArray")) return *this;
  out_ += '[';
  stack_.push_back(Frame{.object = false});
  return *this;
}

JsonWriter& JsonWriter::EndObject() {
  if (!error_.ok()) return *this;
  if (stack_.empty() || !stack_.back().object) {
    Fail(stack_.empty() ? "EndObject with nothing open" : "EndObject in an array");
  } else if (stack_.back().key_pending) {
    Fail("EndObject after a Key without its value");
  } else {
    out_ += '}';
    stack_.pop_back();
    done_ = stack_.empty();
  }
  return *this;
}

JsonWriter& JsonWriter::EndArray() {
  if (!error_.ok()) return *this;
  if (stack_.empty() || stack_.back().object) {
    Fail(stack_.empty() ? "EndArray with nothing open" : "EndArray in an object");
  } else {
    out_ += ']';
    stack_.pop_back();
    done_ = stack_.empty();
  }
  return *this;
}

JsonWriter& JsonWriter::Raw(std::string_view json) {
  if (!BeginValue("a value")) return *this;
  out_ += json;
  done_ = stack_.empty();
  return *this;
}

JsonWriter& JsonWriter::String(std::string_view s) { return Raw(JsonQuote(s)); }
JsonWriter& JsonWriter::Int(int64_t v) { return Raw(std::to_string(v)); }
JsonWriter& JsonWriter::Double(double v) { return Raw(JsonDouble(v)); }
JsonWriter& JsonWriter::Bool(bool v) { return Raw(v ? "true" : "false"); }
JsonWriter& JsonWriter::Null() { return Raw("null"); }

JsonWriter& JsonWriter::Ints(std::span<const int64_t> v) {
  BeginArray();
  for (int64_t x : v) Int(x);
  return EndArray();
}

JsonWriter& JsonWriter::Ints(std::span<const int> v) {
  BeginArray();
  for (int x : v) Int(x);
  return EndArray();
}

StatusOr<std::string> JsonWriter::Finish() && {
  if (!error_.ok()) return error_;
  if (!stack_.empty()) {
    return FailedPreconditionError("JsonWriter: Finish with " + std::to_string(stack_.size()) +
                                   " object(s) or array(s) still open");
  }
  if (!done_) return FailedPreconditionError("JsonWriter: Finish before any value was written");
  return std::move(out_);
}

}  // namespace meshflow
