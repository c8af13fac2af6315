// The save protocol of checkpoint/checkpoint.h: SaveCheckpoint as a sequence of named steps
// (class SaveRun), the directory preparation and the commit renames. File helpers and locks are
// in fs_util.h; the load protocol is in load.cc.
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>

#include "meshflow/checkpoint/agree.h"
#include "meshflow/checkpoint/checkpoint.h"
#include "meshflow/checkpoint/fs_util.h"
#include "meshflow/checkpoint/testing_hooks.h"
#include "meshflow/runtime/device_copy.h"
#include "meshflow/runtime/redistribute.h"

namespace meshflow {
namespace {

static_assert(std::endian::native == std::endian::little,
              "checkpoint data files are little-endian; big-endian hosts need byte swaps");

namespace fs = std::filesystem;
using checkpoint_internal::AgreeStatus;
using checkpoint_internal::BackupDir;
using checkpoint_internal::Errno;
using checkpoint_internal::FileLock;
using checkpoint_internal::FsyncPath;
using checkpoint_internal::PathExists;
using checkpoint_internal::SaveLock;
using checkpoint_internal::StripSlashes;
using checkpoint_internal::WriteFileSynced;

struct PlannedChunk {
  Box box;
  int owner_world_rank = 0;
  int file = 0;  // communicator index of the owner
  int64_t byte_offset = 0;
  int64_t byte_length = 0;
  int64_t block_bytes = 0;  // ChunkBlockBytes
  int64_t num_blocks = 0;
};

struct PlannedTensor {
  const DTensor* x = nullptr;  // the (reduced) tensor this rank holds
  std::vector<PlannedChunk> chunks;
};

Status ValidateSave(const std::string& dir, const std::vector<std::pair<std::string, const DTensor*>>& tensors,
                    RankContext& ctx, const SaveOptions& options) {
  if (dir.empty()) return InvalidArgumentError("SaveCheckpoint: empty checkpoint directory");
  if (options.checksum_block_bytes <= 0) {
    return InvalidArgumentError("SaveCheckpoint: checksum_block_bytes " + std::to_string(options.checksum_block_bytes) +
                                " must be > 0");
  }
  std::set<std::string> names;
  for (const auto& [name, x] : tensors) {
    if (name.empty()) return InvalidArgumentError("SaveCheckpoint: empty tensor name");
    if (!names.insert(name).second) return InvalidArgumentError("SaveCheckpoint: duplicate tensor name '" + name + "'");
    if (x == nullptr) return InvalidArgumentError("SaveCheckpoint: tensor '" + name + "' is null");
    if (!(x->layout().mesh() == ctx.mesh())) {
      return InvalidArgumentError("SaveCheckpoint: tensor '" + name + "' is on " + x->layout().mesh().ToString() +
                                  " but the communicators are for " + ctx.mesh().ToString());
    }
    if (x->rank() != ctx.world_rank()) {
      return InvalidArgumentError("SaveCheckpoint: tensor '" + name + "' belongs to rank " + std::to_string(x->rank()) +
                                  " but is saved by rank " + std::to_string(ctx.world_rank()));
    }
  }
  return Status();
}

// FNV-1a 64 of what every rank must agree on: names, dtypes, layouts.
uint64_t DescribeHash(const std::vector<std::pair<std::string, const DTensor*>>& tensors) {
  std::string d;
  for (const auto& [name, x] : tensors) {
    d += name + '\0' + std::string(DTypeName(x->dtype())) + '\0' + x->layout().ToString() + '\0';
  }
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : d) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return h;
}

std::vector<PlannedChunk> PlanChunks(const Layout& layout, DType dtype, const std::vector<int>& comm_world_ranks) {
  std::vector<PlannedChunk> chunks;
  const DeviceMesh& mesh = layout.mesh();
  for (int w : mesh.ranks()) {
    Box box = *layout.LocalBox(w);
    if (box.empty()) continue;
    auto it = std::find_if(chunks.begin(), chunks.end(), [&](const PlannedChunk& c) { return c.box == box; });
    if (it != chunks.end()) {
      it->owner_world_rank = std::min(it->owner_world_rank, w);
    } else {
      PlannedChunk c;
      c.box = std::move(box);
      c.owner_world_rank = w;
      c.byte_length = c.box.NumElements() * DTypeSize(dtype);
      chunks.push_back(std::move(c));
    }
  }
  for (PlannedChunk& c : chunks) {
    c.file = static_cast<int>(std::find(comm_world_ranks.begin(), comm_world_ranks.end(), c.owner_world_rank) -
                              comm_world_ranks.begin());
  }
  return chunks;
}

bool IsTempDirName(const std::string& name, const std::string& base) {
  const std::string prefix = base + ".tmp-";
  if (name.size() != prefix.size() + 16 || name.compare(0, prefix.size(), prefix) != 0) return false;
  return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(prefix.size()), name.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// Rank 0, holding the save lock: removes the temporary directories `<dir>.tmp-<16 hex>` left by
// crashed saves (no other save of `dir` can be running: it would hold the lock), recovers from a
// crash between the commit renames, checks `dir`, creates the temp dir.
Status PrepareDirs(const std::string& dir, const std::string& tmp, int* stale_removed) {
  const fs::path parent = fs::path(dir).parent_path();
  const std::string parent_str = parent.empty() ? std::string(".") : parent.string();
  MF_ASSIGN_OR_RETURN(bool parent_exists, PathExists(parent_str));
  if (!parent_exists) {
    return NotFoundError("SaveCheckpoint: parent directory " + parent_str + " of " + dir + " does not exist");
  }
  std::error_code ec;
  const std::string base = fs::path(dir).filename().string();
  std::vector<fs::path> stale;
  for (fs::directory_iterator it(parent_str, ec), end; !ec && it != end; it.increment(ec)) {
    if (IsTempDirName(it->path().filename().string(), base)) stale.push_back(it->path());
  }
  if (ec) return UnavailableError("SaveCheckpoint: cannot list " + parent_str + ": " + ec.message());
  for (const fs::path& p : stale) {
    fs::remove_all(p, ec);
    if (ec) return UnavailableError("SaveCheckpoint: cannot remove the stale temporary directory " + p.string() + ": " + ec.message());
    ++*stale_removed;
  }
  MF_ASSIGN_OR_RETURN(bool dir_exists, PathExists(dir));
  MF_ASSIGN_OR_RETURN(bool backup_exists, PathExists(BackupDir(dir)));
  if (!dir_exists && backup_exists) {
    FileLock commit_lock;  // a load resolving `dir` then `<dir>.old` must not miss both
    MF_RETURN_IF_ERROR(commit_lock.Lock(CheckpointCommitLockPath(dir), LOCK_EX, /*create=*/true));
    fs::rename(BackupDir(dir), dir, ec);
    if (ec) return UnavailableError("cannot restore " + BackupDir(dir) + " to " + dir + ": " + ec.message());
    dir_exists = true;
  }
  if (dir_exists) {
    if (!fs::is_directory(dir, ec)) {
      return FailedPreconditionError("SaveCheckpoint: " + dir + " exists and is not a directory");
    }
    const bool empty = fs::is_empty(dir, ec);
    if (ec) return UnavailableError("SaveCheckpoint: cannot list " + dir + ": " + ec.message());
    MF_ASSIGN_OR_RETURN(bool has_metadata, PathExists((fs::path(dir) / kMetadataFileName).string()));
    if (!empty && !has_metadata) {
      return FailedPreconditionError("SaveCheckpoint: refusing to replace " + dir +
                                     ": it is not empty and holds no " + std::string(kMetadataFileName));
    }
  }
  if (::mkdir(tmp.c_str(), 0755) != 0) return UnavailableError("cannot create " + tmp + ": " + Errno(errno));
  return Status();
}

// The outcome of the commit on rank 0. `committed` is true once the temporary directory has been
// renamed to `dir` (the commit point); `status` is then OK and `warning` names any later step
// that failed (parent fsync, backup removal). Before the commit point every failure is undone:
// `dir` is back as it was.
struct CommitResult {
  Status status;
  bool committed = false;
  std::string warning;
};

CommitResult Commit(const std::string& dir, const std::string& tmp, const SaveFaults& faults) {
  CommitResult out;
  if (faults.crash_point == SaveCrashPoint::kBeforeRename) {
    out.status = AbortedError("SaveCheckpoint: injected crash before the rename of " + tmp + " to " + dir);
    return out;
  }
  std::error_code ec;
  StatusOr<bool> had_old = PathExists(dir);
  if (!had_old.ok()) {
    out.status = had_old.status();
    return out;
  }
  const std::string backup = BackupDir(dir);
  if (*had_old) {
    StatusOr<bool> stale = PathExists(backup);
    if (!stale.ok()) {
      out.status = stale.status();
      return out;
    }
    if (*stale) {  // a stale backup of a save that committed but did not clean up
      fs::remove_all(backup, ec);
      if (ec) {
        out.status = UnavailableError("cannot remove stale backup " + backup + ": " + ec.message());
        return out;
      }
    }
  }
  // The renames exclude the loads' pinning (shared holders of the commit lock): a load opens either
  // the previous checkpoint or this one, never a directory in between.
  FileLock commit_lock;
  out.status = commit_lock.Lock(CheckpointCommitLockPath(dir), LOCK_EX, /*create=*/true);
  if (!out.status.ok()) return out;
  if (*had_old) {
    fs::rename(dir, backup, ec);
    if (ec) {
      out.status = UnavailableError("cannot rename " + dir + " to " + backup + ": " + ec.message());
      return out;
    }
  }
  if (faults.crash_point == SaveCrashPoint::kBetweenRenames) {
    out.status = AbortedError("SaveCheckpoint: injected crash after renaming " + dir + " to " + backup);
    return out;
  }
  fs::rename(tmp, dir, ec);
  if (ec) {
    out.status = UnavailableError("cannot rename " + tmp + " to " + dir + ": " + ec.message());
    if (*had_old) {  // roll back: the previous checkpoint stays in place
      std::error_code ec2;
      fs::rename(backup, dir, ec2);
      if (ec2) out.status = out.status.WithContext("and cannot restore " + backup + " to " + dir + " (" + ec2.message() + "; the loaders read " + backup + ")");
    }
    return out;
  }
  // The commit point: from here on the save has succeeded; later failures are warnings.
  out.committed = true;
  commit_lock.Release();  // loads pinning the backup hold its files open: removing it is safe
  std::string parent = fs::path(dir).parent_path().string();
  if (parent.empty()) parent = ".";
  Status synced = faults.fail_after_commit
                      ? UnavailableError("injected failure after the commit (fsync of " + parent + ")")
                      : FsyncPath(parent, /*directory=*/true);
  if (!synced.ok()) out.warning = synced.message() + " (the rename may not survive a power loss)";
  if (*had_old) {
    fs::remove_all(backup, ec);
    if (ec) {
      out.warning += std::string(out.warning.empty() ? "" : "; ") + "cannot remove backup " + backup + ": " +
                     ec.message() + " (the next save removes it)";
    }
  }
  return out;
}

std::string UniqueSuffix(uint64_t id) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(id));
  return buf;
}

