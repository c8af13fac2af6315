#include "meshflow/data/token_file.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

#include "meshflow/base/byte_io.h"
#include "meshflow/base/checksum.h"

namespace meshflow {

static_assert(std::endian::native == std::endian::little, "token files are read as little-endian");

namespace {

constexpr size_t kMagicOff = 0, kVersionOff = 8, kWidthOff = 12, kCountOff = 16, kVocabOff = 24, kPayloadCrcOff = 32,
                 kReservedOff = 36, kHeaderCrcOff = 60;
constexpr int64_t kMaxTokens = int64_t{1} << 60;

// Encodes tokens into `width` bytes each. Errors name the position of a token that does not fit
// the width or the vocabulary.
Status EncodeTokens(const std::string& what, std::span<const uint32_t> tokens, TokenWidth width, int64_t vocab_size,
                    std::vector<std::byte>* out) {
  const size_t w = static_cast<size_t>(width);
  out->assign(tokens.size() * w, std::byte{0});
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (width == TokenWidth::kU16 && tokens[i] > 0xFFFFu) {
      return InvalidArgumentError(what + ": token " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                                  " does not fit uint16");
    }
    if (vocab_size > 0 && static_cast<int64_t>(tokens[i]) >= vocab_size) {
      return InvalidArgumentError(what + ": token " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                                  " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
    }
    if (width == TokenWidth::kU16) {
      const uint16_t t = static_cast<uint16_t>(tokens[i]);
      std::memcpy(out->data() + i * w, &t, w);
    } else {
      std::memcpy(out->data() + i * w, &tokens[i], w);
    }
  }
  return Status::Ok();
}

}  // namespace

std::vector<std::byte> EncodeTokenFileHeader(const TokenFileHeader& h) {
  std::vector<std::byte> out(kTokenFileHeaderSize, std::byte{0});
  std::memcpy(out.data() + kMagicOff, kTokenFileMagic, 8);
  StoreLe<uint32_t>(out.data() + kVersionOff, h.version);
  StoreLe<uint32_t>(out.data() + kWidthOff, static_cast<uint32_t>(h.width));
  StoreLe<uint64_t>(out.data() + kCountOff, static_cast<uint64_t>(h.num_tokens));
  StoreLe<uint64_t>(out.data() + kVocabOff, static_cast<uint64_t>(h.vocab_size));
  StoreLe<uint32_t>(out.data() + kPayloadCrcOff, h.payload_crc);
  StoreLe<uint32_t>(out.data() + kHeaderCrcOff, Crc32c(std::span<const std::byte>(out.data(), kHeaderCrcOff)));
  return out;
}

StatusOr<TokenFileHeader> DecodeTokenFileHeader(std::span<const std::byte> bytes, const std::string& path) {
  const std::string where = "token file '" + path + "'";
  if (static_cast<int64_t>(bytes.size()) < kTokenFileHeaderSize) {
    return DataLossError(where + ": truncated header: " + std::to_string(bytes.size()) + " bytes, the header needs " +
                         std::to_string(kTokenFileHeaderSize));
  }
  if (std::memcmp(bytes.data() + kMagicOff, kTokenFileMagic, 8) != 0) {
    return DataLossError(where + ": corrupted header: bad magic (expected \"MFTOKENS\")");
  }
  TokenFileHeader h;
  h.version = LoadLe<uint32_t>(bytes.data() + kVersionOff);
  if (h.version != kTokenFileVersion) {
    return UnimplementedError(where + ": unsupported format version " + std::to_string(h.version) +
                              " (this reader reads " + std::to_string(kTokenFileVersion) + ")");
  }
  const uint32_t stored = LoadLe<uint32_t>(bytes.data() + kHeaderCrcOff);
  const uint32_t crc = Crc32c(bytes.subspan(0, kHeaderCrcOff));
  if (stored != crc) {
    return DataLossError(where + ": corrupted header: header CRC-32C is " + Crc32cString(crc) + ", stored " + Crc32cString(stored));
  }
  const uint32_t width = LoadLe<uint32_t>(bytes.data() + kWidthOff);
  if (width != 2 && width != 4) {
    return DataLossError(where + ": corrupted header: token width " + std::to_string(width) + " (expected 2 or 4)");
  }
  h.width = static_cast<TokenWidth>(width);
  const uint64_t count = LoadLe<uint64_t>(bytes.data() + kCountOff);
  if (count > static_cast<uint64_t>(kMaxTokens)) {
    return DataLossError(where + ": corrupted header: token count " + std::to_string(count) + " > 2^60");
  }
  h.num_tokens = static_cast<int64_t>(count);
  const uint64_t vocab = LoadLe<uint64_t>(bytes.data() + kVocabOff);
  const uint64_t max_vocab = width == 2 ? uint64_t{1} << 16 : uint64_t{1} << 32;
  if (vocab < 1 || vocab > max_vocab) {
    return DataLossError(where + ": corrupted header: vocabulary size " + std::to_string(vocab) + " outside [1, " +
                         std::to_string(max_vocab) + "] for " + std::to_string(width) + "-byte tokens");
  }
  h.vocab_size = static_cast<int64_t>(vocab);
  for (size_t i = kReservedOff; i < kHeaderCrcOff; ++i) {
    if (bytes[i] != std::byte{0}) return DataLossError(where + ": corrupted header: reserved bytes not 0");
  }
  h.payload_crc = LoadLe<uint32_t>(bytes.data() + kPayloadCrcOff);
  return h;
}

Status WriteTokenFile(const std::string& path, std::span<const uint32_t> tokens, TokenWidth width, int64_t vocab_size) {
  if (vocab_size < 0) {
    return InvalidArgumentError("WriteTokenFile '" + path + "': vocab_size must be >= 0, got " +
                                std::to_string(vocab_size));
  }
  std::vector<std::byte> payload;
  MF_RETURN_IF_ERROR(EncodeTokens("WriteTokenFile '" + path + "'", tokens, width, vocab_size, &payload));
  TokenFileHeader h{.width = width, .num_tokens = static_cast<int64_t>(tokens.size()), .vocab_size = vocab_size};
  if (h.vocab_size == 0) {
    h.vocab_size = tokens.empty() ? 1 : static_cast<int64_t>(*std::max_element(tokens.begin(), tokens.end())) + 1;
  }
  h.payload_crc = Crc32c(payload);
  const std::vector<std::byte> header = EncodeTokenFileHeader(h);
  const std::span<const std::byte> parts[] = {header, payload};
  return WriteFileParts(path, parts);
}

Status WriteRawTokenFile(const std::string& path, std::span<const uint32_t> tokens, TokenWidth width) {
  std::vector<std::byte> payload;
  MF_RETURN_IF_ERROR(EncodeTokens("WriteRawTokenFile '" + path + "'", tokens, width, 0, &payload));
  const std::span<const std::byte> parts[] = {payload};
  return WriteFileParts(path, parts);
}

StatusOr<TokenFileHeader> ConvertRawTokenFile(const std::string& in, const std::string& out, TokenWidth width,
                                              int64_t vocab_size) {
  const std::string what = "convert '" + in + "'";
  if (width != TokenWidth::kU16 && width != TokenWidth::kU32) {
    return InvalidArgumentError(what + ": token width must be 2 (uint16) or 4 (uint32) bytes");
  }
  if (vocab_size < 0) return InvalidArgumentError(what + ": vocab_size must be >= 0, got " + std::to_string(vocab_size));
  MF_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> f, RandomAccessFile::Open(in));
  const uint64_t w = static_cast<uint64_t>(width);
  if (f->size() >= 8) {
    std::byte magic[8];
    MF_RETURN_IF_ERROR(f->ReadAt(0, magic));
    if (std::memcmp(magic, kTokenFileMagic, 8) == 0) {
      return InvalidArgumentError(what + ": it is already a .mftok file (it starts with \"MFTOKENS\")");
    }
  }
  if (f->size() % w != 0) {
    return DataLossError(what + ": " + std::to_string(f->size()) + " bytes is not a multiple of the " +
                         std::to_string(w) + "-byte token width");
  }
  TokenFileHeader h{.width = width, .num_tokens = static_cast<int64_t>(f->size() / w)};
  // One pass: CRC, maximum and vocabulary check; the payload is copied as is.
  const std::string tmp = out + ".tmp";
  std::FILE* o = std::fopen(tmp.c_str(), "wb");
  if (o == nullptr) return UnavailableError("cannot create file '" + tmp + "': " + std::strerror(errno));
  auto fail = [&](Status s) {
    std::fclose(o);
    std::remove(tmp.c_str());
    return s;
  };
  std::vector<std::byte> header(kTokenFileHeaderSize, std::byte{0});
  if (std::fwrite(header.data(), 1, header.size(), o) != header.size()) {
    return fail(UnavailableError("write to '" + tmp + "' failed"));
  }
  std::vector<std::byte> buf(1 << 20);
  uint32_t crc = 0;
  uint64_t max_token = 0;
  for (uint64_t pos = 0; pos < f->size();) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), f->size() - pos));
    if (Status s = f->ReadAt(pos, std::span<std::byte>(buf.data(), n)); !s.ok()) return fail(s);
    for (size_t i = 0; i < n; i += w) {
      uint32_t t = 0;
      std::memcpy(&t, buf.data() + i, w);
      if (vocab_size > 0 && static_cast<int64_t>(t) >= vocab_size) {
        return fail(DataLossError(what + ": token " + std::to_string(t) + " at position " +
                                  std::to_string((pos + i) / w) + " is outside the vocabulary [0, " +
                                  std::to_string(vocab_size) + ")"));
      }
      max_token = std::max<uint64_t>(max_token, t);
    }
    crc = Crc32cExtend(crc, std::span<const std::byte>(buf.data(), n));
    if (std::fwrite(buf.data(), 1, n, o) != n) return fail(UnavailableError("write to '" + tmp + "' failed"));
    pos += n;
  }
  h.vocab_size = vocab_size > 0 ? vocab_size : static_cast<int64_t>(max_token) + 1;
  h.payload_crc = crc;
  header = EncodeTokenFileHeader(h);
  if (std::fseek(o, 0, SEEK_SET) != 0 || std::fwrite(header.data(), 1, header.size(), o) != header.size()) {
    return fail(UnavailableError("write to '" + tmp + "' failed"));
  }
  if (std::fclose(o) != 0) {
    std::remove(tmp.c_str());
    return UnavailableError("closing '" + tmp + "' failed");
  }
  if (std::rename(tmp.c_str(), out.c_str()) != 0) {
    std::remove(tmp.c_str());
    return UnavailableError("renaming '" + tmp + "' to '" + out + "' failed: " + std::strerror(errno));
  }
  return h;
}

