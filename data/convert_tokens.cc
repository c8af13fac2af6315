// convert_tokens: converts a legacy raw token file (nanoGPT's headerless .bin) into the
// self-describing ".mftok" format of data/token_file.h (header with width, token count,
// vocabulary size and payload CRC-32C).
//
//   bazel run //data:convert_tokens -- --input train.bin --width u16 --output train.mftok [--vocab-size 50257]
//
// Prints one line describing the written file. Exit codes: 0 converted, 1 the conversion failed
// (e.g. a token outside --vocab-size, an input already in the new format, I/O), 2 bad flags.
#include <cstdio>
#include <string>
#include <string_view>

#include "meshflow/base/cli.h"
#include "meshflow/base/parse.h"
#include "meshflow/data/token_file.h"

namespace meshflow {
namespace {

constexpr const char* kUsage =
    "usage: convert_tokens --input RAW --width u16|u32 --output OUT.mftok [--vocab-size N]\n"
    "\n"
    "Converts a headerless little-endian token file into the .mftok format (header with the\n"
    "token width, count, vocabulary size and a CRC-32C of the tokens; see data/token_file.h).\n"
    "\n"
    "flags:\n"
    "  --input PATH       the raw token file\n"
    "  --width u16|u32    its token width (a raw file does not say)\n"
    "  --output PATH      the .mftok file to write (replaced atomically)\n"
    "  --vocab-size N     vocabulary size; every token must be < N (default: max token + 1)\n"
    "  -h, --help         print this help and exit\n"
    "\n"
    "exit codes: 0 converted, 1 conversion failed, 2 bad input (message on stderr).\n";

int BadInput(const Status& s) {
  std::fprintf(stderr, "convert_tokens: %s\n", std::string(s.message()).c_str());
  return 2;
}

int Main(int argc, char** argv) {
  if (HasHelpFlag(argc, argv)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::string input, output, width_text;
  int64_t vocab = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&](std::string* out) -> Status {
      if (i + 1 >= argc) return InvalidArgumentError("missing value after " + std::string(arg));
      *out = argv[++i];
      return Status::Ok();
    };
    Status s;
    std::string text;
    if (arg == "--input") {
      s = value(&input);
    } else if (arg == "--output") {
      s = value(&output);
    } else if (arg == "--width") {
      s = value(&width_text);
    } else if (arg == "--vocab-size") {
      s = value(&text);
      if (s.ok()) {
        StatusOr<int64_t> v = ParseInt64(text, "--vocab-size");
        if (!v.ok()) return BadInput(v.status());
        if (*v < 1) return BadInput(InvalidArgumentError("--vocab-size must be >= 1, got " + text));
        vocab = *v;
      }
    } else {
      s = UnknownArgumentError("convert_tokens", arg);
    }
    if (!s.ok()) return BadInput(s);
  }
  if (input.empty()) return BadInput(InvalidArgumentError("missing --input"));
  if (output.empty()) return BadInput(InvalidArgumentError("missing --output"));
  if (width_text.empty()) return BadInput(InvalidArgumentError("missing --width (u16 or u32)"));
  StatusOr<size_t> w = ParseChoice("--width", width_text, {"u16", "u32"});
  if (!w.ok()) return BadInput(w.status());
  const TokenWidth width = *w == 0 ? TokenWidth::kU16 : TokenWidth::kU32;
  StatusOr<TokenFileHeader> h = ConvertRawTokenFile(input, output, width, vocab);
  if (!h.ok()) {
    std::fprintf(stderr, "convert_tokens: %s\n", h.status().ToString().c_str());
    return 1;
  }
  std::printf("wrote %s: %lld %s tokens, vocabulary %lld, payload CRC-32C 0x%08x\n", output.c_str(),
              static_cast<long long>(h->num_tokens), width_text.c_str(), static_cast<long long>(h->vocab_size),
              h->payload_crc);
  return 0;
}

}  // namespace
}  // namespace meshflow

int main(int argc, char** argv) { return meshflow::Main(argc, argv); }