uint64_t NewUniqueId() {
  std::random_device rd;
  const uint64_t t = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ (t * 0x9E3779B97F4A7C15ull) ^ static_cast<uint64_t>(::getpid());
}

// One collective save (SaveCheckpoint) as its steps, in order; Run() calls them. Every step that
// can fail on some rank ends with an agreement, so all ranks leave at the same step.
class SaveRun {
 public:
  SaveRun(const std::string& dir, const std::vector<std::pair<std::string, const DTensor*>>& tensors,
          RankContext& ctx, const SaveOptions& options, const SaveFaults& faults)
      : dir_(StripSlashes(dir)), tensors_(tensors), ctx_(ctx), comm_(ctx.world()), options_(options),
        faults_(faults), n_(comm_.size()), me_(comm_.rank()), plan_(tensors.size()) {}

  Status Run() {
    MF_RETURN_IF_ERROR(CheckInputs());
    MF_RETURN_IF_ERROR(ReduceAndPlan());
    AssignFileOffsets();
    MF_RETURN_IF_ERROR(LockAndPrepareDirs());
    // From here on the temporary directory exists: a failure abandons it (Abandon).
    if (Status st = WriteDataFile(); !st.ok()) return Abandon(st);
    if (Status st = GatherChecksums(); !st.ok()) return Abandon(st);
    Status local;
    if (me_ == 0) {
      local = WriteMetadataAndCommit();
      if (!died_after_commit_.ok()) return died_after_commit_;  // simulated death: tells nobody
    }
    return AgreeOutcome(local);
  }

