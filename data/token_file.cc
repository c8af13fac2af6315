#include "meshflow/data/token_file.h"

#include <bit>
#include <cstring>
#include <limits>
#include <utility>

namespace meshflow {

static_assert(std::endian::native == std::endian::little, "token files are read as little-endian");

Status WriteTokenFile(const std::string& path, std::span<const uint32_t> tokens, TokenWidth width) {
  const size_t w = static_cast<size_t>(width);
  std::vector<std::byte> bytes(tokens.size() * w);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (width == TokenWidth::kU16) {
      if (tokens[i] > 0xFFFFu) {
        return InvalidArgumentError("WriteTokenFile '" + path + "': token " + std::to_string(tokens[i]) +
                                    " at position " + std::to_string(i) + " does not fit uint16");
      }
      const uint16_t t = static_cast<uint16_t>(tokens[i]);
      std::memcpy(bytes.data() + i * w, &t, w);
    } else {
      std::memcpy(bytes.data() + i * w, &tokens[i], w);
    }
  }
  const std::span<const std::byte> parts[] = {bytes};
  return WriteFileParts(path, parts);
}

StatusOr<std::shared_ptr<TokenFileDataset>> TokenFileDataset::Open(const std::string& path, TokenFileOptions options) {
  if (options.seq_len < 1) {
    return InvalidArgumentError("token file '" + path + "': seq_len must be >= 1, got " + std::to_string(options.seq_len));
  }
  if (options.dtype != DType::kI32 && options.dtype != DType::kI64) {
    return InvalidArgumentError("token file '" + path + "': output dtype must be i32 or i64, got " +
                                std::string(DTypeName(options.dtype)));
  }
  if (options.width != TokenWidth::kU16 && options.width != TokenWidth::kU32) {
    return InvalidArgumentError("token file '" + path + "': token width must be 2 (uint16) or 4 (uint32) bytes");
  }
  MF_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  const size_t w = static_cast<size_t>(options.width);
  if (file->size() % w != 0) {
    return DataLossError("token file '" + path + "' has the wrong size: " + std::to_string(file->size()) +
                         " bytes is not a multiple of the " + std::to_string(w) + "-byte token width");
  }
  const int64_t num_tokens = static_cast<int64_t>(file->size() / w);
  if (num_tokens < options.seq_len + 1) {
    return DataLossError("token file '" + path + "' holds " + std::to_string(num_tokens) + " tokens, fewer than one sample (seq_len + 1 = " +
                         std::to_string(options.seq_len + 1) + ")");
  }
  auto ds = std::shared_ptr<TokenFileDataset>(new TokenFileDataset());
  ds->file_ = std::move(file);
  ds->options_ = options;
  ds->sample_shape_ = {options.seq_len + 1};
  ds->num_tokens_ = num_tokens;
  ds->num_samples_ = (num_tokens - 1) / options.seq_len;
  return ds;
}

namespace {

template <typename In, typename Out>
Status Convert(const std::byte* src, int64_t first_token, int64_t n, Out* dst, const TokenFileDataset& ds) {
  for (int64_t i = 0; i < n; ++i) {
    In t;
    std::memcpy(&t, src + i * static_cast<int64_t>(sizeof(In)), sizeof(In));
    if constexpr (sizeof(In) == 4 && sizeof(Out) == 4) {
      if (t > static_cast<In>(std::numeric_limits<int32_t>::max())) {
        return DataLossError(ds.name() + ": token " + std::to_string(t) + " at position " +
                             std::to_string(first_token + i) + " does not fit the i32 output dtype (use i64)");
      }
    }
    dst[i] = static_cast<Out>(t);
  }
  return Status::Ok();
}

}  // namespace

Status TokenFileDataset::ReadUnchecked(int64_t index, std::span<std::byte> dst) const {
  const int64_t first = index * options_.seq_len;
  const int64_t n = options_.seq_len + 1;
  const int64_t w = static_cast<int64_t>(options_.width);
  const std::byte* src = file_->bytes().data() + first * w;
  if (options_.width == TokenWidth::kU16) {
    if (options_.dtype == DType::kI32) return Convert<uint16_t>(src, first, n, reinterpret_cast<int32_t*>(dst.data()), *this);
    return Convert<uint16_t>(src, first, n, reinterpret_cast<int64_t*>(dst.data()), *this);
  }
  if (options_.dtype == DType::kI32) return Convert<uint32_t>(src, first, n, reinterpret_cast<int32_t*>(dst.data()), *this);
  return Convert<uint32_t>(src, first, n, reinterpret_cast<int64_t*>(dst.data()), *this);
}

}  // namespace meshflow
