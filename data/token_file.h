// TokenFileDataset: a token file (nanoGPT's train.bin, or the self-describing ".mftok" format)
// cut into fixed-length sequences.
//
// Format ".mftok", version 1 (little-endian), written by WriteTokenFile and convert_tokens:
//
//   offset size  field
//        0    8  magic "MFTOKENS"
//        8    4  u32 version = 1
//       12    4  u32 token width in bytes: 2 (uint16) or 4 (uint32)
//       16    8  u64 token count
//       24    8  u64 vocabulary size (every token < it; >= 1)
//       32    4  u32 CRC-32C (base/checksum.h) of the payload
//       36   24  reserved, 0
//       60    4  u32 CRC-32C of header bytes [0, 60)
//       64       payload: token count x width bytes
//
// Opening a ".mftok" file checks the header (DATA_LOSS naming the file: bad header CRC, bad
// width / vocabulary, a file size != 64 + count * width such as a file truncated to half, a payload
// CRC mismatch when verify_checksum), and that TokenFileOptions::width, when given, matches.
// A file without the magic is a legacy raw file (a headerless little-endian uint16/uint32 array):
// it opens only with an explicit TokenFileOptions::width (its size must be a multiple of it);
// nothing else about it can be checked. ConvertRawTokenFile (and the convert_tokens binary) turn
// a raw file into a ".mftok" file.
//
// Sample i is the seq_len + 1 tokens starting at token i * seq_len:
//
//   tokens   t0 t1 t2 t3 t4 t5 t6 t7 t8       (seq_len = 4)
//   sample 0 t0 t1 t2 t3 t4                   input = sample[0:4], target = sample[1:5]
//   sample 1             t4 t5 t6 t7 t8
//
// Consecutive samples overlap by one token, so every token except t0 is a prediction target
// exactly once per epoch; num_samples = (num_tokens - 1) / seq_len (a tail shorter than a whole
// sequence is not used). The sample shape is [seq_len + 1] and the dtype is the requested output
// dtype, i32 or i64 (tokens are zero-extended; a uint32 token above INT32_MAX read as i32, and a
// token >= the header's vocabulary size, are DATA_LOSS errors naming the token position).
// Reads use pread: a file truncated after open gives DATA_LOSS, never SIGBUS.
//
// Errors at open (naming the file): NOT_FOUND (missing file), DATA_LOSS as above or for fewer
// than seq_len + 1 tokens; INVALID_ARGUMENT for seq_len < 1 or > 2^40, an output dtype other
// than i32/i64, a raw file without an explicit width, a width differing from the header's.
//
//   MF_RETURN_IF_ERROR(WriteTokenFile("t.bin", tokens, TokenWidth::kU16));
//   MF_ASSIGN_OR_RETURN(auto ds, TokenFileDataset::Open("t.bin", {.seq_len = 128}));
//   ds->sample_shape()  ->  {129}
#ifndef MESHFLOW_DATA_TOKEN_FILE_H_
#define MESHFLOW_DATA_TOKEN_FILE_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/data/dataset.h"
#include "meshflow/data/mapped_file.h"
#include "meshflow/dtensor/dtype.h"