 private:
  // 1. Inputs valid on every rank, and the same tensor list (names, dtypes, layouts) everywhere.
  Status CheckInputs() {
    MF_RETURN_IF_ERROR(AgreeStatus(comm_, ValidateSave(dir_, tensors_, ctx_, options_)));
    const int64_t h = static_cast<int64_t>(DescribeHash(tensors_));
    std::vector<int64_t> all(static_cast<size_t>(n_));
    MF_RETURN_IF_ERROR(comm_.AllGather(&h, all.data(), 1, DType::kI64));
    for (int r = 1; r < n_; ++r) {
      if (all[r] != all[0]) {
        return FailedPreconditionError("SaveCheckpoint: rank " + std::to_string(comm_.world_ranks()[r]) +
                                       " passes different tensors (names, dtypes or layouts) than rank " +
                                       std::to_string(comm_.world_ranks()[0]));
      }
    }
    return Status();
  }

  // 2. Partial tensors are reduced (saved as the same placements with Partial -> Replicate),
  // device tensors copied to the host (the files are written from host memory), and the chunks of
  // each tensor planned.
  Status ReduceAndPlan() {
    reduced_.reserve(tensors_.size());
    on_host_.reserve(tensors_.size());
    Status local;
    for (size_t i = 0; i < tensors_.size() && local.ok(); ++i) {
      StatusOr<const DTensor*> x = SavedForm(i);
      local = x.status();
      if (!local.ok()) break;
      plan_[i].x = *x;
      plan_[i].chunks = PlanChunks((*x)->layout(), (*x)->dtype(), comm_.world_ranks());
    }
    return AgreeStatus(comm_, local);
  }

