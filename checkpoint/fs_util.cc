// Internal to checkpoint/: POSIX I/O helpers, the save and commit locks (flock(2)) and the
// pinning of a committed checkpoint directory (fs_util.h).
#include "meshflow/checkpoint/fs_util.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <utility>

#include "meshflow/base/checksum.h"
#include "meshflow/checkpoint/format.h"

namespace meshflow::checkpoint_internal {
namespace {

namespace fs = std::filesystem;

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

// Parts adjacent in memory (the checksum blocks of one chunk) are written together, up to
// kWriteBytes per write.
constexpr int64_t kWriteBytes = int64_t{1} << 20;

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
}  // namespace

std::string Errno(int err) { return std::strerror(err); }

std::string StripSlashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

std::string BackupDir(const std::string& dir) { return dir + ".old"; }

std::string MetadataPath(const std::string& dir) { return (fs::path(dir) / kMetadataFileName).string(); }

std::string SaveLockPath(const std::string& dir) { return StripSlashes(dir) + ".lock"; }
std::string CommitLockPath(const std::string& dir) { return StripSlashes(dir) + ".commit-lock"; }

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

Status WriteFileSynced(const std::string& path, std::span<const std::span<const std::byte>> parts,
                       std::vector<uint32_t>* crcs) {
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

StatusOr<std::string> ResolveDir(const std::string& dir_in) {
  const std::string dir = StripSlashes(dir_in);
  MF_ASSIGN_OR_RETURN(bool exists, PathExists(dir));
  if (exists) return dir;
  MF_ASSIGN_OR_RETURN(bool backup, PathExists(BackupDir(dir)));
  if (backup) return BackupDir(dir);
  return NotFoundError("no checkpoint at " + dir + " (nor a backup " + BackupDir(dir) + ")");
}

Status FileLock::Lock(const std::string& path, int op, bool create) {
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

void FileLock::Release() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
  fd_ = -1;
}

Status SaveLock::Acquire(const std::string& dir) {
  path_ = SaveLockPath(dir);
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

void SaveLock::Release() {
  if (fd_ < 0) return;
  if (::ftruncate(fd_, 0) != 0) {
    // Best effort: an unemptied file only shows a stale holder name, never a held lock.
  }
  ::close(fd_);  // releases the flock
  fd_ = -1;
}

PinnedDir::PinnedDir(PinnedDir&& o) noexcept
    : path(std::move(o.path)), fd(std::exchange(o.fd, -1)), ino(o.ino), metadata(std::move(o.metadata)) {}

PinnedDir& PinnedDir::operator=(PinnedDir&& o) noexcept {
  if (this != &o) {
    Close();
    path = std::move(o.path);
    fd = std::exchange(o.fd, -1);
    ino = o.ino;
    metadata = std::move(o.metadata);
  }
  return *this;
}

void PinnedDir::Close() {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

StatusOr<PinnedDir> ResolveAndPin(const std::string& dir_in) {
  const std::string dir = StripSlashes(dir_in);
  Status last;
  for (int attempt = 0; attempt < 16; ++attempt) {
    MF_ASSIGN_OR_RETURN(std::string resolved, ResolveDir(dir));
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


}  // namespace meshflow::checkpoint_internal
