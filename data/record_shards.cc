#include "meshflow/data/record_shards.h"

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "meshflow/base/checksum.h"

namespace meshflow {
namespace {

constexpr size_t kMagicOff = 0, kVersionOff = 8, kDTypeOff = 12, kNdimOff = 16, kReservedOff = 20,
                 kRecordSizeOff = 24, kCountOff = 32, kShapeOff = 40, kPayloadCrcOff = 104, kHeaderCrcOff = 124;

void PutU32(std::byte* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xFFu);
}
void PutU64(std::byte* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xFFu);
}
uint32_t GetU32(const std::byte* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t GetU64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

uint32_t DTypeCode(DType t) {
  switch (t) {
    case DType::kF32: return 0;
    case DType::kF64: return 1;
    case DType::kBF16: return 2;
    case DType::kI32: return 3;
    case DType::kI64: return 4;
  }
  return 0;
}

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08" PRIx32, v);
  return buf;
}

Status CheckShape(const std::vector<int64_t>& shape, std::string_view what) {
  if (shape.size() > static_cast<size_t>(kRecordShardMaxNdim)) {
    return InvalidArgumentError(std::string(what) + ": sample shape has " + std::to_string(shape.size()) +
                                " dims, the shard format allows at most " + std::to_string(kRecordShardMaxNdim));
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      return InvalidArgumentError(std::string(what) + ": sample shape has negative size " +
                                  std::to_string(shape[d]) + " at dim " + std::to_string(d));
    }
  }
  return Status::Ok();
}