  // The tensor that step 2 saves for tensors_[i] (reduced and on the host; stable addresses).
  StatusOr<const DTensor*> SavedForm(size_t i) {
    const DTensor* x = tensors_[i].second;
    if (x->layout().HasPartial()) {
      Placements ps = x->layout().placements();
      for (Placement& p : ps) {
        if (IsPartial(p)) p = Replicate{};
      }
      MF_ASSIGN_OR_RETURN(Layout rl, x->layout().WithPlacements(ps, x->layout().shard_order()));
      StatusOr<DTensor> y = Redistribute(*x, rl, ctx_);
      if (!y.ok()) return y.status().WithContext("SaveCheckpoint: reducing Partial tensor '" + tensors_[i].first + "'");
      reduced_.push_back(*std::move(y));
      x = &reduced_.back();
    }
    if (!x->local().is_host()) {
      StatusOr<DTensor> h = OnHost(*x);
      if (!h.ok()) return h.status().WithContext("SaveCheckpoint: copying '" + tensors_[i].first + "' to the host");
      on_host_.push_back(*std::move(h));
      x = &on_host_.back();
    }
    return x;
  }

  // Byte offsets: per file, chunks back to back in (tensor, chunk) order; checksum blocks.
  void AssignFileOffsets() {
    file_sizes_.assign(static_cast<size_t>(n_), 0);
    crc_counts_.assign(static_cast<size_t>(n_), 0);
    for (PlannedTensor& t : plan_) {
      for (PlannedChunk& c : t.chunks) {
        c.byte_offset = file_sizes_[c.file];
        file_sizes_[c.file] += c.byte_length;
        c.block_bytes = ChunkBlockBytes(c.byte_length, options_.checksum_block_bytes);
        c.num_blocks = NumChecksumBlocks(c.byte_length, c.block_bytes);
        crc_counts_[c.file] += c.num_blocks;
      }
    }
  }

  // 3. Rank 0 takes the save lock (held until the end), removes stale temporary directories,
  // prepares the directories and picks the temporary name, which it broadcasts.
  Status LockAndPrepareDirs() {
    info_ = options_.info != nullptr ? options_.info : &info_local_;
    *info_ = SaveInfo{};
    int64_t id = 0;
    Status local;
    if (me_ == 0) {
      id = static_cast<int64_t>(NewUniqueId());
      local = lock_.Acquire(dir_);
      if (local.ok()) {
        local = RunCheckpointTestHook("save:locked", comm_.world_rank());
        if (local.ok()) local = PrepareDirs(dir_, TempDir(id), &info_->stale_temp_dirs_removed);
      }
    }
    const bool made_tmp = me_ == 0 && local.ok();
    Status prep = comm_.Broadcast(&id, 1, DType::kI64, 0);
    if (prep.ok()) prep = AgreeStatus(comm_, local);
    tmp_ = TempDir(id);
    if (!prep.ok() && made_tmp) {
      std::error_code ec;
      fs::remove_all(tmp_, ec);
    }
    return prep;
  }

