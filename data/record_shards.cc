#include "meshflow/data/record_shards.h"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "meshflow/base/byte_io.h"
#include "meshflow/base/checksum.h"
#include "meshflow/base/strings.h"

namespace meshflow {
namespace {

constexpr size_t kMagicOff = 0, kVersionOff = 8, kDTypeOff = 12, kNdimOff = 16, kReservedOff = 20,
                 kRecordSizeOff = 24, kCountOff = 32, kShapeOff = 40, kPayloadCrcOff = 104, kHeaderCrcOff = 124;


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

// Bytes of one record, or -1 when it exceeds kRecordShardMaxRecordBytes (the product of crafted
// shape entries could overflow int64). A zero dim makes the record empty, but the other dims
// still count for the bound (as for Layout: the product of the non-zero sizes), so that no
// caller multiplying the whole shape can overflow either.
int64_t RecordBytes(DType dtype, const std::vector<int64_t>& shape) {
  int64_t n = DTypeSize(dtype);
  bool empty = false;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d == 0) {
      empty = true;
      continue;
    }
    if (__builtin_mul_overflow(n, d, &n) || n > kRecordShardMaxRecordBytes) return -1;
  }
  return empty ? 0 : n;
}

}  // namespace

using Manifest = RecordShardManifest;
using ManifestShard = RecordShardManifest::Shard;

namespace {

constexpr std::string_view kManifestFirstLine = "meshflow.data.RecordShardManifest v1";

std::vector<std::string_view> SplitOn(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i <= s.size()) {
    const size_t j = s.find(sep, i);
    const size_t e = j == std::string_view::npos ? s.size() : j;
    if (e > i) out.push_back(s.substr(i, e - i));
    if (j == std::string_view::npos) break;
    i = j + 1;
  }
  return out;
}

bool ParseI64(std::string_view s, int64_t* out) {
  if (s.empty() || s[0] < '0' || s[0] > '9') return false;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

bool ParseCrc32cString(std::string_view s, uint32_t* out) {
  if (s.size() != 10 || s[0] != '0' || s[1] != 'x') return false;
  for (char c : s.substr(2)) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  const auto [p, ec] = std::from_chars(s.data() + 2, s.data() + s.size(), *out, 16);
  return ec == std::errc() && p == s.data() + s.size();
}

// "key=value" pairs of one line, each key at most once and all of `keys` present.
StatusOr<std::vector<std::string_view>> Fields(std::string_view line, std::initializer_list<std::string_view> keys,
                                               const std::string& where) {
  std::vector<std::string_view> values(keys.size());
  std::vector<bool> seen(keys.size(), false);
  for (std::string_view tok : SplitOn(line, ' ')) {
    const size_t eq = tok.find('=');
    const std::string_view key = tok.substr(0, eq == std::string_view::npos ? 0 : eq);
    size_t k = 0;
    for (std::string_view want : keys) {
      if (want == key) break;
      ++k;
    }
    if (eq == std::string_view::npos || k == keys.size()) {
      return DataLossError(where + ": unexpected '" + std::string(tok.substr(0, 64)) + "'");
    }
    if (seen[k]) return DataLossError(where + ": repeated field '" + std::string(key) + "'");
    seen[k] = true;
    values[k] = tok.substr(eq + 1);
  }
  size_t k = 0;
  for (std::string_view want : keys) {
    if (!seen[k++]) return DataLossError(where + ": missing field '" + std::string(want) + "'");
  }
  return values;
}

}  // namespace

std::string EncodeRecordShardManifest(const Manifest& m) {
  std::string out = std::string(kManifestFirstLine) + "\n";
  int64_t total = 0;
  for (const ManifestShard& e : m.shards) total += e.records;
  out += "dtype=" + std::string(DTypeName(m.dtype)) + " shape=" + ListString(m.sample_shape) +
         " record_size=" + std::to_string(m.record_size) + " num_shards=" + std::to_string(m.shards.size()) +
         " num_records=" + std::to_string(total) + "\n";
  for (const ManifestShard& e : m.shards) {
    out += "shard name=" + e.name + " records=" + std::to_string(e.records) + " bytes=" + std::to_string(e.bytes) +
           " crc32c=" + Crc32cString(e.crc) + "\n";
  }
  out += "manifest_crc32c=" + Crc32cString(Crc32c(std::as_bytes(std::span<const char>(out.data(), out.size())))) + "\n";
  return out;
}

