// Command-line helpers shared by the project's binaries (tools/, bench/, data/, examples/), so that
// every binary words help requests, unknown flags and unknown values the same way.
//
//   if (HasHelpFlag(argc, argv)) { std::fputs(kUsage, stdout); return 0; }  // --help or -h
//   MF_ASSIGN_OR_RETURN(size_t op, ParseChoice("--op", value, {"all_gather", "all_reduce"}));
//   // INVALID_ARGUMENT "unknown --op 'foo'; expected one of all_gather, all_reduce"
//   return UnknownArgumentError("comm", arg);  // "unknown flag '--bogus'; see 'comm --help'"
#ifndef MESHFLOW_BASE_CLI_H_
#define MESHFLOW_BASE_CLI_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>

#include "meshflow/base/status.h"

namespace meshflow {

// True for "--help" and "-h".
bool IsHelpFlag(std::string_view arg);
// True when one of argv[1..argc) is "--help" or "-h": help wins over every other argument.
bool HasHelpFlag(int argc, const char* const* argv);

// "expected one of a, b, c".
std::string ExpectedOneOf(std::initializer_list<std::string_view> choices);

// The index of `value` in `choices`; else INVALID_ARGUMENT "unknown <flag> '<value>'; expected one
// of <choices>".
StatusOr<size_t> ParseChoice(std::string_view flag, std::string_view value,
                             std::initializer_list<std::string_view> choices);

// INVALID_ARGUMENT for an argument the program does not take, pointing at --help: "unknown flag
// '<arg>'; see '<program> --help'" when `arg` starts with '-' (and is not just "-"), else
// "unexpected argument '<arg>'; see '<program> --help'".
Status UnknownArgumentError(std::string_view program, std::string_view arg);

}  // namespace meshflow

#endif  // MESHFLOW_BASE_CLI_H_