  std::string TempDir(int64_t id) const { return dir_ + ".tmp-" + UniqueSuffix(static_cast<uint64_t>(id)); }

  // A failed save removes its temporary directory (rank 0, after every rank has agreed on the
  // failure, so nobody writes there any more), except when a crash is being simulated: a crashed
  // process cleans nothing, the next save does.
  bool SimulatingCrash() const {
    return faults_.fail_after_files >= 0 || faults_.crash_point != SaveCrashPoint::kNone;
  }
  Status Abandon(Status st) {
    if (me_ == 0 && !SimulatingCrash()) {
      std::error_code ec;
      fs::remove_all(tmp_, ec);
    }
    return st;
  }

  Status InjectedCrash() const {
    return AbortedError("SaveCheckpoint: injected crash on rank " + std::to_string(comm_.world_rank()) + " after " +
                        std::to_string(files_written_) + " file(s) written to " + tmp_);
  }

  // 4. Every rank writes its data file (its owned chunks) and fsyncs it; the agreement is also
  // the barrier: every data file is synced. Each checksum block is checksummed right before it is
  // written, while it is in cache.
  Status WriteDataFile() {
    Status local;
    if (faults_.fail_after_files == 0) {
      local = InjectedCrash();
    } else {
      std::vector<std::span<const std::byte>> parts;
      for (const PlannedTensor& t : plan_) {
        for (const PlannedChunk& c : t.chunks) {
          if (c.file != me_) continue;
          const Tensor& lt = t.x->local();
          // The owner's local box is the chunk's box, so its buffer is the chunk, row-major.
          const std::span<const std::byte> bytes(lt.raw(), static_cast<size_t>(lt.NumBytes()));
          for (int64_t k = 0; k < c.num_blocks; ++k) {
            const int64_t b = k * c.block_bytes, e = std::min(c.byte_length, b + c.block_bytes);
            parts.push_back(bytes.subspan(static_cast<size_t>(b), static_cast<size_t>(e - b)));
          }
        }
      }
      my_crcs_.reserve(parts.size());
      local = WriteFileSynced((fs::path(tmp_) / DataFileName(me_)).string(), parts, &my_crcs_);
      if (local.ok()) ++files_written_;
      if (local.ok() && faults_.fail_after_files == files_written_) local = InjectedCrash();
      if (local.ok()) local = RunCheckpointTestHook("save:data-written", comm_.world_rank());
    }
    return AgreeStatus(comm_, local);
  }

  // 5. Checksums to rank 0 (all-gather: the communicator has no gather).
  Status GatherChecksums() {
    crc_prefix_.assign(static_cast<size_t>(n_ + 1), 0);
    for (int r = 0; r < n_; ++r) crc_prefix_[r + 1] = crc_prefix_[r] + crc_counts_[r];
    all_crcs_.resize(static_cast<size_t>(crc_prefix_[n_]));
    return comm_.AllGatherV(my_crcs_.data(), crc_counts_[me_], all_crcs_.data(), crc_counts_, DType::kI32);
  }

  // The metadata (rank 0): every tensor's chunks with their checksums.
  CheckpointMetadata BuildMetadata() const {
    CheckpointMetadata md;
    md.checksum_block_bytes = options_.checksum_block_bytes;
    md.file_sizes = file_sizes_;
    md.extra_state = options_.extra_state;
    std::vector<int64_t> next(crc_prefix_.begin(), crc_prefix_.end() - 1);
    for (size_t i = 0; i < plan_.size(); ++i) {
      TensorRecord t;
      t.name = tensors_[i].first;
      t.dtype = plan_[i].x->dtype();
      t.shape = plan_[i].x->global_shape();
      t.saved_layout = tensors_[i].second->layout().ToString();
      for (const PlannedChunk& c : plan_[i].chunks) {
        ChunkRecord cr;
        cr.box = c.box;
        cr.file = c.file;
        cr.byte_offset = c.byte_offset;
        cr.byte_length = c.byte_length;
        cr.block_bytes = c.block_bytes;
        cr.block_crcs.assign(all_crcs_.begin() + next[c.file], all_crcs_.begin() + next[c.file] + c.num_blocks);
        next[c.file] += c.num_blocks;
        t.chunks.push_back(std::move(cr));
      }
      md.tensors.push_back(std::move(t));
    }
    return md;
  }

