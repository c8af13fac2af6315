// Distributed checkpoints of DTensors, with resharding on load.
//
// SaveCheckpoint is collective over a mesh: every rank writes one data file holding only the
// chunks it owns (a chunk = one distinct local box; a box replicated on several ranks is written
// once, by the lowest world rank holding it), and rank 0 writes the metadata (names, shapes,
// dtypes, chunk lists with CRC-32C checksums, an optional opaque "extra state" blob). Partial
// tensors are reduced first: they are saved as Redistribute(x, same placements with every
// Partial replaced by Replicate), i.e. the checkpoint always stores the global value.
//
// LoadTensor(s) may target any layout on any mesh (other shape, world size or placements): each
// rank reads, with pread, only the byte ranges of the chunks that intersect its target box, and
// never materializes the global tensor. Partial targets follow ReferenceLocal (dtensor.h): for
// Partial(sum) the value is loaded on group coordinate 0 of every Partial mesh dim and zeros
// elsewhere (those ranks read nothing); Partial(avg/max/min) load the value on every rank.
//
// Crash safety. A save writes into `<dir>.tmp-<unique>`, fsyncs every file and that directory,
// and after a barrier rank 0 renames it into place: when `dir` exists it is first renamed to
// `<dir>.old`, then the new directory is renamed to `dir`, the parent directory is fsynced and
// `<dir>.old` removed. A crash before the rename leaves `dir` untouched (plus a stale temporary
// directory, never read, removed by the next save); a crash between the two renames leaves no `dir` but a complete
// `<dir>.old`, which the loaders read in that case and the next save restores first. See
// FORMAT.md for the files.
//
// Concurrency. A save holds an exclusive flock(2) on `<dir>.lock` (CheckpointLockPath) from
// before it creates its temporary directory until it returns; the file names the holder
// ("host H pid P since T"). A second save of the same `dir` fails at once (Aborted, naming the
// holder) and writes nothing. The kernel drops the lock when the holder dies, so a crashed save
// never blocks the next one, which removes the crashed saves' temporary directories first. A
// failed save removes its own temporary directory. The result is unambiguous: once `dir` has
// been renamed into place (the commit point) every rank returns OK; failures after it (the parent
// fsync, removing the backup) are reported in SaveInfo::warning.
// A load pins one committed checkpoint for all ranks: rank 0 takes a shared flock on
// `<dir>.commit-lock` (the commit renames take it exclusively), resolves the directory, opens it
// and reads its metadata, which it broadcasts; every rank opens the same directory (an open
// directory descriptor), checks that its metadata is byte-identical to rank 0's, and opens
// (openat) every data file it needs; only then does rank 0 release the lock. Open files stay
// readable when a later save replaces or removes the directory, so all ranks read one step and
// never see a half-replaced one. Where the lock is not shared (another host on a file system
// without flock), a mismatch makes all ranks retry; after kLoadPinAttempts the load fails
// (Aborted) instead of mixing steps.
//
// Errors never produce wrong data: every byte read from a data file is covered by a verified
// CRC-32C block checksum (a partial read reads the needed checksum blocks whole).
//   NotFound          no checkpoint at dir; unknown tensor name; a missing data file
//   DataLoss          corrupted or truncated metadata or data file (names the tensor and file)
//   Unimplemented     metadata of an unknown format version
//   InvalidArgument   target shape or dtype differs from the checkpoint; bad names or layouts
// Save and load are collective: when any rank fails, every rank returns an error (the first
// failing rank's, with context "rank r").
//
//   MF_ASSIGN_OR_RETURN(RankContext ctx, RankContext::Create(world_comm, mesh_2x4));
//   MF_RETURN_IF_ERROR(SaveCheckpoint("ckpt/step100", {{"w", &w}, {"b", &b}}, ctx,
//                                     {.extra_state = loader_state}));
//   // ... later, on another mesh
//   MF_ASSIGN_OR_RETURN(RankContext ctx8, RankContext::Create(world_comm, mesh_8));
//   MF_ASSIGN_OR_RETURN(Layout target, Layout::Create({1024, 512}, mesh_8, {Shard{1}}));
//   MF_ASSIGN_OR_RETURN(DTensor w2, LoadTensor("ckpt/step100", "w", target, ctx8));
//   MF_ASSIGN_OR_RETURN(std::string state, LoadExtraState("ckpt/step100"));
#ifndef MESHFLOW_CHECKPOINT_CHECKPOINT_H_
#define MESHFLOW_CHECKPOINT_CHECKPOINT_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/checkpoint/format.h"
#include "meshflow/runtime/rank_context.h"
#include "meshflow/dtensor/dtensor.h"
#include "meshflow/dtensor/layout.h"

