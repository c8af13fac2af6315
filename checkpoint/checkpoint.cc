#include "meshflow/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <ctime>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <random>
#include <set>

#include "meshflow/base/checksum.h"
#include "meshflow/base/strings.h"
#include "meshflow/runtime/device_copy.h"
#include "meshflow/runtime/redistribute.h"

namespace meshflow {
namespace {

static_assert(std::endian::native == std::endian::little,
              "checkpoint data files are little-endian; big-endian hosts need byte swaps");

namespace fs = std::filesystem;

std::string Errno(int err) { return std::strerror(err); }

std::string StripSlashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

std::string BackupDir(const std::string& dir) { return dir + ".old"; }

// ---------------------------------------------------------------------------------------------
// Agreement: every rank learns whether any rank failed, and returns the first failure.

// `comm_failed` (optional) is set when the agreement itself failed (a communication error).
Status AgreeStatus(Communicator& comm, const Status& local, bool* comm_failed = nullptr) {
  const int n = comm.size();
  const int64_t mine[2] = {static_cast<int64_t>(local.code()), static_cast<int64_t>(local.message().size())};
  std::vector<int64_t> info(static_cast<size_t>(2 * n));
  Status s = comm.AllGather(mine, info.data(), 2, DType::kI64);
  if (!s.ok() && comm_failed != nullptr) *comm_failed = true;
  if (!s.ok()) return local.ok() ? s : local;
  bool any = false;
  for (int r = 0; r < n; ++r) any = any || info[2 * r] != 0;
  if (!any) return Status();
  // Messages travel as i64 elements (padded to 8 bytes).
  std::vector<int64_t> counts(static_cast<size_t>(n));
  int64_t total = 0;
  for (int r = 0; r < n; ++r) total += counts[r] = (info[2 * r + 1] + 7) / 8;
  std::vector<int64_t> send(static_cast<size_t>(counts[comm.rank()]), 0);
  if (!local.message().empty()) std::memcpy(send.data(), local.message().data(), local.message().size());
  std::vector<int64_t> recv(static_cast<size_t>(total));
  s = comm.AllGatherV(send.data(), counts[comm.rank()], recv.data(), counts, DType::kI64);
  if (!s.ok() && comm_failed != nullptr) *comm_failed = true;
  if (!s.ok()) return local.ok() ? s : local;
  int64_t pos = 0;
  for (int r = 0; r < n; ++r) {
    if (info[2 * r] != 0) {
      std::string msg(reinterpret_cast<const char*>(recv.data() + pos), static_cast<size_t>(info[2 * r + 1]));
      return Status(static_cast<StatusCode>(info[2 * r]),
                    "rank " + std::to_string(comm.world_ranks()[r]) + ": " + msg);
    }
    pos += counts[r];
  }
  return Status();
}

// ---------------------------------------------------------------------------------------------
// File helpers (POSIX; every error names the path).

Status WriteAll(int fd, const std::byte* data, int64_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, static_cast<size_t>(std::min<int64_t>(n, int64_t{1} << 30)));
    if (w < 0) {
      if (errno == EINTR) continue;
      return UnavailableError("write to " + path + " failed: " + Errno(errno));
    }
    data += w;
    n -= w;
  }
  return Status();
}