StatusOr<std::shared_ptr<TokenFileDataset>> TokenFileDataset::Open(const std::string& path, TokenFileOptions options) {
  if (options.seq_len < 1 || options.seq_len > kTokenFileMaxSeqLen) {
    return InvalidArgumentError("token file '" + path + "': seq_len must be in [1, 2^40], got " +
                                std::to_string(options.seq_len));
  }
  if (options.dtype != DType::kI32 && options.dtype != DType::kI64) {
    return InvalidArgumentError("token file '" + path + "': output dtype must be i32 or i64, got " +
                                std::string(DTypeName(options.dtype)));
  }
  if (options.width && *options.width != TokenWidth::kU16 && *options.width != TokenWidth::kU32) {
    return InvalidArgumentError("token file '" + path + "': token width must be 2 (uint16) or 4 (uint32) bytes");
  }
  MF_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, RandomAccessFile::Open(path));
  auto ds = std::shared_ptr<TokenFileDataset>(new TokenFileDataset());
  bool has_magic = false;
  if (file->size() >= 8) {
    std::byte magic[8];
    MF_RETURN_IF_ERROR(file->ReadAt(0, magic));
    has_magic = std::memcmp(magic, kTokenFileMagic, 8) == 0;
  }
  uint64_t fp = FingerprintCombine(0x6d66746f6b656e73ull, static_cast<uint64_t>(options.seq_len));
  fp = FingerprintCombine(fp, static_cast<uint64_t>(options.dtype));
  if (has_magic) {
    std::vector<std::byte> head(static_cast<size_t>(std::min<uint64_t>(file->size(), kTokenFileHeaderSize)));
    MF_RETURN_IF_ERROR(file->ReadAt(0, head));
    MF_ASSIGN_OR_RETURN(TokenFileHeader h, DecodeTokenFileHeader(head, path));
    if (options.width && *options.width != h.width) {
      return InvalidArgumentError("token file '" + path + "' holds " + std::to_string(static_cast<int>(h.width)) +
                                  "-byte tokens (header) but " + std::to_string(static_cast<int>(*options.width)) +
                                  "-byte tokens were requested");
    }
    const uint64_t expected =
        static_cast<uint64_t>(kTokenFileHeaderSize) + static_cast<uint64_t>(h.num_tokens) * static_cast<uint64_t>(h.width);
    if (file->size() != expected) {
      return DataLossError("token file '" + path + "' has " + std::to_string(file->size()) + " bytes but its header says " +
                           std::to_string(h.num_tokens) + " tokens (" + std::to_string(expected) + " bytes)" +
                           (file->size() < expected ? " (truncated)" : " (trailing bytes)"));
    }
    if (options.verify_checksum) {
      MF_ASSIGN_OR_RETURN(const uint32_t crc, file->Crc32cOf(kTokenFileHeaderSize, expected - kTokenFileHeaderSize));
      if (crc != h.payload_crc) {
        return DataLossError("token file '" + path + "': payload checksum mismatch: CRC-32C is " + Crc32cString(crc) +
                             ", header says " + Crc32cString(h.payload_crc) + " (corrupted data)");
      }
    }
    ds->header_ = h;
    ds->width_ = h.width;
    ds->payload_offset_ = kTokenFileHeaderSize;
    ds->num_tokens_ = h.num_tokens;
    for (uint64_t v : {uint64_t{h.version}, static_cast<uint64_t>(h.width), static_cast<uint64_t>(h.num_tokens),
                       static_cast<uint64_t>(h.vocab_size), uint64_t{h.payload_crc}}) {
      fp = FingerprintCombine(fp, v);
    }
  } else {
    if (!options.width) {
      return InvalidArgumentError("token file '" + path +
                                  "' has no header (a legacy raw token file): give TokenFileOptions::width "
                                  "explicitly, or convert it with convert_tokens / ConvertRawTokenFile");
    }
    const uint64_t w = static_cast<uint64_t>(*options.width);
    if (file->size() % w != 0) {
      return DataLossError("token file '" + path + "' has the wrong size: " + std::to_string(file->size()) +
                           " bytes is not a multiple of the " + std::to_string(w) + "-byte token width");
    }
    ds->width_ = *options.width;
    ds->num_tokens_ = static_cast<int64_t>(file->size() / w);
    // A raw file has no checksum: the fingerprint covers its size and its first and last MiB.
    const uint64_t edge = std::min<uint64_t>(file->size(), uint64_t{1} << 20);
    MF_ASSIGN_OR_RETURN(const uint32_t head_crc, file->Crc32cOf(0, edge));
    MF_ASSIGN_OR_RETURN(const uint32_t tail_crc, file->Crc32cOf(file->size() - edge, edge));
    for (uint64_t v : {w, file->size(), uint64_t{head_crc}, uint64_t{tail_crc}}) fp = FingerprintCombine(fp, v);
  }
  if (ds->num_tokens_ < options.seq_len + 1) {
    return DataLossError("token file '" + path + "' holds " + std::to_string(ds->num_tokens_) +
                         " tokens, fewer than one sample (seq_len + 1 = " + std::to_string(options.seq_len + 1) + ")");
  }
  ds->file_ = std::move(file);
  ds->dtype_ = options.dtype;
  ds->seq_len_ = options.seq_len;
  ds->sample_shape_ = {options.seq_len + 1};
  ds->num_samples_ = (ds->num_tokens_ - 1) / options.seq_len;
  ds->fingerprint_ = fp;
  return ds;
}