int64_t RecordBytes(DType dtype, const std::vector<int64_t>& shape) {
  int64_t n = DTypeSize(dtype);
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

std::vector<std::byte> EncodeRecordShardHeader(const RecordShardHeader& h) {
  std::vector<std::byte> out(kRecordShardHeaderSize, std::byte{0});
  std::memcpy(out.data() + kMagicOff, kRecordShardMagic, 8);
  PutU32(out.data() + kVersionOff, h.version);
  PutU32(out.data() + kDTypeOff, DTypeCode(h.dtype));
  PutU32(out.data() + kNdimOff, static_cast<uint32_t>(h.sample_shape.size()));
  PutU64(out.data() + kRecordSizeOff, static_cast<uint64_t>(h.record_size));
  PutU64(out.data() + kCountOff, static_cast<uint64_t>(h.record_count));
  for (size_t d = 0; d < h.sample_shape.size() && d < static_cast<size_t>(kRecordShardMaxNdim); ++d) {
    PutU64(out.data() + kShapeOff + 8 * d, static_cast<uint64_t>(h.sample_shape[d]));
  }
  PutU32(out.data() + kPayloadCrcOff, h.payload_crc);
  PutU32(out.data() + kHeaderCrcOff, Crc32c(std::span<const std::byte>(out.data(), kHeaderCrcOff)));
  return out;
}

StatusOr<RecordShardHeader> DecodeRecordShardHeader(std::span<const std::byte> file, const std::string& path) {
  const std::string where = "record shard '" + path + "'";
  if (static_cast<int64_t>(file.size()) < kRecordShardHeaderSize) {
    return DataLossError(where + ": truncated header: file has " + std::to_string(file.size()) + " bytes, the header needs " +
                         std::to_string(kRecordShardHeaderSize));
  }
  if (std::memcmp(file.data() + kMagicOff, kRecordShardMagic, 8) != 0) {
    return DataLossError(where + ": corrupted header: bad magic (not a meshflow record shard; expected \"MFRECSHD\")");
  }
  // The version before the header checksum: other versions checksum differently (version 1 used
  // CRC-32) and may lay the header out differently.
  RecordShardHeader h;
  h.version = GetU32(file.data() + kVersionOff);
  if (h.version != kRecordShardVersion) {
    return UnimplementedError(where + ": unsupported format version " + std::to_string(h.version) + " (this reader reads " +
                              std::to_string(kRecordShardVersion) + ")");
  }
  const uint32_t stored_crc = GetU32(file.data() + kHeaderCrcOff);
  const uint32_t crc = Crc32c(file.subspan(0, kHeaderCrcOff));
  if (stored_crc != crc) {
    return DataLossError(where + ": corrupted header: header CRC-32C is " + Hex32(crc) + ", stored " + Hex32(stored_crc));
  }
  const uint32_t code = GetU32(file.data() + kDTypeOff);
  static constexpr std::array<DType, 5> kCodes = {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64};
  if (code >= kCodes.size()) return DataLossError(where + ": corrupted header: bad dtype code " + std::to_string(code));
  h.dtype = kCodes[code];
  const uint32_t ndim = GetU32(file.data() + kNdimOff);
  if (ndim > static_cast<uint32_t>(kRecordShardMaxNdim)) {
    return DataLossError(where + ": corrupted header: ndim " + std::to_string(ndim) + " > " +
                         std::to_string(kRecordShardMaxNdim));
  }
  if (GetU32(file.data() + kReservedOff) != 0) return DataLossError(where + ": corrupted header: reserved field not 0");
  for (uint32_t d = 0; d < ndim; ++d) {
    const int64_t size = static_cast<int64_t>(GetU64(file.data() + kShapeOff + 8 * d));
    if (size < 0 || size > (int64_t{1} << 40)) {
      return DataLossError(where + ": corrupted header: sample shape dim " + std::to_string(d) + " has size " +
                           std::to_string(size));
    }
    h.sample_shape.push_back(size);
  }
  const uint64_t record_size = GetU64(file.data() + kRecordSizeOff);
  const uint64_t count = GetU64(file.data() + kCountOff);
  const int64_t expected_size = RecordBytes(h.dtype, h.sample_shape);
  if (record_size != static_cast<uint64_t>(expected_size)) {
    return DataLossError(where + ": corrupted header: record size " + std::to_string(record_size) + " != " +
                         std::to_string(expected_size) + " bytes for " + std::string(DTypeName(h.dtype)) +
                         ShapeString(h.sample_shape));
  }
  if (count > (uint64_t{1} << 48)) return DataLossError(where + ": corrupted header: record count " + std::to_string(count));
  h.record_size = expected_size;
  h.record_count = static_cast<int64_t>(count);
  h.payload_crc = GetU32(file.data() + kPayloadCrcOff);
  return h;
}

Status WriteRecordShard(const std::string& path, DType dtype, const std::vector<int64_t>& sample_shape,
                        std::span<const std::byte> payload) {
  MF_RETURN_IF_ERROR(CheckShape(sample_shape, "WriteRecordShard '" + path + "'"));
  RecordShardHeader h;
  h.dtype = dtype;
  h.sample_shape = sample_shape;
  h.record_size = RecordBytes(dtype, sample_shape);
  const int64_t n = static_cast<int64_t>(payload.size());
  if (h.record_size == 0 ? n != 0 : n % h.record_size != 0) {
    return InvalidArgumentError("WriteRecordShard '" + path + "': payload of " + std::to_string(n) +
                                " bytes is not a whole number of " + std::to_string(h.record_size) + "-byte records");
  }
  h.record_count = h.record_size == 0 ? 0 : n / h.record_size;
  h.payload_crc = Crc32c(payload);
  const std::vector<std::byte> header = EncodeRecordShardHeader(h);
  const std::span<const std::byte> parts[] = {header, payload};
  return WriteFileParts(path, parts);
}

Status WriteRecordShards(const std::string& dir, const Dataset& dataset, int64_t records_per_shard,
                         const std::string& prefix) {
  if (records_per_shard < 1) {
    return InvalidArgumentError("WriteRecordShards: records_per_shard must be >= 1, got " +
                                std::to_string(records_per_shard));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return UnavailableError("WriteRecordShards: cannot create directory '" + dir + "': " + ec.message());
  const int64_t sample_bytes = dataset.sample_bytes();
  std::vector<std::byte> payload;
  int shard = 0;
  for (int64_t begin = 0; begin < dataset.size(); begin += records_per_shard, ++shard) {
    const int64_t end = std::min(dataset.size(), begin + records_per_shard);
    payload.assign(static_cast<size_t>((end - begin) * sample_bytes), std::byte{0});
    for (int64_t i = begin; i < end; ++i) {
      MF_RETURN_IF_ERROR(dataset.Read(
          i, std::span<std::byte>(payload.data() + (i - begin) * sample_bytes, static_cast<size_t>(sample_bytes))));
    }
    char name[32];
    std::snprintf(name, sizeof(name), "-%05d", shard);
    const std::string path = (std::filesystem::path(dir) / (prefix + name + kRecordShardExtension)).string();
    MF_RETURN_IF_ERROR(WriteRecordShard(path, dataset.dtype(), dataset.sample_shape(), payload));
  }
  return Status::Ok();
}

StatusOr<std::shared_ptr<RecordShardDataset>> RecordShardDataset::Open(const std::string& dir,
                                                                       RecordShardOptions options) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return NotFoundError("record shard directory '" + dir + "' does not exist or is not a directory");
  }
  std::vector<std::string> paths;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == kRecordShardExtension) paths.push_back(it->path().string());
  }
  if (ec) return UnavailableError("cannot list directory '" + dir + "': " + ec.message());
  if (paths.empty()) {
    return NotFoundError("record shard directory '" + dir + "' holds no " + kRecordShardExtension + " files");
  }
  std::sort(paths.begin(), paths.end());
  MF_ASSIGN_OR_RETURN(std::shared_ptr<RecordShardDataset> ds, OpenFiles(paths, options));
  ds->source_ = dir;
  return ds;
}

