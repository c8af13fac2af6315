#include "meshflow/base/cli.h"

namespace meshflow {

bool IsHelpFlag(std::string_view arg) { return arg == "--help" || arg == "-h"; }

bool HasHelpFlag(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    if (IsHelpFlag(argv[i])) return true;
  }
  return false;
}

std::string ExpectedOneOf(std::initializer_list<std::string_view> choices) {
  std::string out = "expected one of ";
  bool first = true;
  for (std::string_view c : choices) {
    if (!first) out += ", ";
    out += c;
    first = false;
  }
  return out;
}

StatusOr<size_t> ParseChoice(std::string_view flag, std::string_view value,
                             std::initializer_list<std::string_view> choices) {
  size_t i = 0;
  for (std::string_view c : choices) {
    if (value == c) return i;
    ++i;
  }
  return InvalidArgumentError("unknown " + std::string(flag) + " '" + std::string(value) + "'; " +
                              ExpectedOneOf(choices));
}

Status UnknownArgumentError(std::string_view program, std::string_view arg) {
  const bool flag = arg.size() > 1 && arg[0] == '-';
  return InvalidArgumentError(std::string(flag ? "unknown flag '" : "unexpected argument '") + std::string(arg) +
                              "'; see '" + std::string(program) + " --help'");
}

}  // namespace meshflow