namespace {

// Widens n tokens of type Tok (little-endian, unaligned) at src into out, returning the largest.
// Blocks of 64 tokens with a fixed trip count, so that the loops vectorize at -O2 (no epilogue,
// no alias check: the block is copied to a local array first); the tail is scalar.
template <typename Tok, typename Out>
uint32_t WidenInto(const std::byte* src, int64_t n, Out* out) {
  constexpr int64_t kBlock = 64;
  uint32_t mx = 0;
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    Tok t[kBlock];
    std::memcpy(t, src + i * static_cast<int64_t>(sizeof(Tok)), sizeof(t));
    uint32_t m = 0;
    for (int64_t k = 0; k < kBlock; ++k) {
      out[i + k] = static_cast<Out>(t[k]);
      m = std::max(m, static_cast<uint32_t>(t[k]));
    }
    mx = std::max(mx, m);
  }
  for (; i < n; ++i) {
    Tok t;
    std::memcpy(&t, src + i * static_cast<int64_t>(sizeof(Tok)), sizeof(Tok));
    out[i] = static_cast<Out>(t);
    mx = std::max(mx, static_cast<uint32_t>(t));
  }
  return mx;
}

// n tokens of `width` bytes at src into dst as i32 (out_size 4) or i64; returns the largest token.
uint32_t Widen(const std::byte* src, int width, int64_t n, std::byte* dst, size_t out_size) {
  if (width == 2) {
    return out_size == 4 ? WidenInto<uint16_t>(src, n, reinterpret_cast<int32_t*>(dst))
                         : WidenInto<uint16_t>(src, n, reinterpret_cast<int64_t*>(dst));
  }
  return out_size == 4 ? WidenInto<uint32_t>(src, n, reinterpret_cast<int32_t*>(dst))
                       : WidenInto<uint32_t>(src, n, reinterpret_cast<int64_t*>(dst));
}

