#include "meshflow/checkpoint/format.h"

#include <bit>
#include <concepts>
#include <optional>
#include <cstdio>
#include <cstring>
#include <set>

#include "meshflow/base/byte_io.h"
#include "meshflow/base/checksum.h"
#include "meshflow/base/strings.h"

namespace meshflow {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the checkpoint format is little-endian; big-endian hosts need byte swaps");

constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8;  // magic, version, reserved, body length
constexpr size_t kTrailerBytes = 4;              // CRC-32C of header + body

class Writer {
 public:
  template <std::integral T>
  void Put(T v) {
    AppendLe<T>(out_, v);
  }
  void PutBytes(std::string_view s) { out_.append(s); }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  Reader(std::string_view bytes, std::string_view path) : bytes_(bytes), path_(path) {}

  template <std::integral T>
  Status Get(T& v, const char* what) {
    if (bytes_.size() - pos_ < sizeof(T)) return Truncated(what);
    v = LoadLe<T>(reinterpret_cast<const std::byte*>(bytes_.data() + pos_));
    pos_ += sizeof(T);
    return Status();
  }
  Status GetBytes(uint64_t n, std::string& s, const char* what) {
    if (bytes_.size() - pos_ < n) return Truncated(what);
    s.assign(bytes_.data() + pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return Status();
  }
  size_t remaining() const { return bytes_.size() - pos_; }
  Status Truncated(const char* what) const {
    return DataLossError("checkpoint metadata " + std::string(path_) + " is corrupted: truncated while reading " +
                         what + " at byte " + std::to_string(pos_));
  }

 private:
  std::string_view bytes_;
  std::string_view path_;
  size_t pos_ = 0;
};

// Every element count / byte length is bounded by this (2^62) so products cannot overflow.
constexpr int64_t kMaxSize = int64_t{1} << 62;

bool MulOverflows(int64_t a, int64_t b) { return a != 0 && b > kMaxSize / a; }

}  // namespace

std::string DataFileName(int file_index) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "data-%05d.bin", file_index);
  return buf;
}