StatusOr<Manifest> ParseRecordShardManifest(std::string_view text, const std::string& path) {
  const std::string bad = "record shard manifest '" + path + "'";
  std::vector<std::string_view> lines = SplitOn(text, '\n');
  if (lines.size() < 3 || lines[0] != kManifestFirstLine) {
    return DataLossError(bad + " is damaged: expected a first line \"" + std::string(kManifestFirstLine) +
                         "\", a header line, shard lines and a manifest_crc32c line");
  }
  // The checksum line covers every byte before it.
  const std::string_view last = lines.back();
  const size_t last_pos = static_cast<size_t>(last.data() - text.data());
  uint32_t stored = 0;
  if (!last.starts_with("manifest_crc32c=") || !ParseCrc32cString(last.substr(16), &stored)) {
    return DataLossError(bad + " is damaged: the last line is not manifest_crc32c=0x........ (truncated?)");
  }
  const uint32_t crc = Crc32c(std::as_bytes(std::span<const char>(text.data(), last_pos)));
  if (crc != stored) {
    return DataLossError(bad + " is damaged: CRC-32C of its contents is " + Crc32cString(crc) + ", its last line says " +
                         Crc32cString(stored));
  }
  Manifest m;
  MF_ASSIGN_OR_RETURN(std::vector<std::string_view> head,
                      Fields(lines[1], {"dtype", "shape", "record_size", "num_shards", "num_records"}, bad + " line 2"));
  static constexpr std::array<DType, 5> kAll = {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64};
  bool dtype_ok = false;
  for (DType t : kAll) {
    if (DTypeName(t) == head[0]) {
      m.dtype = t;
      dtype_ok = true;
    }
  }
  if (!dtype_ok) return DataLossError(bad + " line 2: bad dtype '" + std::string(head[0].substr(0, 16)) + "'");
  const std::string_view shape = head[1];
  if (shape.size() < 2 || shape.front() != '[' || shape.back() != ']') {
    return DataLossError(bad + " line 2: bad shape '" + std::string(shape.substr(0, 64)) + "'");
  }
  for (std::string_view d : SplitOn(shape.substr(1, shape.size() - 2), ',')) {
    int64_t v = 0;
    if (!ParseI64(d, &v) || m.sample_shape.size() >= static_cast<size_t>(kRecordShardMaxNdim)) {
      return DataLossError(bad + " line 2: bad shape '" + std::string(shape.substr(0, 64)) + "'");
    }
    m.sample_shape.push_back(v);
  }
  int64_t num_shards = 0, num_records = 0;
  if (!ParseI64(head[2], &m.record_size) || m.record_size != RecordBytes(m.dtype, m.sample_shape) ||
      !ParseI64(head[3], &num_shards) || !ParseI64(head[4], &num_records)) {
    return DataLossError(bad + " line 2: bad record_size, num_shards or num_records");
  }
  if (num_shards != static_cast<int64_t>(lines.size()) - 3) {
    return DataLossError(bad + ": num_shards=" + std::to_string(num_shards) + " but it has " +
                         std::to_string(lines.size() - 3) + " shard lines");
  }
  int64_t total = 0;
  std::vector<std::string_view> names;
  for (size_t i = 2; i + 1 < lines.size(); ++i) {
    const std::string where = bad + " line " + std::to_string(i + 1);
    if (!lines[i].starts_with("shard ")) return DataLossError(where + ": expected 'shard name=... records=...'");
    MF_ASSIGN_OR_RETURN(std::vector<std::string_view> f,
                        Fields(lines[i].substr(6), {"name", "records", "bytes", "crc32c"}, where));
    ManifestShard e;
    e.name = std::string(f[0]);
    if (e.name.find('/') != std::string::npos || e.name.size() <= sizeof(kRecordShardExtension) - 1 ||
        !e.name.ends_with(kRecordShardExtension) || e.name.starts_with(".")) {
      return DataLossError(where + ": bad shard name '" + e.name.substr(0, 64) + "'");
    }
    if (!ParseI64(f[1], &e.records) || e.records > kRecordShardMaxRecords || !ParseI64(f[2], &e.bytes) ||
        !ParseCrc32cString(f[3], &e.crc)) {
      return DataLossError(where + ": bad records, bytes or crc32c");
    }
    total += e.records;  // <= 2^48 each, fewer than 2^15 lines... bounded by the file size check below
    if (total > kRecordShardMaxRecords * 16) return DataLossError(where + ": too many records");
    names.push_back(f[0]);
    m.shards.push_back(std::move(e));
  }
  std::sort(names.begin(), names.end());
  if (std::adjacent_find(names.begin(), names.end()) != names.end()) {
    return DataLossError(bad + ": shard '" + std::string(*std::adjacent_find(names.begin(), names.end())) +
                         "' is listed twice");
  }
  if (total != num_records) {
    return DataLossError(bad + ": num_records=" + std::to_string(num_records) + " but the shard lines add up to " +
                         std::to_string(total));
  }
  return m;
}