namespace meshflow {

struct SaveInfo;

struct SaveOptions {
  // Opaque blob stored in the metadata (e.g. the data loader's serialized state).
  std::string extra_state{};
  // The largest checksum block (> 0): each chunk gets ChunkBlockBytes(its bytes, this), 4 KiB
  // for chunks up to 16 MiB, at most 4096 blocks per chunk. Loads read only the blocks they
  // need, whole, so smaller blocks mean less over-read for partial chunk reads and a larger
  // metadata file.
  int64_t checksum_block_bytes = int64_t{1} << 20;

  // When set, receives what the save did (each rank needs its own SaveInfo).
  SaveInfo* info = nullptr;
};

// What a save did. `committed` is true exactly when the save returned OK.
struct SaveInfo {
  bool committed = false;
  // Rank 0: a step after the commit point that failed (the parent fsync, removing `<dir>.old`);
  // the checkpoint is committed and loadable regardless. Empty when none failed.
  std::string warning{};
  // Rank 0: temporary directories of crashed saves removed before this save.
  int stale_temp_dirs_removed = 0;
};

// Collective over ctx.mesh(): every rank passes the same names with its part of the same
// DTensors (same order, layouts on ctx.mesh()). Errors: empty or duplicate name, a tensor on
// another mesh, ranks passing different tensor lists (FailedPrecondition), checksum_block_bytes
// <= 0, `dir` exists but is not a checkpoint (FailedPrecondition), I/O errors (naming the path),
// another save of `dir` in progress (Aborted, naming the lock holder).
Status SaveCheckpoint(const std::string& dir, const std::vector<std::pair<std::string, const DTensor*>>& tensors,
                      RankContext& ctx, const SaveOptions& options = {});

struct LoadRequest {
  std::string name{};
  Layout layout;                  // target layout; its mesh must be ctx.mesh()
  std::optional<DType> dtype{};   // when set, must equal the saved dtype
};

// Per-rank I/O counters of one load call (this rank only).
struct LoadStats {
  int64_t bytes_read = 0;     // bytes pread from data files (after rounding to checksum blocks)
  int64_t chunks_read = 0;    // chunk reads (one per intersecting chunk)
  int64_t files_opened = 0;
};

// Collective over ctx.mesh(). Returns this rank's part of each requested tensor.
StatusOr<std::vector<DTensor>> LoadTensors(const std::string& dir, const std::vector<LoadRequest>& requests,
                                           RankContext& ctx, LoadStats* stats = nullptr);
// One tensor; `dtype`, when set, must equal the saved dtype.
StatusOr<DTensor> LoadTensor(const std::string& dir, const std::string& name, const Layout& target, RankContext& ctx,
                             std::optional<DType> dtype = std::nullopt);

// The SaveOptions::extra_state of the checkpoint at dir (local, no communication).
StatusOr<std::string> LoadExtraState(const std::string& dir);
// The decoded metadata of the checkpoint at dir (local; falls back to `<dir>.old` as the loaders).
StatusOr<CheckpointMetadata> ReadCheckpointMetadata(const std::string& dir);
// The directory the loaders read for `dir`: dir itself, or `<dir>.old` after a crash between the
// two commit renames. Errors: neither exists (NotFound).
StatusOr<std::string> ResolveCheckpointDir(const std::string& dir);

// The save lock of `dir`: `<dir>.lock` (see "Concurrency" above).
std::string CheckpointLockPath(const std::string& dir);
// The lock the commit renames take exclusively and loads take shared: `<dir>.commit-lock`.
std::string CheckpointCommitLockPath(const std::string& dir);

// How many times a load retries when the ranks opened different checkpoints (only possible
// where the commit lock is not shared between the ranks' hosts).
inline constexpr int kLoadPinAttempts = 8;

}  // namespace meshflow

#endif  // MESHFLOW_CHECKPOINT_CHECKPOINT_H_
