// The on-disk format of a meshflow checkpoint: metadata records and their encoding.
//
// A checkpoint directory holds one metadata file (kMetadataFileName, written by rank 0) and one
// data file per saving rank (DataFileName(i)). The metadata lists, for every tensor, its name,
// global shape, dtype and chunks; a chunk is a box of the global tensor stored row-major in one
// data file at a byte offset, with one CRC-32C per checksum block of its bytes (each chunk has its
// own block size: ChunkBlockBytes). See FORMAT.md for the byte-level layout (little-endian,
// versioned; version 1, one block size for every chunk, still loads).
//
// This header is the pure (no I/O) part: records, encode, decode + validation. checkpoint.h has
// the collective save/load.
//
//   CheckpointMetadata md;
//   md.checksum_block_bytes = 1 << 20;
//   md.file_sizes = {64};
//   ChunkRecord chunk{.box = {{0, 0}, {4, 4}}, .byte_length = 64, .block_bytes = 64, .block_crcs = {crc}};
//   md.tensors.push_back({.name = "w", .dtype = DType::kF32, .shape = {4, 4}, .chunks = {chunk}});
//   std::string bytes = EncodeMetadata(md);
//   MF_ASSIGN_OR_RETURN(CheckpointMetadata back, DecodeMetadata(bytes, "ckpt/metadata.mfck"));  // == md
#ifndef MESHFLOW_CHECKPOINT_FORMAT_H_
#define MESHFLOW_CHECKPOINT_FORMAT_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/dtensor/box.h"
#include "meshflow/dtensor/dtype.h"

namespace meshflow {

// The version this build writes, and the oldest it reads. Version 1 stored one checksum block
// size for the whole checkpoint; version 2 stores one per chunk (ChunkRecord::block_bytes).
inline constexpr uint32_t kCheckpointFormatVersion = 2;
inline constexpr uint32_t kOldestReadableCheckpointFormatVersion = 1;
// First 8 bytes of the metadata file.
inline constexpr std::string_view kCheckpointMagic{"MFCKPT\r\n", 8};
inline constexpr std::string_view kMetadataFileName = "metadata.mfck";

// "data-00003.bin" for file index 3.
std::string DataFileName(int file_index);

// Dtypes are stored by DTypeFileCode (dtensor/dtype.h), as in every meshflow file.

struct ChunkRecord {
  Box box{};                  // global coordinates; never empty
  int32_t file = 0;           // data file index
  int64_t byte_offset = 0;    // in that file
  int64_t byte_length = 0;    // = box.NumElements() * DTypeSize(dtype)
  // This chunk's checksum block size B (> 0, <= CheckpointMetadata::checksum_block_bytes; in a
  // version 1 file, that value for every chunk).
  int64_t block_bytes = 0;
  // CRC-32C of each checksum block of the chunk's bytes: block k covers bytes
  // [k*B, min(len, (k+1)*B)) of the chunk.
  std::vector<uint32_t> block_crcs{};
  friend bool operator==(const ChunkRecord&, const ChunkRecord&) = default;
};

struct TensorRecord {
  std::string name{};
  DType dtype = DType::kF32;
  std::vector<int64_t> shape{};
  std::string saved_layout{};  // informational, e.g. "S(0),R on mesh(2x4) shape [8,6]"
  std::vector<ChunkRecord> chunks{};  // disjoint; together they cover the tensor
  friend bool operator==(const TensorRecord&, const TensorRecord&) = default;
};

struct CheckpointMetadata {
  // The largest checksum block of any chunk (SaveOptions::checksum_block_bytes).
  int64_t checksum_block_bytes = int64_t{1} << 20;
  std::vector<int64_t> file_sizes{};  // one per data file: its exact size in bytes
  std::vector<TensorRecord> tensors{};
  std::string extra_state{};  // opaque blob (SaveOptions::extra_state)

  // nullptr when absent.
  const TensorRecord* Find(std::string_view name) const;
  friend bool operator==(const CheckpointMetadata&, const CheckpointMetadata&) = default;
};

// Number of checksum blocks of a chunk of `byte_length` bytes (0 for 0 bytes).
int64_t NumChecksumBlocks(int64_t byte_length, int64_t block_bytes);

// The checksum block size the writer gives a chunk of `byte_length` bytes: the smallest power of
// two >= byte_length / kMaxChecksumBlocksPerChunk and >= kMinChecksumBlockBytes, capped at
// `max_block_bytes` (> 0). Fine blocks let a resharded load read only the blocks it needs; the
// cap on the block count bounds the metadata at 16 KiB of checksums per chunk.
inline constexpr int64_t kMinChecksumBlockBytes = 4096;
inline constexpr int64_t kMaxChecksumBlocksPerChunk = 4096;
int64_t ChunkBlockBytes(int64_t byte_length, int64_t max_block_bytes);

// The whole metadata file: header, body, trailing CRC-32C (see FORMAT.md), in the current format.
std::string EncodeMetadata(const CheckpointMetadata& md);
// In format `version` (kOldestReadableCheckpointFormatVersion..kCheckpointFormatVersion), for
// compatibility tests. Errors: another version; version 1 and a chunk whose block_bytes is not
// md.checksum_block_bytes (version 1 has one block size).
StatusOr<std::string> EncodeMetadataVersion(const CheckpointMetadata& md, uint32_t version);

// Parses and validates a metadata file; `path` is named in every error. Errors:
//   DataLoss         bad magic, truncated, trailing bytes, CRC mismatch, or a record that breaks
//                    an invariant (chunk outside the shape, overlapping chunks, chunks that do
//                    not cover the tensor, length != elements * dtype size, a chunk past the end
//                    of its file, unknown dtype code, duplicate tensor name, ...);
//   Unimplemented    a version outside kOldestReadableCheckpointFormatVersion..
//                    kCheckpointFormatVersion (checked before the CRC, so a newer format is
//                    reported as such).
StatusOr<CheckpointMetadata> DecodeMetadata(std::string_view bytes, std::string_view path);

}  // namespace meshflow

#endif  // MESHFLOW_CHECKPOINT_FORMAT_H_