namespace {

Status WriteManifest(const std::string& dir, const Manifest& m) {
  const std::string text = EncodeRecordShardManifest(m);
  const std::span<const std::byte> parts[] = {std::as_bytes(std::span<const char>(text.data(), text.size()))};
  return WriteFileParts((std::filesystem::path(dir) / kRecordShardManifestName).string(), parts);
}

}  // namespace

std::vector<std::byte> EncodeRecordShardHeader(const RecordShardHeader& h) {
  std::vector<std::byte> out(kRecordShardHeaderSize, std::byte{0});
  std::memcpy(out.data() + kMagicOff, kRecordShardMagic, 8);
  StoreLe<uint32_t>(out.data() + kVersionOff, h.version);
  StoreLe<uint32_t>(out.data() + kDTypeOff, DTypeFileCode(h.dtype));
  StoreLe<uint32_t>(out.data() + kNdimOff, static_cast<uint32_t>(h.sample_shape.size()));
  StoreLe<uint64_t>(out.data() + kRecordSizeOff, static_cast<uint64_t>(h.record_size));
  StoreLe<uint64_t>(out.data() + kCountOff, static_cast<uint64_t>(h.record_count));
  for (size_t d = 0; d < h.sample_shape.size() && d < static_cast<size_t>(kRecordShardMaxNdim); ++d) {
    StoreLe<uint64_t>(out.data() + kShapeOff + 8 * d, static_cast<uint64_t>(h.sample_shape[d]));
  }
  StoreLe<uint32_t>(out.data() + kPayloadCrcOff, h.payload_crc);
  StoreLe<uint32_t>(out.data() + kHeaderCrcOff, Crc32c(std::span<const std::byte>(out.data(), kHeaderCrcOff)));
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
  h.version = LoadLe<uint32_t>(file.data() + kVersionOff);
  if (h.version != kRecordShardVersion) {
    return UnimplementedError(where + ": unsupported format version " + std::to_string(h.version) + " (this reader reads " +
                              std::to_string(kRecordShardVersion) + ")");
  }
  const uint32_t stored_crc = LoadLe<uint32_t>(file.data() + kHeaderCrcOff);
  const uint32_t crc = Crc32c(file.subspan(0, kHeaderCrcOff));
  if (stored_crc != crc) {
    return DataLossError(where + ": corrupted header: header CRC-32C is " + Crc32cString(crc) + ", stored " + Crc32cString(stored_crc));
  }
  const uint32_t code = LoadLe<uint32_t>(file.data() + kDTypeOff);
  const std::optional<DType> dtype = DTypeFromFileCode(code);
  if (!dtype) return DataLossError(where + ": corrupted header: bad dtype code " + std::to_string(code));
  h.dtype = *dtype;
  const uint32_t ndim = LoadLe<uint32_t>(file.data() + kNdimOff);
  if (ndim > static_cast<uint32_t>(kRecordShardMaxNdim)) {
    return DataLossError(where + ": corrupted header: ndim " + std::to_string(ndim) + " > " +
                         std::to_string(kRecordShardMaxNdim));
  }
  if (LoadLe<uint32_t>(file.data() + kReservedOff) != 0) return DataLossError(where + ": corrupted header: reserved field not 0");
  for (uint32_t d = 0; d < ndim; ++d) {
    const int64_t size = static_cast<int64_t>(LoadLe<uint64_t>(file.data() + kShapeOff + 8 * d));
    if (size < 0 || size > (int64_t{1} << 40)) {
      return DataLossError(where + ": corrupted header: sample shape dim " + std::to_string(d) + " has size " +
                           std::to_string(size));
    }
    h.sample_shape.push_back(size);
  }
  const uint64_t record_size = LoadLe<uint64_t>(file.data() + kRecordSizeOff);
  const uint64_t count = LoadLe<uint64_t>(file.data() + kCountOff);
  const int64_t expected_size = RecordBytes(h.dtype, h.sample_shape);
  if (expected_size < 0) {
    return DataLossError(where + ": corrupted header: a record of " + std::string(DTypeName(h.dtype)) +
                         ListString(h.sample_shape) + " would exceed " + std::to_string(kRecordShardMaxRecordBytes) +
                         " bytes");
  }
  if (record_size != static_cast<uint64_t>(expected_size)) {
    return DataLossError(where + ": corrupted header: record size " + std::to_string(record_size) + " != " +
                         std::to_string(expected_size) + " bytes for " + std::string(DTypeName(h.dtype)) +
                         ListString(h.sample_shape));
  }
  if (count > static_cast<uint64_t>(kRecordShardMaxRecords)) return DataLossError(where + ": corrupted header: record count " + std::to_string(count));
  h.record_size = expected_size;
  h.record_count = static_cast<int64_t>(count);
  h.payload_crc = LoadLe<uint32_t>(file.data() + kPayloadCrcOff);
  return h;
}