Status FsyncPath(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return UnavailableError("cannot open " + path + " to fsync it: " + Errno(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return UnavailableError("fsync of " + path + " failed: " + Errno(err));
  return Status();
}

// Writes a whole file (O_EXCL) and fsyncs it; appends the CRC-32C of each part to `crcs` when
// given (computed just before the part is written). Parts adjacent in memory (the checksum
// blocks of one chunk) are written together, up to kWriteBytes per write.
constexpr int64_t kWriteBytes = int64_t{1} << 20;
Status WriteFileSynced(const std::string& path, std::span<const std::span<const std::byte>> parts,
                       std::vector<uint32_t>* crcs = nullptr) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return UnavailableError("cannot create " + path + ": " + Errno(errno));
  Status s;
  const std::byte* pending = nullptr;
  int64_t pending_len = 0;
  for (std::span<const std::byte> p : parts) {
    if (crcs != nullptr) crcs->push_back(Crc32c(p));
    if (pending != nullptr && pending + pending_len == p.data() && pending_len < kWriteBytes) {
      pending_len += static_cast<int64_t>(p.size());
      continue;
    }
    if (pending_len > 0) s = WriteAll(fd, pending, pending_len, path);
    if (!s.ok()) break;
    pending = p.data();
    pending_len = static_cast<int64_t>(p.size());
  }
  if (s.ok() && pending_len > 0) s = WriteAll(fd, pending, pending_len, path);
  if (s.ok() && ::fsync(fd) != 0) s = UnavailableError("fsync of " + path + " failed: " + Errno(errno));
  if (::close(fd) != 0 && s.ok()) s = UnavailableError("close of " + path + " failed: " + Errno(errno));
  return s;
}

// Whether `path` exists. Only ENOENT means "no"; any other stat failure (EIO, ENOTDIR, ELOOP,
// EACCES, ...) is an error naming the path and the errno text, never a false "does not exist".
StatusOr<bool> PathExists(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return true;
  if (errno == ENOENT) return false;
  return UnavailableError("cannot stat " + path + ": " + Errno(errno));
}

std::mutex& HookMu() {
  static auto* mu = new std::mutex();
  return *mu;
}
std::shared_ptr<const CheckpointTestHook>& HookSlot() {
  static auto* slot = new std::shared_ptr<const CheckpointTestHook>();
  return *slot;
}
Status RunHook(std::string_view point, int world_rank) {
  std::shared_ptr<const CheckpointTestHook> hook;
  {
    std::lock_guard<std::mutex> lock(HookMu());
    hook = HookSlot();
  }
  if (hook && *hook) return (*hook)(point, world_rank);
  return Status();
}

// A flock(2) on a file: blocking (the commit lock) or not (the save lock). Released on
// destruction; the kernel releases it when the process dies.
class FileLock {
 public:
  FileLock() = default;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock() { Release(); }

  // Blocking lock of `path`, created when `create`. Without `create`, a missing file is no lock
  // (OK, nothing held): loads never create files.
  Status Lock(const std::string& path, int op, bool create) {
    fd_ = ::open(path.c_str(), (create ? O_RDWR | O_CREAT : O_RDONLY) | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      if (!create && errno == ENOENT) return Status();
      return UnavailableError("cannot open the lock file " + path + ": " + Errno(errno));
    }
    while (::flock(fd_, op) != 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      Release();
      return UnavailableError("cannot lock " + path + ": " + Errno(err));
    }
    return Status();
  }
  void Release() {
    if (fd_ >= 0) ::close(fd_);  // releases the flock
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// ---------------------------------------------------------------------------------------------
// The save lock: an exclusive flock(2) on `<dir>.lock`, taken by rank 0 of a save for the whole
// save. The file holds the holder's identity ("host H pid P since T") while the lock is held and
// is emptied when it is released; it is never removed (removing a flock file races with a
// process that has just opened it). The kernel drops the lock when the holder's process dies, so
// a crashed save never leaves a held lock: a non-empty file without a holder is stale and
// ignored.

std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

std::string UtcNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

class SaveLock {
 public:
  SaveLock() = default;
  SaveLock(const SaveLock&) = delete;
  SaveLock& operator=(const SaveLock&) = delete;
  ~SaveLock() { Release(); }

  Status Acquire(const std::string& dir) {
    path_ = CheckpointLockPath(dir);
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) return UnavailableError("SaveCheckpoint: cannot open the lock file " + path_ + ": " + Errno(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      std::string holder;
      char buf[512];
      const ssize_t r = ::pread(fd_, buf, sizeof(buf), 0);
      if (r > 0) holder.assign(buf, static_cast<size_t>(r));
      while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
      ::close(fd_);
      fd_ = -1;
      if (err != EWOULDBLOCK) {
        return UnavailableError("SaveCheckpoint: cannot lock " + path_ + ": " + Errno(err));
      }
      return AbortedError("SaveCheckpoint: " + dir + " is being saved by another save: the lock " + path_ +
                          " is held by " + (holder.empty() ? std::string("a holder that has not written its name yet")
                                                           : holder) +
                          "; this save wrote nothing (retry when that save has finished)");
    }
    const std::string me = "host " + HostName() + " pid " + std::to_string(::getpid()) + " since " + UtcNow() + "\n";
    if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
      const int err = errno;
      Release();
      return UnavailableError("SaveCheckpoint: cannot write the lock file " + path_ + ": " + Errno(err));
    }
    return Status();
  }

  void Release() {
    if (fd_ < 0) return;
    if (::ftruncate(fd_, 0) != 0) {
      // Best effort: an unemptied file only shows a stale holder name, never a held lock.
    }
    ::close(fd_);  // releases the flock
    fd_ = -1;
  }

 private:
  std::string path_;
  int fd_ = -1;
};

// ---------------------------------------------------------------------------------------------
// Save.

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

CommitResult Commit(const std::string& dir, const std::string& tmp, const SaveOptions& options) {
  CommitResult out;
  if (options.crash_point == SaveCrashPoint::kBeforeRename) {
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
  if (options.crash_point == SaveCrashPoint::kBetweenRenames) {
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
  Status synced = options.fail_after_commit
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

}  // namespace

Status SaveCheckpoint(const std::string& dir_in, const std::vector<std::pair<std::string, const DTensor*>>& tensors,
                      RankContext& ctx, const SaveOptions& options) {
  // The metadata exchanges below use the world communicator directly: no communication may be
  // pending on the context's stream (runtime/rank_context.h).
  MF_RETURN_IF_ERROR(ctx.SyncComm());
  Communicator& comm = ctx.world();
  const std::string dir = StripSlashes(dir_in);
  const int n = comm.size();
  const int me = comm.rank();

  // 1. Inputs valid on every rank, and the same tensor list everywhere.
  Status local = ValidateSave(dir, tensors, ctx, options);
  MF_RETURN_IF_ERROR(AgreeStatus(comm, local));
  {
    const int64_t h = static_cast<int64_t>(DescribeHash(tensors));
    std::vector<int64_t> all(static_cast<size_t>(n));
    MF_RETURN_IF_ERROR(comm.AllGather(&h, all.data(), 1, DType::kI64));
    for (int r = 1; r < n; ++r) {
      if (all[r] != all[0]) {
        return FailedPreconditionError("SaveCheckpoint: rank " + std::to_string(comm.world_ranks()[r]) +
                                       " passes different tensors (names, dtypes or layouts) than rank " +
                                       std::to_string(comm.world_ranks()[0]));
      }
    }
  }

  // 2. Partial tensors are reduced: saved as the same placements with Partial -> Replicate.
  std::vector<DTensor> reduced;
  reduced.reserve(tensors.size());
  std::vector<DTensor> on_host;  // host copies of device tensors (the files are written from host memory)
  on_host.reserve(tensors.size());
  std::vector<PlannedTensor> plan(tensors.size());
  local = Status();
  for (size_t i = 0; i < tensors.size() && local.ok(); ++i) {
    const DTensor* x = tensors[i].second;
    if (x->layout().HasPartial()) {
      Placements ps = x->layout().placements();
      for (Placement& p : ps) {
        if (IsPartial(p)) p = Replicate{};
      }
      StatusOr<Layout> rl = x->layout().WithPlacements(ps, x->layout().shard_order());
      if (!rl.ok()) {
        local = rl.status();
        break;
      }
      StatusOr<DTensor> y = Redistribute(*x, *rl, ctx);
      if (!y.ok()) {
        local = y.status().WithContext("SaveCheckpoint: reducing Partial tensor '" + tensors[i].first + "'");
        break;
      }
      reduced.push_back(*std::move(y));
      x = &reduced.back();
    }
    if (!x->local().is_host()) {
      StatusOr<DTensor> h = OnHost(*x);
      if (!h.ok()) {
        local = h.status().WithContext("SaveCheckpoint: copying '" + tensors[i].first + "' to the host");
        break;
      }
      on_host.push_back(*std::move(h));
      x = &on_host.back();
    }
    plan[i].x = x;
    plan[i].chunks = PlanChunks(x->layout(), x->dtype(), comm.world_ranks());
  }
  MF_RETURN_IF_ERROR(AgreeStatus(comm, local));

  // Byte offsets: per file, chunks back to back in (tensor, chunk) order.
  std::vector<int64_t> file_sizes(static_cast<size_t>(n), 0);
  std::vector<int64_t> crc_counts(static_cast<size_t>(n), 0);
  for (PlannedTensor& t : plan) {
    for (PlannedChunk& c : t.chunks) {
      c.byte_offset = file_sizes[c.file];
      file_sizes[c.file] += c.byte_length;
      c.block_bytes = ChunkBlockBytes(c.byte_length, options.checksum_block_bytes);
      c.num_blocks = NumChecksumBlocks(c.byte_length, c.block_bytes);
      crc_counts[c.file] += c.num_blocks;
    }
  }

  // 3. Rank 0 takes the save lock (held until the end), removes stale temporary directories,
  // prepares the directories and picks the temporary name.
  SaveInfo info_local;
  SaveInfo& info = options.info != nullptr ? *options.info : info_local;
  info = SaveInfo{};
  SaveLock lock;
  int64_t id = 0;
  local = Status();
  if (me == 0) {
    id = static_cast<int64_t>(NewUniqueId());
    local = lock.Acquire(dir);
    if (local.ok()) {
      local = RunHook("save:locked", comm.world_rank());
      if (local.ok()) local = PrepareDirs(dir, dir + ".tmp-" + UniqueSuffix(static_cast<uint64_t>(id)), &info.stale_temp_dirs_removed);
    }
  }
  const bool made_tmp = me == 0 && local.ok();
  Status prep = comm.Broadcast(&id, 1, DType::kI64, 0);
  if (prep.ok()) prep = AgreeStatus(comm, local);
  const std::string tmp = dir + ".tmp-" + UniqueSuffix(static_cast<uint64_t>(id));
  if (!prep.ok()) {
    std::error_code ec;
    if (made_tmp) fs::remove_all(tmp, ec);
    return prep;
  }
  // From here on the temporary directory exists. A failed save removes it (rank 0, after every
  // rank has agreed on the failure, so nobody writes there any more), except when a crash is
  // being simulated: a crashed process cleans nothing, the next save does.
  const bool simulating_crash = options.fail_after_files >= 0 || options.crash_point != SaveCrashPoint::kNone;
  auto abandon = [&](Status st) {
    if (me == 0 && !simulating_crash) {
      std::error_code ec;
      fs::remove_all(tmp, ec);
    }
    return st;
  };

  // 4. Every rank writes its data file (its owned chunks) and fsyncs it.
  std::vector<uint32_t> my_crcs;
  int files_written = 0;
  auto injected = [&]() {
    return AbortedError("SaveCheckpoint: injected crash on rank " + std::to_string(comm.world_rank()) + " after " +
                        std::to_string(files_written) + " file(s) written to " + tmp);
  };
  local = Status();
  if (options.fail_after_files == 0) {
    local = injected();
  } else {
    // Each checksum block is checksummed right before it is written, while it is in cache.
    std::vector<std::span<const std::byte>> parts;
    for (const PlannedTensor& t : plan) {
      for (const PlannedChunk& c : t.chunks) {
        if (c.file != me) continue;
        const Tensor& lt = t.x->local();
        // The owner's local box is the chunk's box, so its buffer is the chunk, row-major.
        const std::span<const std::byte> bytes(lt.raw(), static_cast<size_t>(lt.NumBytes()));
        for (int64_t k = 0; k < c.num_blocks; ++k) {
          const int64_t b = k * c.block_bytes, e = std::min(c.byte_length, b + c.block_bytes);
          parts.push_back(bytes.subspan(static_cast<size_t>(b), static_cast<size_t>(e - b)));
        }
      }
    }
    my_crcs.reserve(parts.size());
    local = WriteFileSynced((fs::path(tmp) / DataFileName(me)).string(), parts, &my_crcs);
    if (local.ok()) ++files_written;
    if (local.ok() && options.fail_after_files == files_written) local = injected();
    if (local.ok()) local = RunHook("save:data-written", comm.world_rank());
  }
  // Also the barrier: every data file is synced.
  if (Status st = AgreeStatus(comm, local); !st.ok()) return abandon(st);

  // 5. Checksums to rank 0 (all-gather: the communicator has no gather).
  std::vector<int64_t> crc_total_prefix(static_cast<size_t>(n + 1), 0);
  for (int r = 0; r < n; ++r) crc_total_prefix[r + 1] = crc_total_prefix[r] + crc_counts[r];
  std::vector<uint32_t> all_crcs(static_cast<size_t>(crc_total_prefix[n]));
  if (Status st = comm.AllGatherV(my_crcs.data(), crc_counts[me], all_crcs.data(), crc_counts, DType::kI32); !st.ok()) {
    return abandon(st);
  }

  // 6. Rank 0 writes the metadata, syncs the directory and commits.
  local = Status();
  if (me == 0) {
    CheckpointMetadata md;
    md.checksum_block_bytes = options.checksum_block_bytes;
    md.file_sizes = file_sizes;
    md.extra_state = options.extra_state;
    std::vector<int64_t> next(crc_total_prefix.begin(), crc_total_prefix.end() - 1);
    for (size_t i = 0; i < plan.size(); ++i) {
      TensorRecord t;
      t.name = tensors[i].first;
      t.dtype = plan[i].x->dtype();
      t.shape = plan[i].x->global_shape();
      t.saved_layout = tensors[i].second->layout().ToString();
      for (const PlannedChunk& c : plan[i].chunks) {
        ChunkRecord cr;
        cr.box = c.box;
        cr.file = c.file;
        cr.byte_offset = c.byte_offset;
        cr.byte_length = c.byte_length;
        cr.block_bytes = c.block_bytes;
        cr.block_crcs.assign(all_crcs.begin() + next[c.file], all_crcs.begin() + next[c.file] + c.num_blocks);
        next[c.file] += c.num_blocks;
        t.chunks.push_back(std::move(cr));
      }
      md.tensors.push_back(std::move(t));
    }
    const std::string bytes = EncodeMetadata(md);
    const std::span<const std::byte> part = std::as_bytes(std::span<const char>(bytes.data(), bytes.size()));
    local = WriteFileSynced((fs::path(tmp) / kMetadataFileName).string(), std::span(&part, 1));
    if (local.ok()) ++files_written;
    if (local.ok() && options.fail_after_files == files_written) local = injected();
    if (local.ok()) local = FsyncPath(tmp, /*directory=*/true);
    if (local.ok()) {
      CommitResult c = Commit(dir, tmp, options);
      local = c.status;
      info.committed = c.committed;
      info.warning = std::move(c.warning);
      if (c.committed) {
        if (Status h = RunHook("save:committed", comm.world_rank()); !h.ok()) return h;  // simulated death
      }
    }
    if (!local.ok() && !simulating_crash) {
      std::error_code ec;
      fs::remove_all(tmp, ec);
    }
  }
  // 7. Every rank learns the outcome. Rank 0's status is OK exactly when it committed, so no rank
  // returns an error for a committed save and no rank returns OK for an uncommitted one.
  bool comm_failed = false;
  const Status agreed = AgreeStatus(comm, local, &comm_failed);
  if (me == 0) {
    lock.Release();
    if (info.committed) return Status();  // committed: nothing can make it fail any more
    return agreed.ok() ? local : agreed;
  }
  if (comm_failed) {
    // The agreement itself failed (a communication error, not a rank's reported failure): this
    // rank cannot know whether rank 0 committed.
    return Status(agreed.code(), "SaveCheckpoint: lost contact with rank 0 during the commit of " + dir +
                                     ": the save may or may not have committed (ReadCheckpointMetadata tells): " +
                                     agreed.message());
  }
  info.committed = agreed.ok();
  return agreed;
}

// ---------------------------------------------------------------------------------------------
// Load.

StatusOr<std::string> ResolveCheckpointDir(const std::string& dir_in) {
  const std::string dir = StripSlashes(dir_in);
  MF_ASSIGN_OR_RETURN(bool exists, PathExists(dir));
  if (exists) return dir;
  MF_ASSIGN_OR_RETURN(bool backup, PathExists(BackupDir(dir)));
  if (backup) return BackupDir(dir);
  return NotFoundError("no checkpoint at " + dir + " (nor a backup " + BackupDir(dir) + ")");
}

std::string CheckpointLockPath(const std::string& dir) { return StripSlashes(dir) + ".lock"; }
std::string CheckpointCommitLockPath(const std::string& dir) { return StripSlashes(dir) + ".commit-lock"; }

void SetCheckpointTestHook(CheckpointTestHook hook) {
  auto p = hook ? std::make_shared<const CheckpointTestHook>(std::move(hook)) : nullptr;
  std::lock_guard<std::mutex> lock(HookMu());
  HookSlot() = std::move(p);
}

namespace {

// A committed checkpoint directory held open: the directory descriptor pins it, so the metadata
// and every data file opened through it (openat) belong to one save even when a concurrent save
// renames or removes the path.
struct PinnedDir {
  PinnedDir() = default;
  PinnedDir(const PinnedDir&) = delete;
  PinnedDir& operator=(const PinnedDir&) = delete;
  PinnedDir(PinnedDir&& o) noexcept : path(std::move(o.path)), fd(std::exchange(o.fd, -1)), ino(o.ino), metadata(std::move(o.metadata)) {}
  PinnedDir& operator=(PinnedDir&& o) noexcept {
    if (this != &o) {
      Close();
      path = std::move(o.path);
      fd = std::exchange(o.fd, -1);
      ino = o.ino;
      metadata = std::move(o.metadata);
    }
    return *this;
  }
  ~PinnedDir() { Close(); }
  void Close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }

  std::string path;       // the path it was opened by (dir or <dir>.old)
  int fd = -1;
  uint64_t ino = 0;       // inode of the directory (identifies one save's directory)
  std::string metadata;   // the bytes of its metadata file
};

std::string MetadataPath(const std::string& dir) { return (fs::path(dir) / kMetadataFileName).string(); }

// Reads a whole regular file relative to `dirfd`. NotFound when it does not exist.
StatusOr<std::string> ReadFileAt(int dirfd, const char* name, const std::string& path) {
  const int fd = ::openat(dirfd, name, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFoundError("checkpoint metadata " + path + " is missing");
    return UnavailableError("cannot open " + path + ": " + Errno(errno));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return UnavailableError("cannot stat " + path + ": " + Errno(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return DataLossError("checkpoint metadata " + path + " is " +
                         (S_ISDIR(st.st_mode) ? "a directory" : "not a regular file"));
  }
  std::string out;
  char buf[1 << 16];
  while (true) {
    const ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return UnavailableError("read of " + path + " failed: " + Errno(err));
    }
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  return out;
}

// Opens `path` as a directory (no metadata read). NotFound when it does not exist.
StatusOr<PinnedDir> OpenDir(const std::string& path) {
  PinnedDir p;
  p.path = path;
  p.fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (p.fd < 0) {
    if (errno == ENOENT) return NotFoundError("no checkpoint at " + path);
    return UnavailableError("cannot open checkpoint directory " + path + ": " + Errno(errno));
  }
  struct stat st;
  if (::fstat(p.fd, &st) != 0) return UnavailableError("cannot stat checkpoint directory " + path + ": " + Errno(errno));
  p.ino = static_cast<uint64_t>(st.st_ino);
  return p;
}

// Resolves `dir` (dir, or <dir>.old after a crash between the commit renames), pins it and reads
// its metadata. A concurrent commit can move or remove the directory between the resolution and
// the reads: that is retried, so a checkpoint that was replaced is never reported missing.
StatusOr<PinnedDir> ResolveAndPin(const std::string& dir_in) {
  const std::string dir = StripSlashes(dir_in);
  Status last;
  for (int attempt = 0; attempt < 16; ++attempt) {
    MF_ASSIGN_OR_RETURN(std::string resolved, ResolveCheckpointDir(dir));
    StatusOr<PinnedDir> p = OpenDir(resolved);
    if (!p.ok()) {
      if (p.status().code() != StatusCode::kNotFound) return p.status();
      last = p.status();
      continue;  // moved away since the resolution
    }
    StatusOr<std::string> md = ReadFileAt(p->fd, std::string(kMetadataFileName).c_str(), MetadataPath(resolved));
    if (md.ok()) {
      p->metadata = *std::move(md);
      return p;
    }
    if (md.status().code() != StatusCode::kNotFound) return md.status();
    // The metadata is missing: for real when the pinned directory is still the one at `resolved`
    // (otherwise it is being removed after a newer save's commit: retry).
    struct stat st;
    if (::stat(resolved.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_ino) == p->ino) return md.status();
    last = md.status();
  }
  return last;
}

}  // namespace

StatusOr<CheckpointMetadata> ReadCheckpointMetadata(const std::string& dir) {
  MF_ASSIGN_OR_RETURN(PinnedDir p, ResolveAndPin(dir));
  return DecodeMetadata(p.metadata, MetadataPath(p.path));
}

StatusOr<std::string> LoadExtraState(const std::string& dir) {
  MF_ASSIGN_OR_RETURN(CheckpointMetadata md, ReadCheckpointMetadata(dir));
  return std::move(md.extra_state);
}

namespace {

// The data files of one pinned checkpoint directory, opened on first use through its descriptor.
class DataFiles {
 public:
  DataFiles(const PinnedDir& dir, const CheckpointMetadata& md, LoadStats& stats) : dir_(dir), md_(md), stats_(stats) {}
  ~DataFiles() {
    for (auto& [i, fd] : fds_) ::close(fd);
  }
  DataFiles(const DataFiles&) = delete;
  DataFiles& operator=(const DataFiles&) = delete;

  std::string Path(int file) const { return (fs::path(dir_.path) / DataFileName(file)).string(); }

  // The open descriptor of data file `file`, checked against its recorded size.
  StatusOr<int> Get(int file, const std::string& tensor) {
    auto it = fds_.find(file);
    if (it != fds_.end()) return it->second;
    const std::string path = Path(file);
    const int fd = ::openat(dir_.fd, DataFileName(file).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) {
        return NotFoundError("tensor '" + tensor + "': data file " + path + " is missing from the checkpoint");
      }
      return UnavailableError("tensor '" + tensor + "': cannot open data file " + path + ": " + Errno(errno));
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      return UnavailableError("tensor '" + tensor + "': cannot stat data file " + path + ": " + Errno(err));
    }
    if (!S_ISREG(st.st_mode)) {
      const bool is_dir = S_ISDIR(st.st_mode);
      ::close(fd);
      return DataLossError("tensor '" + tensor + "': data file " + path + " is " +
                           (is_dir ? "a directory" : "not a regular file") + ", not the file the metadata records");
    }
    if (static_cast<int64_t>(st.st_size) != md_.file_sizes[file]) {
      ::close(fd);
      return DataLossError("tensor '" + tensor + "': data file " + path + " has " + std::to_string(st.st_size) +
                           " bytes but the metadata records " + std::to_string(md_.file_sizes[file]) +
                           (static_cast<int64_t>(st.st_size) < md_.file_sizes[file] ? " (truncated)" : " (overwritten)"));
    }
    ++stats_.files_opened;
    fds_[file] = fd;
    return fd;
  }

 private:
  const PinnedDir& dir_;
  const CheckpointMetadata& md_;
  LoadStats& stats_;
  std::map<int, int> fds_;
};

// Bytes of file read per preadv: the pieces are checksummed right after they are read, while
// they are still in the L2 cache.
constexpr int64_t kPieceBytes = int64_t{256} << 10;
// Runs (needed bytes contiguous in both the chunk and the destination) at least this long are
// read straight into the destination; shorter ones are read into scratch and copied out.
constexpr int64_t kMinDirectRun = 2048;
// At most this many iovecs per preadv (IOV_MAX is 1024 on Linux).
constexpr size_t kMaxIov = 512;

// Per-load reusable buffers.
struct ReadScratch {
  std::unique_ptr<std::byte[]> buf;  // kPieceBytes, uninitialized
  std::vector<struct iovec> iov;
  struct Segment {
    int64_t pos;     // chunk-relative byte position
    int64_t len;
    std::byte* dst;  // where the bytes belong in the destination; nullptr: not needed
    std::byte* mem;  // where they were read to (dst, or the scratch buffer)
  };
  std::vector<Segment> segs;
  std::byte* Buf() {
    if (!buf) buf.reset(new std::byte[static_cast<size_t>(kPieceBytes)]);
    return buf.get();
  }
};

// preadv of all of `iov` at `offset`; returns the bytes read (short only at end of file).
StatusOr<int64_t> PreadvFull(int fd, std::vector<struct iovec>& iov, int64_t offset, const std::string& path) {
  int64_t got = 0;
  size_t first = 0;
  while (first < iov.size()) {
    const int cnt = static_cast<int>(std::min<size_t>(iov.size() - first, kMaxIov));
    const ssize_t r = ::preadv(fd, iov.data() + first, cnt, static_cast<off_t>(offset + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return UnavailableError("read of " + path + " failed: " + Errno(errno));
    }
    if (r == 0) break;
    got += r;
    size_t left = static_cast<size_t>(r);
    while (first < iov.size() && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (left > 0) {
      iov[first].iov_base = static_cast<std::byte*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return got;
}

// Verifies the checksum blocks of one chunk as its bytes stream by in file order.
class BlockVerifier {
 public:
  BlockVerifier(const TensorRecord& t, const ChunkRecord& c, int64_t block, int64_t first_block, const std::string& path)
      : t_(t), c_(c), block_(block), k_(first_block), end_(std::min(c.byte_length, (first_block + 1) * block)),
        path_(path) {}

  // `n` bytes at chunk position `pos` (the position right after the previous call's bytes).
  Status Feed(int64_t pos, const std::byte* p, int64_t n) {
    while (n > 0) {
      const int64_t m = std::min(n, end_ - pos);
      crc_ = Crc32cExtend(crc_, std::span<const std::byte>(p, static_cast<size_t>(m)));
      pos += m;
      p += m;
      n -= m;
      if (pos == end_) {
        if (crc_ != c_.block_crcs[static_cast<size_t>(k_)]) {
          return DataLossError("tensor '" + t_.name + "' chunk " + c_.box.ToString() + ": data file " + path_ +
                               " is corrupted: CRC-32C mismatch in checksum block " + std::to_string(k_) +
                               " (file bytes [" + std::to_string(c_.byte_offset + k_ * block_) + ", " +
                               std::to_string(c_.byte_offset + end_) + "))");
        }
        ++k_;
        end_ = std::min(c_.byte_length, (k_ + 1) * block_);
        crc_ = 0;
      }
    }
    return Status();
  }

 private:
  const TensorRecord& t_;
  const ChunkRecord& c_;
  const int64_t block_;
  int64_t k_;    // current checksum block
  int64_t end_;  // its end (chunk-relative)
  const std::string& path_;
  uint32_t crc_ = 0;
};

// The part `inter` (global coordinates, non-empty) of chunk `c` as a sequence of runs: byte
// ranges contiguous both in the chunk and in the destination `dst` (this rank's local tensor,
// whose global box is `dst_box`), in increasing order in both.
class Runs {
 public:
  Runs(const ChunkRecord& c, const Box& inter, const Box& dst_box, int64_t es, std::byte* dst) : dst_(dst) {
    const int nd = inter.rank();
    // The run covers dims k..nd-1: every dim after k is whole in the chunk and in dst.
    int k = nd - 1;
    run_elems_ = nd == 0 ? 1 : inter.shape[nd - 1];
    while (k > 0 && inter.shape[k] == c.box.shape[k] && inter.shape[k] == dst_box.shape[k]) {
      --k;
      run_elems_ *= inter.shape[k];
    }
    run_bytes_ = run_elems_ * es;
    const int outer = std::max(k, 0);
    extent_.assign(inter.shape.begin(), inter.shape.begin() + outer);
    idx_.assign(static_cast<size_t>(outer), 0);
    src_stride_.resize(static_cast<size_t>(outer));
    dst_stride_.resize(static_cast<size_t>(outer));
    int64_t ss = es, ds = es;
    for (int d = nd - 1; d >= 0; --d) {
      const int64_t lo = inter.offset[d] - c.box.offset[d], dlo = inter.offset[d] - dst_box.offset[d];
      src_ += lo * ss;
      dst_off_ += dlo * ds;
      if (d < outer) {
        src_stride_[d] = ss;
        dst_stride_[d] = ds;
        num_runs_ *= inter.shape[d];
      }
      ss *= c.box.shape[d];
      ds *= dst_box.shape[d];
    }
    first_ = src_;
    int64_t last = src_;
    for (int d = 0; d < outer; ++d) last += (extent_[d] - 1) * src_stride_[d];
    end_ = last + run_bytes_;
  }

  int64_t run_bytes() const { return run_bytes_; }
  int64_t num_runs() const { return num_runs_; }
  int64_t first() const { return first_; }  // chunk byte position of the first needed byte
  int64_t end() const { return end_; }      // one past the last needed byte
  bool done() const { return done_; }
  int64_t src() const { return src_; }  // the current run's chunk byte position
  std::byte* dst() const { return dst_ + dst_off_; }
  void Next() {
    for (int d = static_cast<int>(idx_.size()) - 1; d >= 0; --d) {
      src_ += src_stride_[d];
      dst_off_ += dst_stride_[d];
      if (++idx_[d] < extent_[d]) return;
      src_ -= extent_[d] * src_stride_[d];
      dst_off_ -= extent_[d] * dst_stride_[d];
      idx_[d] = 0;
    }
    done_ = true;
  }

 private:
  std::byte* dst_;
  int64_t run_elems_ = 1, run_bytes_ = 0, num_runs_ = 1;
  std::vector<int64_t> extent_, idx_, src_stride_, dst_stride_;
  int64_t src_ = 0, dst_off_ = 0, first_ = 0, end_ = 0;
  bool done_ = false;
};

// Gaps between needed checksum blocks at least this long are skipped (one more preadv); shorter
// ones are read through into scratch (a copy and a checksum cost less than a syscall).
constexpr int64_t kMinSkipBytes = 4096;

// The checksum blocks of chunk `c` that hold needed bytes, as ranges [first, end) of block indices
// in increasing order, with gaps shorter than kMinSkipBytes merged. `runs` is a copy (a cursor).
std::vector<std::pair<int64_t, int64_t>> NeededBlockRanges(Runs runs, int64_t block) {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (; !runs.done(); runs.Next()) {
    const int64_t b0 = runs.src() / block, b1 = (runs.src() + runs.run_bytes() + block - 1) / block;
    if (!ranges.empty() && (b0 - ranges.back().second) * block < kMinSkipBytes) {
      ranges.back().second = std::max(ranges.back().second, b1);
    } else {
      ranges.emplace_back(b0, b1);
    }
  }
  return ranges;
}

// Reads the part `inter` (global coordinates, non-empty) of chunk `c` into `dst` (this rank's
// local tensor, whose global box is `dst_box`). Only the checksum blocks (c.block_bytes) that hold
// needed bytes are read, each range of adjacent ones (NeededBlockRanges) in pieces of
// kPieceBytes: each piece is one preadv that puts long runs of needed bytes straight into dst and
// everything else (block heads and tails, unneeded row parts, short runs) into a scratch buffer,
// and is checksummed right after the read; short runs are then copied out of scratch. Every
// checksum block read is verified; on a mismatch dst holds garbage and the caller drops it.
Status ReadChunkPart(const TensorRecord& t, const ChunkRecord& c, const Box& inter, const Box& dst_box, DataFiles& files,
                     Tensor& dst, LoadStats& stats, ReadScratch& scratch) {
  const int64_t es = DTypeSize(t.dtype);
  const int64_t block = c.block_bytes;
  Runs runs(c, inter, dst_box, es, dst.raw());
  MF_ASSIGN_OR_RETURN(int fd, files.Get(c.file, t.name));
  const std::string path = files.Path(c.file);
  // Runs shorter than kMinDirectRun would cost an iovec each for a few bytes: read them into
  // scratch with the rest and copy them out (memcpy of whole runs).
  const bool direct = runs.run_bytes() >= kMinDirectRun || runs.num_runs() == 1;
  std::byte* const buf = scratch.Buf();
  int64_t in_run = 0;  // bytes of the current run already placed
  for (const auto& [k0, k1] : NeededBlockRanges(runs, block)) {
    const int64_t rd_begin = k0 * block, rd_end = std::min(c.byte_length, k1 * block);
    BlockVerifier verify(t, c, block, k0, path);
    int64_t pos = rd_begin;
    while (pos < rd_end) {
      const int64_t piece_begin = pos, piece_limit = std::min(rd_end, pos + kPieceBytes);
      scratch.segs.clear();
      scratch.iov.clear();
      int64_t used = 0;  // of the scratch buffer
      while (pos < piece_limit && scratch.iov.size() < kMaxIov) {
        ReadScratch::Segment seg{pos, 0, nullptr, nullptr};
        if (!runs.done() && pos >= runs.src()) {
          seg.len = std::min(runs.run_bytes() - in_run, piece_limit - pos);
          seg.dst = runs.dst() + in_run;
          in_run += seg.len;
          if (in_run == runs.run_bytes()) {
            runs.Next();
            in_run = 0;
          }
        } else {
          seg.len = std::min(runs.done() ? rd_end : runs.src(), piece_limit) - pos;
        }
        seg.mem = direct && seg.dst != nullptr ? seg.dst : buf + used;
        if (seg.mem != seg.dst || !direct) used += seg.len;
        pos += seg.len;
        if (direct) {
          // Adjacent scratch segments extend the previous iovec.
          if (!scratch.iov.empty() &&
              static_cast<std::byte*>(scratch.iov.back().iov_base) + scratch.iov.back().iov_len == seg.mem) {
            scratch.iov.back().iov_len += static_cast<size_t>(seg.len);
          } else {
            scratch.iov.push_back({seg.mem, static_cast<size_t>(seg.len)});
          }
        }
        scratch.segs.push_back(seg);
      }
      if (!direct) scratch.iov.push_back({buf, static_cast<size_t>(pos - piece_begin)});
      MF_ASSIGN_OR_RETURN(int64_t got, PreadvFull(fd, scratch.iov, c.byte_offset + piece_begin, path));
      stats.bytes_read += got;
      if (got != pos - piece_begin) {
        return DataLossError("tensor '" + t.name + "' chunk " + c.box.ToString() + ": data file " + path +
                             " is truncated: read " + std::to_string(piece_begin - rd_begin + got) + " of " +
                             std::to_string(rd_end - rd_begin) + " bytes at offset " +
                             std::to_string(c.byte_offset + rd_begin));
      }
      if (direct) {
        for (const ReadScratch::Segment& seg : scratch.segs) MF_RETURN_IF_ERROR(verify.Feed(seg.pos, seg.mem, seg.len));
      } else {
        MF_RETURN_IF_ERROR(verify.Feed(piece_begin, buf, pos - piece_begin));
        for (const ReadScratch::Segment& seg : scratch.segs) {
          if (seg.dst != nullptr) std::memcpy(seg.dst, seg.mem, static_cast<size_t>(seg.len));
        }
      }
    }
  }
  ++stats.chunks_read;
  return Status();
}

std::string NamesList(const CheckpointMetadata& md) {
  std::string s;
  for (size_t i = 0; i < md.tensors.size() && i < 20; ++i) s += (i ? ", " : "") + md.tensors[i].name;
  if (md.tensors.size() > 20) s += ", ...";
  return s;
}

// One request of a load, checked against the pinned metadata.
struct PreparedRequest {
  const TensorRecord* t = nullptr;
  Box box;
  bool zeros = false;  // Replicate -> Partial(sum) off group coordinate 0: reads nothing
};

// Checks the requests against `md` and opens (through the pinned directory) every data file this
// rank will read, so that the reads need no path lookup any more.
Status PrepareLoad(const std::vector<LoadRequest>& requests, RankContext& ctx, const CheckpointMetadata& md,
                   const std::string& md_path, DataFiles& files, std::vector<PreparedRequest>& prepared) {
  const int me = ctx.world_rank();
  for (const LoadRequest& req : requests) {
    PreparedRequest pr;
    pr.t = md.Find(req.name);
    if (pr.t == nullptr) {
      return NotFoundError("tensor '" + req.name + "' is not in checkpoint " + md_path + " (it holds: " + NamesList(md) +
                           ")");
    }
    const TensorRecord& t = *pr.t;
    if (!(req.layout.mesh() == ctx.mesh())) {
      return InvalidArgumentError("tensor '" + req.name + "': target layout is on " + req.layout.mesh().ToString() +
                                  " but the communicators are for " + ctx.mesh().ToString());
    }
    if (req.layout.global_shape() != t.shape) {
      return InvalidArgumentError("tensor '" + req.name + "' has shape " + ListString(t.shape) + " in checkpoint " +
                                  md_path + " but the target layout has shape " + ListString(req.layout.global_shape()));
    }
    if (req.dtype.has_value() && *req.dtype != t.dtype) {
      return InvalidArgumentError("tensor '" + req.name + "' has dtype " + std::string(DTypeName(t.dtype)) +
                                  " in checkpoint " + md_path + " but " + std::string(DTypeName(*req.dtype)) +
                                  " was requested");
    }
    MF_ASSIGN_OR_RETURN(pr.box, req.layout.LocalBox(me));
    if (req.layout.partial_op() == ReduceOp::kSum) {
      MF_ASSIGN_OR_RETURN(std::vector<int64_t> coord, req.layout.mesh().Coordinate(me));
      for (int m = 0; m < req.layout.mesh().ndim(); ++m) {
        pr.zeros = pr.zeros || (IsPartial(req.layout.placement(m)) && coord[m] != 0);
      }
    }
    if (!pr.zeros && !pr.box.empty()) {
      for (const ChunkRecord& c : t.chunks) {
        if (!Intersect(c.box, pr.box).empty()) MF_RETURN_IF_ERROR(files.Get(c.file, t.name).status());
      }
    }
    prepared.push_back(std::move(pr));
  }
  return Status();
}

// Reads this rank's part of every prepared request.
Status ReadPrepared(const std::vector<LoadRequest>& requests, const std::vector<PreparedRequest>& prepared,
                    RankContext& ctx, const CheckpointMetadata& md, const std::string& md_path, DataFiles& files,
                    std::vector<DTensor>& out, LoadStats& stats) {
  ReadScratch scratch;
  const int me = ctx.world_rank();
  for (size_t i = 0; i < requests.size(); ++i) {
    const PreparedRequest& pr = prepared[i];
    const TensorRecord& t = *pr.t;
    const Box& box = pr.box;
    // The chunks partition the tensor (DecodeMetadata checks it), so the reads below write every
    // byte of the box: no zero-fill.
    Tensor local =
        pr.zeros || box.empty() ? Tensor::Zeros(t.dtype, box.shape) : Tensor::Uninitialized(t.dtype, box.shape);
    if (!pr.zeros && !box.empty()) {
      int64_t covered = 0;
      for (const ChunkRecord& c : t.chunks) {
        const Box inter = Intersect(c.box, box);
        if (inter.empty()) continue;
        MF_RETURN_IF_ERROR(ReadChunkPart(t, c, inter, box, files, local, stats, scratch));
        covered += inter.NumElements();
      }
      if (covered != box.NumElements()) {
        return InternalError("tensor '" + requests[i].name + "': the chunks of " + md_path + " cover " +
                             std::to_string(covered) + " of the " + std::to_string(box.NumElements()) +
                             " elements of box " + box.ToString());
      }
    }
    MF_ASSIGN_OR_RETURN(DTensor x, DTensor::FromLocal(std::move(local), requests[i].layout, me));
    out.push_back(std::move(x));
  }
  return Status();
}

// Marks the (retried) failure of a rank that opened another checkpoint than rank 0.
constexpr std::string_view kPinMismatch = "opened another checkpoint than rank 0";

// One attempt of a load (see "Concurrency" in checkpoint.h). Every return is agreed by all ranks.
Status LoadAttempt(const std::string& dir, const std::vector<LoadRequest>& requests, RankContext& ctx,
                   std::vector<DTensor>& out, LoadStats& stats) {
  MF_RETURN_IF_ERROR(ctx.SyncComm());  // the world communicator is used directly below
  Communicator& comm = ctx.world();
  const int me = comm.rank();
  // 1. Rank 0 pins the checkpoint under the shared commit lock and broadcasts its metadata.
  FileLock commit_lock;
  StatusOr<PinnedDir> pinned = NotFoundError("not pinned");
  Status local;
  if (me == 0) {
    local = commit_lock.Lock(CheckpointCommitLockPath(dir), LOCK_SH, /*create=*/false);
    if (local.ok()) {
      pinned = ResolveAndPin(dir);
      local = pinned.status();
    }
    if (local.ok()) local = RunHook("load:pinned", comm.world_rank());
  }
  int64_t md_size = me == 0 && local.ok() ? static_cast<int64_t>(pinned->metadata.size()) : -1;
  MF_RETURN_IF_ERROR(comm.Broadcast(&md_size, 1, DType::kI64, 0));
  if (md_size < 0) return AgreeStatus(comm, local);  // rank 0's error, on every rank
  std::vector<int64_t> words(static_cast<size_t>((md_size + 7) / 8), 0);
  if (me == 0 && md_size > 0) std::memcpy(words.data(), pinned->metadata.data(), static_cast<size_t>(md_size));
  if (!words.empty()) {
    MF_RETURN_IF_ERROR(comm.Broadcast(words.data(), static_cast<int64_t>(words.size()), DType::kI64, 0));
  }
  const std::string_view md_bytes(reinterpret_cast<const char*>(words.data()), static_cast<size_t>(md_size));

  // 2. Every other rank pins the same checkpoint: its metadata must be byte-identical.
  if (me != 0) {
    pinned = ResolveAndPin(dir);
    local = pinned.status();
    if (local.ok() && pinned->metadata != md_bytes) {
      local = AbortedError("load of checkpoint " + StripSlashes(dir) + ": this rank " + std::string(kPinMismatch) +
                           " (" + pinned->path + " was replaced between their opens; its metadata has " +
                           std::to_string(pinned->metadata.size()) + " bytes, rank 0's " + std::to_string(md_size) +
                           ")");
    }
  }

  // 3. Every rank checks its requests and opens the data files it needs; then rank 0 unpins.
  std::optional<CheckpointMetadata> md;
  std::optional<DataFiles> files;
  std::vector<PreparedRequest> prepared;
  std::string md_path;
  if (local.ok()) {
    md_path = MetadataPath(pinned->path);
    StatusOr<CheckpointMetadata> decoded = DecodeMetadata(pinned->metadata, md_path);
    local = decoded.status();
    if (local.ok()) {
      md = *std::move(decoded);
      files.emplace(*pinned, *md, stats);
      local = PrepareLoad(requests, ctx, *md, md_path, *files, prepared);
    }
  }
  const Status opened = AgreeStatus(comm, local);  // also the barrier: every rank holds its files
  commit_lock.Release();
  MF_RETURN_IF_ERROR(opened);

  // 4. The reads, from the open files only.
  return AgreeStatus(comm, ReadPrepared(requests, prepared, ctx, *md, md_path, *files, out, stats));
}

}  // namespace

StatusOr<std::vector<DTensor>> LoadTensors(const std::string& dir, const std::vector<LoadRequest>& requests,
                                           RankContext& ctx, LoadStats* stats) {
  LoadStats local_stats;
  for (int attempt = 1;; ++attempt) {
    std::vector<DTensor> out;
    const Status st = LoadAttempt(dir, requests, ctx, out, stats != nullptr ? *stats : local_stats);
    if (st.ok()) {
      for (DTensor& t : out) {
        MF_ASSIGN_OR_RETURN(t, OnRankDevice(std::move(t), ctx));  // read on the host
      }
      return out;
    }
    const bool mismatch = st.code() == StatusCode::kAborted && st.message().find(kPinMismatch) != std::string::npos;
    if (!mismatch) return st;
    if (attempt == kLoadPinAttempts) {
      return st.WithContext("LoadTensors: the ranks opened different checkpoints in each of " +
                            std::to_string(kLoadPinAttempts) + " attempts (is " + CheckpointCommitLockPath(dir) +
                            " locked by every host?)");
    }
  }
}

StatusOr<DTensor> LoadTensor(const std::string& dir, const std::string& name, const Layout& target, RankContext& ctx,
                             std::optional<DType> dtype) {
  MF_ASSIGN_OR_RETURN(std::vector<DTensor> v, LoadTensors(dir, {LoadRequest{name, target, dtype}}, ctx));
  return std::move(v.front());
}

}  // namespace meshflow