namespace meshflow {

enum class TokenWidth { kU16 = 2, kU32 = 4 };

inline constexpr char kTokenFileMagic[8] = {'M', 'F', 'T', 'O', 'K', 'E', 'N', 'S'};
inline constexpr uint32_t kTokenFileVersion = 1;
inline constexpr int64_t kTokenFileHeaderSize = 64;
inline constexpr int64_t kTokenFileMaxSeqLen = int64_t{1} << 40;

// The decoded header of a ".mftok" file.
struct TokenFileHeader {
  uint32_t version = kTokenFileVersion;
  TokenWidth width = TokenWidth::kU16;
  int64_t num_tokens = 0;
  int64_t vocab_size = 0;
  uint32_t payload_crc = 0;
  friend bool operator==(const TokenFileHeader&, const TokenFileHeader&) = default;
};

// Encodes a header (computes the header CRC).
std::vector<std::byte> EncodeTokenFileHeader(const TokenFileHeader& header);
// Decodes and validates the first 64 bytes of `bytes` (callers check the magic first for raw
// files). Errors: DATA_LOSS naming `path` (short, bad magic, header CRC, width, vocabulary,
// token count above 2^60); UNIMPLEMENTED for another version.
StatusOr<TokenFileHeader> DecodeTokenFileHeader(std::span<const std::byte> bytes, const std::string& path);

struct TokenFileOptions {
  int64_t seq_len = 0;                    // tokens per input sequence (each sample holds seq_len + 1)
  std::optional<TokenWidth> width = std::nullopt;  // required for raw files; checked against a header
  DType dtype = DType::kI32;              // output dtype: kI32 or kI64
  bool verify_checksum = true;            // .mftok: check the payload CRC at open (reads the file once)
};

// Writes `tokens` as a ".mftok" file. vocab_size 0 = max token + 1. Errors: a token that does
// not fit `width` or is >= vocab_size (naming its position), I/O errors naming the path.
Status WriteTokenFile(const std::string& path, std::span<const uint32_t> tokens, TokenWidth width,
                      int64_t vocab_size = 0);
// Writes a legacy headerless raw file (for tests and tools). Errors as WriteTokenFile.
Status WriteRawTokenFile(const std::string& path, std::span<const uint32_t> tokens, TokenWidth width);
// Converts the raw token file `in` (little-endian `width` ids) into the ".mftok" file `out`.
// vocab_size 0 = max token + 1. Errors: `in` missing, already a ".mftok" file, its size not a
// multiple of the width, a token >= vocab_size (naming its position), I/O errors.
StatusOr<TokenFileHeader> ConvertRawTokenFile(const std::string& in, const std::string& out, TokenWidth width,
                                              int64_t vocab_size = 0);

class TokenFileDataset final : public Dataset {
 public:
  static StatusOr<std::shared_ptr<TokenFileDataset>> Open(const std::string& path, TokenFileOptions options);

  int64_t size() const override { return num_samples_; }
  DType dtype() const override { return dtype_; }
  const std::vector<int64_t>& sample_shape() const override { return sample_shape_; }
  std::string name() const override { return "token file '" + file_->path() + "'"; }
  uint64_t fingerprint() const override { return fingerprint_; }

  int64_t num_tokens() const { return num_tokens_; }
  int64_t seq_len() const { return seq_len_; }
  TokenWidth width() const { return width_; }
  // The header, or nullopt for a raw file.
  const std::optional<TokenFileHeader>& header() const { return header_; }
  // Reads tokens [first, first + out.size()) zero-extended to int64 (no vocabulary check).
  // Errors: range outside [0, num_tokens()), I/O errors.
  Status ReadTokens(int64_t first, std::span<int64_t> out) const;

 protected:
  Status ReadUnchecked(int64_t index, std::span<std::byte> dst) const override;
  // Consecutive samples overlap by one token: a run of them is one contiguous read (in pieces of
  // about 1 MiB) into a per-thread buffer, widened from there into dst.
  Status ReadRunUnchecked(int64_t first, int64_t count, std::span<std::byte> dst) const override;

 private:
  TokenFileDataset() = default;
  std::unique_ptr<RandomAccessFile> file_;
  int64_t payload_offset_ = 0;
  TokenWidth width_ = TokenWidth::kU16;
  DType dtype_ = DType::kI32;
  int64_t seq_len_ = 0;
  std::optional<TokenFileHeader> header_;
  std::vector<int64_t> sample_shape_;
  int64_t num_tokens_ = 0;
  int64_t num_samples_ = 0;
  uint64_t fingerprint_ = 0;
};

}  // namespace meshflow

#endif  // MESHFLOW_DATA_TOKEN_FILE_H_
