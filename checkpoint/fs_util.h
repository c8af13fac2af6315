// Internal to checkpoint/: the POSIX file helpers of the save and load protocols (whole-file
// writes with fsync, existence checks that never mistake an I/O error for "missing"), the flock(2)
// locks (the save lock `<dir>.lock`, the commit lock `<dir>.commit-lock`) and the pinning of one
// committed checkpoint directory by an open descriptor. Every error names the path.
#ifndef MESHFLOW_CHECKPOINT_FS_UTIL_H_
#define MESHFLOW_CHECKPOINT_FS_UTIL_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "meshflow/base/status.h"

namespace meshflow::checkpoint_internal {

// strerror(err).
std::string Errno(int err);
// `dir` without trailing slashes ("/" stays).
std::string StripSlashes(std::string dir);
// `<dir>.old`: where the previous checkpoint sits between the two commit renames.
std::string BackupDir(const std::string& dir);
// `<dir>/<kMetadataFileName>`.
std::string MetadataPath(const std::string& dir);
// `<dir>.lock` and `<dir>.commit-lock` (dir without trailing slashes).
std::string SaveLockPath(const std::string& dir);
std::string CommitLockPath(const std::string& dir);

// fsync of a file or (directory = true) a directory.
Status FsyncPath(const std::string& path, bool directory);
// Writes a whole new file (O_EXCL) and fsyncs it; appends the CRC-32C of each part to `crcs` when
// given (computed just before the part is written). Parts adjacent in memory are written together.
Status WriteFileSynced(const std::string& path, std::span<const std::span<const std::byte>> parts,
                       std::vector<uint32_t>* crcs = nullptr);
// Whether `path` exists. Only ENOENT means "no"; any other stat failure (EIO, ENOTDIR, ELOOP,
// EACCES, ...) is an error naming the path and the errno text, never a false "does not exist".
StatusOr<bool> PathExists(const std::string& path);
// `dir`, or `<dir>.old` after a crash between the commit renames; NotFound when neither exists.
StatusOr<std::string> ResolveDir(const std::string& dir);

// A flock(2) on a file: blocking (the commit lock). Released on destruction; the kernel releases
// it when the process dies.
class FileLock {
 public:
  FileLock() = default;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock() { Release(); }

  // Blocking lock (`op`: LOCK_SH or LOCK_EX) of `path`, created when `create`. Without `create`, a
  // missing file is no lock (OK, nothing held): loads never create files.
  Status Lock(const std::string& path, int op, bool create);
  void Release();

 private:
  int fd_ = -1;
};

// The save lock: an exclusive, non-blocking flock(2) on `<dir>.lock`, taken by rank 0 of a save
// for the whole save. The file holds the holder's identity ("host H pid P since T") while the
// lock is held and is emptied when it is released; it is never removed (removing a flock file
// races with a process that has just opened it). The kernel drops the lock when the holder's
// process dies, so a crashed save never leaves a held lock: a non-empty file without a holder is
// stale and ignored.
class SaveLock {
 public:
  SaveLock() = default;
  SaveLock(const SaveLock&) = delete;
  SaveLock& operator=(const SaveLock&) = delete;
  ~SaveLock() { Release(); }

  // Aborted (naming the holder) when another save holds it.
  Status Acquire(const std::string& dir);
  void Release();

 private:
  std::string path_;
  int fd_ = -1;
};

// A committed checkpoint directory held open: the directory descriptor pins it, so the metadata
// and every data file opened through it (openat) belong to one save even when a concurrent save
// renames or removes the path.
struct PinnedDir {
  PinnedDir() = default;
  PinnedDir(const PinnedDir&) = delete;
  PinnedDir& operator=(const PinnedDir&) = delete;
  PinnedDir(PinnedDir&& o) noexcept;
  PinnedDir& operator=(PinnedDir&& o) noexcept;
  ~PinnedDir() { Close(); }
  void Close();

  std::string path;       // the path it was opened by (dir or <dir>.old)
  int fd = -1;
  uint64_t ino = 0;       // inode of the directory (identifies one save's directory)
  std::string metadata;   // the bytes of its metadata file
};

// Resolves `dir` (ResolveDir), pins it and reads its metadata. A concurrent commit can move or
// remove the directory between the resolution and the reads: that is retried, so a checkpoint
// that was replaced is never reported missing.
StatusOr<PinnedDir> ResolveAndPin(const std::string& dir);

}  // namespace meshflow::checkpoint_internal

#endif  // MESHFLOW_CHECKPOINT_FS_UTIL_H_