// The per-thread buffer of raw tokens (the loader's reader threads each have one).
std::vector<std::byte>& RawBuffer(size_t bytes) {
  thread_local std::vector<std::byte> buf;
  if (buf.size() < bytes) buf.resize(bytes);
  return buf;
}

// Raw bytes per read of a run of samples.
constexpr int64_t kRunReadBytes = int64_t{1} << 20;

}  // namespace

Status TokenFileDataset::ReadTokens(int64_t first, std::span<int64_t> out) const {
  const int64_t n = static_cast<int64_t>(out.size());
  if (first < 0 || first > num_tokens_ || n > num_tokens_ - first) {
    return OutOfRangeError(name() + ": tokens [" + std::to_string(first) + ", +" + std::to_string(n) +
                           ") outside [0, " + std::to_string(num_tokens_) + ")");
  }
  const int64_t w = static_cast<int64_t>(width_);
  std::vector<std::byte> raw(static_cast<size_t>(n * w));
  MF_RETURN_IF_ERROR(file_->ReadAt(static_cast<uint64_t>(payload_offset_ + first * w), raw));
  Widen(raw.data(), static_cast<int>(w), n, reinterpret_cast<std::byte*>(out.data()), sizeof(int64_t));
  return Status::Ok();
}

Status TokenFileDataset::ReadUnchecked(int64_t index, std::span<std::byte> dst) const {
  return ReadRunUnchecked(index, 1, dst);
}