Status WriteRecordShard(const std::string& path, DType dtype, const std::vector<int64_t>& sample_shape,
                        std::span<const std::byte> payload) {
  MF_RETURN_IF_ERROR(CheckShape(sample_shape, "WriteRecordShard '" + path + "'"));
  RecordShardHeader h;
  h.dtype = dtype;
  h.sample_shape = sample_shape;
  h.record_size = RecordBytes(dtype, sample_shape);
  if (h.record_size < 0) {
    return InvalidArgumentError("WriteRecordShard '" + path + "': a record of " + std::string(DTypeName(dtype)) +
                                ListString(sample_shape) + " would exceed " +
                                std::to_string(kRecordShardMaxRecordBytes) + " bytes");
  }
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
  Manifest manifest{.dtype = dataset.dtype(), .sample_shape = dataset.sample_shape(), .record_size = sample_bytes, .shards = {}};
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
    manifest.shards.push_back({.name = prefix + name + kRecordShardExtension,
                               .records = end - begin,
                               .bytes = kRecordShardHeaderSize + static_cast<int64_t>(payload.size()),
                               .crc = Crc32c(payload)});
  }
  return WriteManifest(dir, manifest);
}

namespace {

enum class PathKind { kMissing, kDirectory, kOther };

// What `path` is, by stat(2). Only ENOENT and ENOTDIR (a component is a file) mean "not there";
// any other failure (EIO, EACCES, ELOOP, ...) is UNAVAILABLE naming the path and the errno text,
// never a false "does not exist" (std::filesystem's is_directory/exists with an error_code
// answered false for those, and the error was dropped).
StatusOr<PathKind> StatPath(const std::string& path, std::string_view what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return S_ISDIR(st.st_mode) ? PathKind::kDirectory : PathKind::kOther;
  const int err = errno;
  if (err == ENOENT || err == ENOTDIR) return PathKind::kMissing;
  return UnavailableError("cannot stat " + std::string(what) + " '" + path + "': " + std::strerror(err));
}

// Lists the ".mfrec" files of `dir` (file names only, sorted).
StatusOr<std::vector<std::string>> ListShards(const std::string& dir) {
  MF_ASSIGN_OR_RETURN(const PathKind kind, StatPath(dir, "record shard directory"));
  if (kind != PathKind::kDirectory) {
    return NotFoundError("record shard directory '" + dir + "' does not exist or is not a directory");
  }
  std::error_code ec;
  std::vector<std::string> names;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == kRecordShardExtension) names.push_back(it->path().filename().string());
  }
  if (ec) return UnavailableError("cannot list directory '" + dir + "': " + ec.message());
  if (names.empty()) {
    return NotFoundError("record shard directory '" + dir + "' holds no " + kRecordShardExtension + " files");
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir) / name).string();
}

}  // namespace