  // 6. Rank 0 writes the metadata, syncs the directory and commits. A "save:committed" hook
  // failure is kept in died_after_commit_ (the simulated death of rank 0).
  Status WriteMetadataAndCommit() {
    const std::string bytes = EncodeMetadata(BuildMetadata());
    const std::span<const std::byte> part = std::as_bytes(std::span<const char>(bytes.data(), bytes.size()));
    Status local = WriteFileSynced((fs::path(tmp_) / kMetadataFileName).string(), std::span(&part, 1));
    if (local.ok()) ++files_written_;
    if (local.ok() && faults_.fail_after_files == files_written_) local = InjectedCrash();
    if (local.ok()) local = FsyncPath(tmp_, /*directory=*/true);
    if (local.ok()) {
      CommitResult c = Commit(dir_, tmp_, faults_);
      local = c.status;
      info_->committed = c.committed;
      info_->warning = std::move(c.warning);
      if (c.committed) {
        died_after_commit_ = RunCheckpointTestHook("save:committed", comm_.world_rank());
        if (!died_after_commit_.ok()) return died_after_commit_;
      }
    }
    if (!local.ok() && !SimulatingCrash()) {
      std::error_code ec;
      fs::remove_all(tmp_, ec);
    }
    return local;
  }

  // 7. Every rank learns the outcome. Rank 0's status is OK exactly when it committed, so no rank
  // returns an error for a committed save and no rank returns OK for an uncommitted one.
  Status AgreeOutcome(const Status& local) {
    bool comm_failed = false;
    const Status agreed = AgreeStatus(comm_, local, &comm_failed);
    if (me_ == 0) {
      lock_.Release();
      if (info_->committed) return Status();  // committed: nothing can make it fail any more
      return agreed.ok() ? local : agreed;
    }
    if (comm_failed) {
      // The agreement itself failed (a communication error, not a rank's reported failure): this
      // rank cannot know whether rank 0 committed.
      return Status(agreed.code(), "SaveCheckpoint: lost contact with rank 0 during the commit of " + dir_ +
                                       ": the save may or may not have committed (ReadCheckpointMetadata tells): " +
                                       agreed.message());
    }
    info_->committed = agreed.ok();
    return agreed;
  }

  const std::string dir_;
  const std::vector<std::pair<std::string, const DTensor*>>& tensors_;
  RankContext& ctx_;
  Communicator& comm_;
  const SaveOptions& options_;
  const SaveFaults& faults_;
  const int n_;   // ranks of the world communicator
  const int me_;  // this rank's index in it

  std::vector<DTensor> reduced_;  // reduced Partial tensors (reserved: stable addresses)
  std::vector<DTensor> on_host_;  // host copies of device tensors (reserved: stable addresses)
  std::vector<PlannedTensor> plan_;
  std::vector<int64_t> file_sizes_, crc_counts_;
  SaveInfo info_local_;
  SaveInfo* info_ = &info_local_;
  SaveLock lock_;  // rank 0
  std::string tmp_;
  int files_written_ = 0;
  std::vector<uint32_t> my_crcs_;
  std::vector<int64_t> crc_prefix_;  // crc_prefix_[r]: checksums of the files before r
  std::vector<uint32_t> all_crcs_;
  Status died_after_commit_;
};

}  // namespace

Status SaveCheckpointWithFaults(const std::string& dir,
                                const std::vector<std::pair<std::string, const DTensor*>>& tensors, RankContext& ctx,
                                const SaveOptions& options, const SaveFaults& faults) {
  // The metadata exchanges use the world communicator directly: no communication may be pending
  // on the context's stream (runtime/rank_context.h).
  MF_RETURN_IF_ERROR(ctx.SyncComm());
  return SaveRun(dir, tensors, ctx, options, faults).Run();
}

Status SaveCheckpoint(const std::string& dir, const std::vector<std::pair<std::string, const DTensor*>>& tensors,
                      RankContext& ctx, const SaveOptions& options) {
  return SaveCheckpointWithFaults(dir, tensors, ctx, options, SaveFaults{});
}

std::string CheckpointLockPath(const std::string& dir) { return checkpoint_internal::SaveLockPath(dir); }
std::string CheckpointCommitLockPath(const std::string& dir) { return checkpoint_internal::CommitLockPath(dir); }

}  // namespace meshflow