Status TokenFileDataset::ReadRunUnchecked(int64_t first, int64_t count, std::span<std::byte> dst) const {
  const int64_t w = static_cast<int64_t>(width_);
  const int64_t n = seq_len_ + 1;  // tokens per sample; sample i is tokens [i L, i L + L + 1)
  const int64_t vocab = header_ ? header_->vocab_size : int64_t{1} << 33;
  const size_t out_size = DTypeSize(dtype_);
  const int64_t sample_bytes = n * static_cast<int64_t>(out_size);
  const int64_t per_read = std::max<int64_t>(1, kRunReadBytes / (seq_len_ * w));
  for (int64_t done = 0; done < count;) {
    const int64_t k = std::min(per_read, count - done);
    const int64_t first_token = (first + done) * seq_len_;
    const int64_t tokens = k * seq_len_ + 1;
    std::vector<std::byte>& raw = RawBuffer(static_cast<size_t>(tokens * w));
    MF_RETURN_IF_ERROR(file_->ReadAt(static_cast<uint64_t>(payload_offset_ + first_token * w),
                                     std::span<std::byte>(raw.data(), static_cast<size_t>(tokens * w))));
    for (int64_t j = 0; j < k; ++j) {
      const std::byte* src = raw.data() + j * seq_len_ * w;
      std::byte* out = dst.data() + (done + j) * sample_bytes;
      const uint32_t max_token = Widen(src, static_cast<int>(w), n, out, out_size);
      const bool bad_i32 = out_size == 4 && max_token > static_cast<uint32_t>(std::numeric_limits<int32_t>::max());
      if (static_cast<int64_t>(max_token) < vocab && !bad_i32) continue;
      const int64_t pos0 = first_token + j * seq_len_;
      for (int64_t i = 0; i < n; ++i) {  // the first bad token, in order
        uint32_t t = 0;
        std::memcpy(&t, src + i * w, static_cast<size_t>(w));  // little-endian: the low bytes
        if (static_cast<int64_t>(t) >= vocab) {
          return DataLossError(name() + ": token " + std::to_string(t) + " at position " + std::to_string(pos0 + i) +
                               " is outside the vocabulary [0, " + std::to_string(vocab) + ") of its header");
        }
        if (out_size == 4 && t > static_cast<uint32_t>(std::numeric_limits<int32_t>::max())) {
          return DataLossError(name() + ": token " + std::to_string(t) + " at position " + std::to_string(pos0 + i) +
                               " does not fit the i32 output dtype (use i64)");
        }
      }
    }
    done += k;
  }
  return Status::Ok();
}

}  // namespace meshflow