StatusOr<std::shared_ptr<RecordShardDataset>> RecordShardDataset::OpenFiles(const std::vector<std::string>& paths,
                                                                            RecordShardOptions options) {
  if (paths.empty()) return InvalidArgumentError("RecordShardDataset::OpenFiles: no files given");
  auto ds = std::shared_ptr<RecordShardDataset>(new RecordShardDataset());
  ds->source_ = paths.size() == 1 ? paths[0] : paths[0] + " (+" + std::to_string(paths.size() - 1) + " more)";
  ds->starts_.push_back(0);
  for (size_t i = 0; i < paths.size(); ++i) {
    const std::string& path = paths[i];
    MF_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
    MF_ASSIGN_OR_RETURN(RecordShardHeader h, DecodeRecordShardHeader(file->bytes(), path));
    const uint64_t expected =
        static_cast<uint64_t>(kRecordShardHeaderSize) + static_cast<uint64_t>(h.record_count) * h.record_size;
    if (file->size() < expected) {
      return DataLossError("record shard '" + path + "': truncated: header promises " + std::to_string(h.record_count) +
                           " records of " + std::to_string(h.record_size) + " bytes (" + std::to_string(expected) +
                           " bytes in all) but the file has " + std::to_string(file->size()) + " bytes");
    }
    if (file->size() > expected) {
      return DataLossError("record shard '" + path + "': " + std::to_string(file->size() - expected) +
                           " trailing bytes after " + std::to_string(h.record_count) + " records (file has " +
                           std::to_string(file->size()) + " bytes, expected " + std::to_string(expected) + ")");
    }
    if (options.verify_checksums) {
      const uint32_t crc = Crc32c(file->bytes().subspan(kRecordShardHeaderSize));
      if (crc != h.payload_crc) {
        return DataLossError("record shard '" + path + "': payload checksum mismatch: CRC-32C is " + Hex32(crc) +
                             ", header says " + Hex32(h.payload_crc) + " (corrupted data)");
      }
    }
    if (i == 0) {
      ds->dtype_ = h.dtype;
      ds->sample_shape_ = h.sample_shape;
      ds->record_size_ = h.record_size;
    } else if (h.dtype != ds->dtype_ || h.sample_shape != ds->sample_shape_) {
      return InvalidArgumentError("record shard '" + path + "' holds " + std::string(DTypeName(h.dtype)) +
                                  ShapeString(h.sample_shape) + " samples but '" + paths[0] + "' holds " +
                                  std::string(DTypeName(ds->dtype_)) + ShapeString(ds->sample_shape_));
    }
    ds->starts_.push_back(ds->starts_.back() + h.record_count);
    ds->files_.push_back(std::move(file));
  }
  ds->total_ = ds->starts_.back();
  return ds;
}

std::string RecordShardDataset::name() const { return "record shards '" + source_ + "'"; }

Status RecordShardDataset::ReadUnchecked(int64_t index, std::span<std::byte> dst) const {
  // starts_ is ascending; the shard is the last one starting at or before index.
  const auto it = std::upper_bound(starts_.begin(), starts_.end(), index);
  const size_t shard = static_cast<size_t>(it - starts_.begin()) - 1;
  const int64_t local = index - starts_[shard];
  if (!dst.empty()) {
    std::memcpy(dst.data(), files_[shard]->bytes().data() + kRecordShardHeaderSize + local * record_size_, dst.size());
  }
  return Status::Ok();
}

}  // namespace meshflow
