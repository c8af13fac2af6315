// text_to_tokens: turns text files (a corpus a Debian package ships, e.g. the Python standard
// library sources under /usr/lib/python3.*) into a byte-level ".mftok" token file (data/token_file.h):
// every byte is one token (vocabulary 256), files concatenated in sorted path order, each followed
// by one '\n' byte, so the output is a deterministic function of the inputs' paths and contents.
//
//   bazel run //data:text_to_tokens -- --output corpus.mftok --suffix .py --max-bytes 4000000 /usr/lib/python3.11
//
// Inputs are files or directories (walked recursively; symbolic links are not followed; only
// regular files whose name ends with --suffix are taken, default: every file). --max-bytes stops
// after that many tokens (the last file is cut). Prints one line: files, tokens, output.
// Exit codes: 0 written, 1 I/O failure, 2 bad input (no input, an input that does not exist, no
// file matched, bad flags).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "meshflow/base/cli.h"
#include "meshflow/base/parse.h"
#include "meshflow/data/token_file.h"

namespace meshflow {
namespace {

constexpr const char* kUsage =
    "usage: text_to_tokens --output OUT.mftok [--suffix S] [--max-bytes N] PATH...\n"
    "\n"
    "Writes the bytes of the text files under PATH... (files or directories, walked recursively,\n"
    "sorted by path, each file followed by a newline) as a byte-level .mftok token file\n"
    "(vocabulary 256, one token per byte).\n"
    "\n"
    "flags:\n"
    "  --output PATH     the .mftok file to write\n"
    "  --suffix S        only files whose name ends with S (e.g. .py; default: every file)\n"
    "  --max-bytes N     stop after N tokens (default: everything)\n"
    "  -h, --help        print this help and exit\n"
    "\n"
    "exit codes: 0 written, 1 I/O failure, 2 bad input (message on stderr).\n";

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "text_to_tokens: %s\n", message.c_str());
  return code;
}

int Main(int argc, char** argv) {
  if (HasHelpFlag(argc, argv)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::string output, suffix;
  int64_t max_bytes = -1;
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--output" || arg == "--suffix" || arg == "--max-bytes") {
      if (i + 1 >= argc) return Fail(2, "missing value after " + std::string(arg));
      const std::string value = argv[++i];
      if (arg == "--output") {
        output = value;
      } else if (arg == "--suffix") {
        suffix = value;
      } else {
        StatusOr<int64_t> n = ParseInt64(value, "--max-bytes");
        if (!n.ok() || *n < 1) return Fail(2, "--max-bytes must be an integer >= 1, got '" + value + "'");
        max_bytes = *n;
      }
    } else if (!arg.empty() && arg[0] == '-') {
      return Fail(2, std::string(UnknownArgumentError("text_to_tokens", arg).message()));
    } else {
      inputs.emplace_back(arg);
    }
  }
  if (output.empty()) return Fail(2, "missing --output");
  if (inputs.empty()) return Fail(2, "no input PATH given");
  std::vector<std::filesystem::path> files;
  for (const std::string& in : inputs) {
    std::error_code ec;
    const std::filesystem::file_status st = std::filesystem::status(in, ec);
    if (ec || !std::filesystem::exists(st)) return Fail(2, "input '" + in + "' does not exist");
    auto take = [&](const std::filesystem::path& p) {
      const std::string name = p.filename().string();
      if (suffix.empty() || (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)) {
        files.push_back(p);
      }
    };
    if (std::filesystem::is_directory(st)) {
      std::filesystem::recursive_directory_iterator it(in, std::filesystem::directory_options::skip_permission_denied, ec);
      if (ec) return Fail(1, "cannot list '" + in + "': " + ec.message());
      for (; it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
        if (ec) return Fail(1, "cannot list '" + in + "': " + ec.message());
        if (it->is_regular_file(ec) && !it->is_symlink(ec)) take(it->path());
      }
    } else if (std::filesystem::is_regular_file(st)) {
      take(in);
    } else {
      return Fail(2, "input '" + in + "' is neither a regular file nor a directory");
    }
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  if (files.empty()) return Fail(2, "no file under the inputs matches --suffix '" + suffix + "'");
  std::vector<uint32_t> tokens;
  int64_t used_files = 0;
  for (const std::filesystem::path& f : files) {
    if (max_bytes >= 0 && static_cast<int64_t>(tokens.size()) >= max_bytes) break;
    std::ifstream in(f, std::ios::binary);
    if (!in) return Fail(1, "cannot read '" + f.string() + "'");
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) return Fail(1, "cannot read '" + f.string() + "'");
    for (char c : bytes) tokens.push_back(static_cast<unsigned char>(c));
    tokens.push_back('\n');
    ++used_files;
  }
  if (max_bytes >= 0 && static_cast<int64_t>(tokens.size()) > max_bytes) tokens.resize(static_cast<size_t>(max_bytes));
  const Status s = WriteTokenFile(output, tokens, TokenWidth::kU16, /*vocab_size=*/256);
  if (!s.ok()) return Fail(1, s.ToString());
  std::printf("wrote %s: %lld files, %lld byte tokens (vocabulary 256)\n", output.c_str(),
              static_cast<long long>(used_files), static_cast<long long>(tokens.size()));
  return 0;
}

}  // namespace
}  // namespace meshflow

int main(int argc, char** argv) { return meshflow::Main(argc, argv); }