Status WriteRecordShardManifest(const std::string& dir) {
  MF_ASSIGN_OR_RETURN(std::vector<std::string> names, ListShards(dir));
  std::vector<std::string> paths;
  for (const std::string& n : names) paths.push_back(JoinPath(dir, n));
  MF_ASSIGN_OR_RETURN(std::shared_ptr<RecordShardDataset> ds, RecordShardDataset::OpenFiles(paths));
  Manifest m{.dtype = ds->dtype(), .sample_shape = ds->sample_shape(), .record_size = ds->sample_bytes(), .shards = {}};
  for (size_t i = 0; i < names.size(); ++i) {
    MF_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> f, RandomAccessFile::Open(paths[i]));
    std::vector<std::byte> head(kRecordShardHeaderSize);
    MF_RETURN_IF_ERROR(f->ReadAt(0, head));
    MF_ASSIGN_OR_RETURN(RecordShardHeader h, DecodeRecordShardHeader(head, paths[i]));
    m.shards.push_back({.name = names[i],
                        .records = h.record_count,
                        .bytes = static_cast<int64_t>(f->size()),
                        .crc = h.payload_crc});
  }
  return WriteManifest(dir, m);
}

StatusOr<std::shared_ptr<RecordShardDataset>> RecordShardDataset::Open(const std::string& dir,
                                                                       RecordShardOptions options) {
  MF_ASSIGN_OR_RETURN(std::vector<std::string> names, ListShards(dir));
  const std::string manifest_path = JoinPath(dir, kRecordShardManifestName);
  MF_ASSIGN_OR_RETURN(const PathKind manifest_kind, StatPath(manifest_path, "record shard manifest"));
  const bool has_manifest = manifest_kind != PathKind::kMissing;
  std::vector<std::string> paths;
  if (!has_manifest) {
    if (options.require_manifest) {
      return FailedPreconditionError("record shard directory '" + dir + "' has no " + kRecordShardManifestName +
                                     ": without it a deleted, extra or renamed shard cannot be detected; write one "
                                     "with WriteRecordShardManifest (or open with require_manifest = false)");
    }
    for (const std::string& n : names) paths.push_back(JoinPath(dir, n));
    MF_ASSIGN_OR_RETURN(std::shared_ptr<RecordShardDataset> ds, OpenFiles(paths, options));
    ds->source_ = dir;
    return ds;
  }
  MF_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> mf, RandomAccessFile::Open(manifest_path));
  if (mf->size() > (uint64_t{64} << 20)) {
    return DataLossError("record shard manifest '" + manifest_path + "' has " + std::to_string(mf->size()) +
                         " bytes (more than 64 MiB): not a manifest");
  }
  std::string text(static_cast<size_t>(mf->size()), '\0');
  MF_RETURN_IF_ERROR(mf->ReadAt(0, std::as_writable_bytes(std::span<char>(text))));
  MF_ASSIGN_OR_RETURN(Manifest m, ParseRecordShardManifest(text, manifest_path));
  // The directory must hold exactly the listed shards.
  std::vector<std::string> listed;
  for (const ManifestShard& e : m.shards) listed.push_back(e.name);
  std::sort(listed.begin(), listed.end());
  for (const std::string& n : listed) {
    if (!std::binary_search(names.begin(), names.end(), n)) {
      return DataLossError("record shards '" + dir + "': shard '" + n + "' listed in " + kRecordShardManifestName +
                           " is missing");
    }
  }
  for (const std::string& n : names) {
    if (!std::binary_search(listed.begin(), listed.end(), n)) {
      return DataLossError("record shards '" + dir + "': '" + n + "' is not listed in " + kRecordShardManifestName +
                           " (a shard of another dataset, or left over?)");
    }
  }
  for (const ManifestShard& e : m.shards) paths.push_back(JoinPath(dir, e.name));
  MF_ASSIGN_OR_RETURN(std::shared_ptr<RecordShardDataset> ds, OpenFiles(paths, options));
  ds->source_ = dir;
  for (size_t i = 0; i < m.shards.size(); ++i) {
    const ManifestShard& e = m.shards[i];
    const int64_t records = ds->starts_[i + 1] - ds->starts_[i];
    const RecordShardDataset& d = *ds;
    if (records != e.records || static_cast<int64_t>(d.files_[i]->size()) != e.bytes || d.crcs_[i] != e.crc) {
      return DataLossError("record shard '" + paths[i] + "' does not match its manifest entry: it has " +
                           std::to_string(records) + " records, " + std::to_string(d.files_[i]->size()) +
                           " bytes, payload CRC-32C " + Crc32cString(d.crcs_[i]) + "; the manifest lists " +
                           std::to_string(e.records) + " records, " + std::to_string(e.bytes) + " bytes, " +
                           Crc32cString(e.crc) + " (renamed, swapped or replaced?)");
    }
  }
  if (m.dtype != ds->dtype_ || m.sample_shape != ds->sample_shape_) {
    return DataLossError("record shards '" + dir + "' hold " + std::string(DTypeName(ds->dtype_)) +
                         ListString(ds->sample_shape_) + " samples but the manifest says " +
                         std::string(DTypeName(m.dtype)) + ListString(m.sample_shape));
  }
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
    MF_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, RandomAccessFile::Open(path));
    std::vector<std::byte> head(static_cast<size_t>(std::min<uint64_t>(file->size(), kRecordShardHeaderSize)));
    MF_RETURN_IF_ERROR(file->ReadAt(0, head));
    MF_ASSIGN_OR_RETURN(RecordShardHeader h, DecodeRecordShardHeader(head, path));
    // record_count <= 2^48 and record_size <= 2^40: the product needs a check.
    uint64_t payload = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(h.record_count), static_cast<uint64_t>(h.record_size), &payload) ||
        payload > (uint64_t{1} << 62)) {
      return DataLossError("record shard '" + path + "': corrupted header: " + std::to_string(h.record_count) +
                           " records of " + std::to_string(h.record_size) + " bytes exceed 2^62 bytes");
    }
    const uint64_t expected = static_cast<uint64_t>(kRecordShardHeaderSize) + payload;
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
      MF_ASSIGN_OR_RETURN(const uint32_t crc, file->Crc32cOf(kRecordShardHeaderSize, payload));
      if (crc != h.payload_crc) {
        return DataLossError("record shard '" + path + "': payload checksum mismatch: CRC-32C is " + Crc32cString(crc) +
                             ", header says " + Crc32cString(h.payload_crc) + " (corrupted data)");
      }
    }
    if (i == 0) {
      ds->dtype_ = h.dtype;
      ds->sample_shape_ = h.sample_shape;
      ds->record_size_ = h.record_size;
    } else if (h.dtype != ds->dtype_ || h.sample_shape != ds->sample_shape_) {
      return InvalidArgumentError("record shard '" + path + "' holds " + std::string(DTypeName(h.dtype)) +
                                  ListString(h.sample_shape) + " samples but '" + paths[0] + "' holds " +
                                  std::string(DTypeName(ds->dtype_)) + ListString(ds->sample_shape_));
    }
    ds->starts_.push_back(ds->starts_.back() + h.record_count);
    ds->files_.push_back(std::move(file));
    ds->crcs_.push_back(h.payload_crc);
  }
  ds->total_ = ds->starts_.back();
  // The fingerprint: the index, independent of the directory's path.
  uint64_t fp = FingerprintCombine(0x6d667265632d6473ull, DTypeFileCode(ds->dtype_));
  for (int64_t d : ds->sample_shape_) fp = FingerprintCombine(fp, static_cast<uint64_t>(d));
  for (size_t i = 0; i < paths.size(); ++i) {
    const std::string name = std::filesystem::path(paths[i]).filename().string();
    fp = FingerprintCombine(fp, Crc32c(std::as_bytes(std::span<const char>(name.data(), name.size()))));
    fp = FingerprintCombine(fp, static_cast<uint64_t>(ds->starts_[i + 1] - ds->starts_[i]));
    fp = FingerprintCombine(fp, ds->crcs_[i]);
  }
  ds->fingerprint_ = fp;
  return ds;
}

std::string RecordShardDataset::name() const { return "record shards '" + source_ + "'"; }

Status RecordShardDataset::ReadUnchecked(int64_t index, std::span<std::byte> dst) const {
  // starts_ is ascending; the shard is the last one starting at or before index.
  const auto it = std::upper_bound(starts_.begin(), starts_.end(), index);
  const size_t shard = static_cast<size_t>(it - starts_.begin()) - 1;
  const int64_t local = index - starts_[shard];
  if (dst.empty()) return Status::Ok();
  return files_[shard]->ReadAt(static_cast<uint64_t>(kRecordShardHeaderSize + local * record_size_), dst);
}

}  // namespace meshflow