const TensorRecord* CheckpointMetadata::Find(std::string_view name) const {
  for (const TensorRecord& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

int64_t NumChecksumBlocks(int64_t byte_length, int64_t block_bytes) {
  if (byte_length <= 0 || block_bytes <= 0) return 0;
  return (byte_length + block_bytes - 1) / block_bytes;
}

int64_t ChunkBlockBytes(int64_t byte_length, int64_t max_block_bytes) {
  const int64_t want = (byte_length + kMaxChecksumBlocksPerChunk - 1) / kMaxChecksumBlocksPerChunk;
  int64_t b = kMinChecksumBlockBytes;
  while (b < want && b < max_block_bytes) b *= 2;
  return std::min(b, max_block_bytes);
}

std::string EncodeMetadata(const CheckpointMetadata& md) {
  return std::move(EncodeMetadataVersion(md, kCheckpointFormatVersion).value());
}

StatusOr<std::string> EncodeMetadataVersion(const CheckpointMetadata& md, uint32_t version) {
  if (version < kOldestReadableCheckpointFormatVersion || version > kCheckpointFormatVersion) {
    return InvalidArgumentError("EncodeMetadataVersion: version " + std::to_string(version) + " is not in [" +
                                std::to_string(kOldestReadableCheckpointFormatVersion) + ", " +
                                std::to_string(kCheckpointFormatVersion) + "]");
  }
  Writer body;
  body.Put<uint64_t>(static_cast<uint64_t>(md.checksum_block_bytes));
  body.Put<uint32_t>(static_cast<uint32_t>(md.file_sizes.size()));
  for (int64_t s : md.file_sizes) body.Put<uint64_t>(static_cast<uint64_t>(s));
  body.Put<uint64_t>(md.extra_state.size());
  body.PutBytes(md.extra_state);
  body.Put<uint32_t>(static_cast<uint32_t>(md.tensors.size()));
  for (const TensorRecord& t : md.tensors) {
    body.Put<uint32_t>(static_cast<uint32_t>(t.name.size()));
    body.PutBytes(t.name);
    body.Put<uint8_t>(DTypeFileCode(t.dtype));
    body.Put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) body.Put<int64_t>(d);
    body.Put<uint32_t>(static_cast<uint32_t>(t.saved_layout.size()));
    body.PutBytes(t.saved_layout);
    body.Put<uint64_t>(t.chunks.size());
    for (const ChunkRecord& c : t.chunks) {
      for (int64_t o : c.box.offset) body.Put<int64_t>(o);
      for (int64_t s : c.box.shape) body.Put<int64_t>(s);
      body.Put<uint32_t>(static_cast<uint32_t>(c.file));
      body.Put<uint64_t>(static_cast<uint64_t>(c.byte_offset));
      body.Put<uint64_t>(static_cast<uint64_t>(c.byte_length));
      if (version >= 2) {
        body.Put<uint64_t>(static_cast<uint64_t>(c.block_bytes));
      } else if (c.block_bytes != md.checksum_block_bytes) {
        return InvalidArgumentError("EncodeMetadataVersion: version 1 has one checksum block size (" +
                                    std::to_string(md.checksum_block_bytes) + "), tensor '" + t.name +
                                    "' has a chunk with " + std::to_string(c.block_bytes));
      }
      body.Put<uint32_t>(static_cast<uint32_t>(c.block_crcs.size()));
      for (uint32_t crc : c.block_crcs) body.Put<uint32_t>(crc);
    }
  }
  Writer out;
  out.PutBytes(kCheckpointMagic);
  out.Put<uint32_t>(version);
  out.Put<uint32_t>(0);
  out.Put<uint64_t>(body.out().size());
  out.PutBytes(body.out());
  const uint32_t crc = Crc32c(std::as_bytes(std::span<const char>(out.out().data(), out.out().size())));
  out.Put<uint32_t>(crc);
  return std::string(std::move(out.out()));
}

namespace {

// One chunk record of tensor `t` (its earlier chunks already in t.chunks, for the overlap check);
// `cw` names it in errors. `corrupt` turns a reason into the file's DATA_LOSS error.
template <typename Corrupt>
StatusOr<ChunkRecord> DecodeChunk(Reader& r, const TensorRecord& t, const CheckpointMetadata& md, uint32_t version,
                                  const std::string& cw, const Corrupt& corrupt) {
  const uint32_t ndim = static_cast<uint32_t>(t.shape.size());
  const int64_t es = DTypeSize(t.dtype);
  ChunkRecord c;
  c.box.offset.resize(ndim);
  c.box.shape.resize(ndim);
  for (uint32_t d = 0; d < ndim; ++d) MF_RETURN_IF_ERROR(r.Get(c.box.offset[d], "chunk offset"));
  for (uint32_t d = 0; d < ndim; ++d) MF_RETURN_IF_ERROR(r.Get(c.box.shape[d], "chunk shape"));
  for (uint32_t d = 0; d < ndim; ++d) {
    if (c.box.offset[d] < 0 || c.box.shape[d] <= 0 || c.box.offset[d] > t.shape[d] ||
        c.box.shape[d] > t.shape[d] - c.box.offset[d]) {
      return corrupt(cw + " box " + c.box.ToString() + " is empty or outside the shape " + ListString(t.shape));
    }
  }
  uint32_t file = 0;
  uint64_t off = 0, len = 0;
  MF_RETURN_IF_ERROR(r.Get(file, "chunk file"));
  MF_RETURN_IF_ERROR(r.Get(off, "chunk byte offset"));
  MF_RETURN_IF_ERROR(r.Get(len, "chunk byte length"));
  if (file >= md.file_sizes.size()) {
    return corrupt(cw + " names data file " + std::to_string(file) + " but there are " +
                   std::to_string(md.file_sizes.size()));
  }
  c.file = static_cast<int32_t>(file);
  const int64_t elems = c.box.NumElements();
  if (len != static_cast<uint64_t>(elems * es)) {
    return corrupt(cw + " has " + std::to_string(len) + " bytes, expected " + std::to_string(elems * es) + " for " +
                   std::to_string(elems) + " " + std::string(DTypeName(t.dtype)) + " elements");
  }
  if (off > static_cast<uint64_t>(md.file_sizes[file]) || len > static_cast<uint64_t>(md.file_sizes[file]) - off) {
    return corrupt(cw + " bytes [" + std::to_string(off) + ", " + std::to_string(off + len) + ") lie past the end of " +
                   DataFileName(static_cast<int>(file)) + " (" + std::to_string(md.file_sizes[file]) + " bytes)");
  }
  c.byte_offset = static_cast<int64_t>(off);
  c.byte_length = static_cast<int64_t>(len);
  c.block_bytes = md.checksum_block_bytes;
  if (version >= 2) {
    uint64_t cb = 0;
    MF_RETURN_IF_ERROR(r.Get(cb, "chunk checksum block size"));
    if (cb == 0 || cb > static_cast<uint64_t>(md.checksum_block_bytes)) {
      return corrupt(cw + " checksum block size " + std::to_string(cb) + " is not in [1, " +
                     std::to_string(md.checksum_block_bytes) + "]");
    }
    c.block_bytes = static_cast<int64_t>(cb);
  }
  uint32_t nblocks = 0;
  MF_RETURN_IF_ERROR(r.Get(nblocks, "chunk block count"));
  if (static_cast<int64_t>(nblocks) != NumChecksumBlocks(c.byte_length, c.block_bytes)) {
    return corrupt(cw + " has " + std::to_string(nblocks) + " checksums, expected " +
                   std::to_string(NumChecksumBlocks(c.byte_length, c.block_bytes)));
  }
  c.block_crcs.resize(nblocks);
  for (uint32_t& crc : c.block_crcs) MF_RETURN_IF_ERROR(r.Get(crc, "chunk checksum"));
  for (const ChunkRecord& prev : t.chunks) {
    if (!Intersect(prev.box, c.box).empty()) {
      return corrupt(cw + " box " + c.box.ToString() + " overlaps " + prev.box.ToString());
    }
  }
  return c;
}

}  // namespace

StatusOr<CheckpointMetadata> DecodeMetadata(std::string_view bytes, std::string_view path) {
  const std::string where = "checkpoint metadata " + std::string(path);
  auto corrupt = [&](const std::string& why) { return DataLossError(where + " is corrupted: " + why); };
  if (bytes.size() < kHeaderBytes + kTrailerBytes) {
    return corrupt("file has " + std::to_string(bytes.size()) + " bytes, fewer than the " +
                   std::to_string(kHeaderBytes + kTrailerBytes) + "-byte header and trailer");
  }
  if (bytes.substr(0, 8) != kCheckpointMagic) return corrupt("bad magic (not a meshflow checkpoint metadata file)");
  uint32_t version = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  if (version < kOldestReadableCheckpointFormatVersion || version > kCheckpointFormatVersion) {
    return UnimplementedError(where + " has format version " + std::to_string(version) + "; this build reads versions " +
                              std::to_string(kOldestReadableCheckpointFormatVersion) + " to " +
                              std::to_string(kCheckpointFormatVersion));
  }
  uint64_t body_len = 0;
  std::memcpy(&body_len, bytes.data() + 16, 8);
  if (body_len != bytes.size() - kHeaderBytes - kTrailerBytes) {
    return corrupt("header says the body has " + std::to_string(body_len) + " bytes but the file holds " +
                   std::to_string(bytes.size() - kHeaderBytes - kTrailerBytes) + " (truncated or extended)");
  }
  uint32_t want_crc = 0;
  std::memcpy(&want_crc, bytes.data() + bytes.size() - 4, 4);
  const uint32_t got_crc = Crc32c(std::as_bytes(std::span<const char>(bytes.data(), bytes.size() - 4)));
  if (got_crc != want_crc) {
    return corrupt("CRC-32C mismatch (stored " + std::to_string(want_crc) + ", computed " + std::to_string(got_crc) +
                   ")");
  }

  Reader r(bytes.substr(kHeaderBytes, static_cast<size_t>(body_len)), path);
  CheckpointMetadata md;
  uint64_t block = 0;
  MF_RETURN_IF_ERROR(r.Get(block, "checksum block size"));
  if (block == 0 || block > static_cast<uint64_t>(kMaxSize)) {
    return corrupt("checksum block size " + std::to_string(block) + " is out of range");
  }
  md.checksum_block_bytes = static_cast<int64_t>(block);
  uint32_t num_files = 0;
  MF_RETURN_IF_ERROR(r.Get(num_files, "data file count"));
  if (num_files > r.remaining() / 8) return corrupt("data file count " + std::to_string(num_files) + " is too large");
  for (uint32_t i = 0; i < num_files; ++i) {
    uint64_t s = 0;
    MF_RETURN_IF_ERROR(r.Get(s, "data file size"));
    if (s > static_cast<uint64_t>(kMaxSize)) return corrupt("data file " + std::to_string(i) + " size is out of range");
    md.file_sizes.push_back(static_cast<int64_t>(s));
  }
  uint64_t extra_len = 0;
  MF_RETURN_IF_ERROR(r.Get(extra_len, "extra state length"));
  MF_RETURN_IF_ERROR(r.GetBytes(extra_len, md.extra_state, "extra state"));
  uint32_t num_tensors = 0;
  MF_RETURN_IF_ERROR(r.Get(num_tensors, "tensor count"));
  std::set<std::string> names;
  for (uint32_t ti = 0; ti < num_tensors; ++ti) {
    TensorRecord t;
    uint32_t name_len = 0;
    MF_RETURN_IF_ERROR(r.Get(name_len, "tensor name length"));
    MF_RETURN_IF_ERROR(r.GetBytes(name_len, t.name, "tensor name"));
    const std::string tw = "tensor '" + t.name + "'";
    if (!names.insert(t.name).second) return corrupt("duplicate " + tw);
    uint8_t code = 0;
    MF_RETURN_IF_ERROR(r.Get(code, "dtype"));
    const std::optional<DType> dt = DTypeFromFileCode(code);
    if (!dt) return corrupt(tw + ": unknown dtype code " + std::to_string(code));
    t.dtype = *dt;
    const int64_t es = DTypeSize(t.dtype);
    uint32_t ndim = 0;
    MF_RETURN_IF_ERROR(r.Get(ndim, "tensor rank"));
    if (ndim > 64) return corrupt(tw + " has rank " + std::to_string(ndim) + " (more than 64)");
    int64_t total = 1;
    for (uint32_t d = 0; d < ndim; ++d) {
      int64_t s = 0;
      MF_RETURN_IF_ERROR(r.Get(s, "tensor shape"));
      if (s < 0 || s > kMaxSize || MulOverflows(total, s)) {
        return corrupt(tw + " has bad size " + std::to_string(s) + " at dim " + std::to_string(d));
      }
      t.shape.push_back(s);
      total *= s;
    }
    if (MulOverflows(total, es)) return corrupt(tw + " is too large");
    uint32_t layout_len = 0;
    MF_RETURN_IF_ERROR(r.Get(layout_len, "saved layout length"));
    MF_RETURN_IF_ERROR(r.GetBytes(layout_len, t.saved_layout, "saved layout"));
    uint64_t num_chunks = 0;
    MF_RETURN_IF_ERROR(r.Get(num_chunks, "chunk count"));
    if (num_chunks > r.remaining() / (16 * ndim + 24)) {
      return corrupt(tw + " chunk count " + std::to_string(num_chunks) + " exceeds the file");
    }
    int64_t covered = 0;
    for (uint64_t ci = 0; ci < num_chunks; ++ci) {
      MF_ASSIGN_OR_RETURN(ChunkRecord c, DecodeChunk(r, t, md, version, tw + " chunk " + std::to_string(ci), corrupt));
      covered += c.box.NumElements();
      t.chunks.push_back(std::move(c));
    }
    if (covered != total) {
      return corrupt(tw + " chunks cover " + std::to_string(covered) + " of its " + std::to_string(total) + " elements");
    }
    md.tensors.push_back(std::move(t));
  }
  if (r.remaining() != 0) return corrupt(std::to_string(r.remaining()) + " unexpected bytes after the last tensor");
  return md;
}

}  // namespace meshflow
