#include "meshflow/data/mapped_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "meshflow/base/checksum.h"

namespace meshflow {

StatusOr<std::unique_ptr<RandomAccessFile>> RandomAccessFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    // Only a missing file is NOT_FOUND; EACCES, ELOOP, EIO, ... keep their own errno text.
    const int err = errno;
    const std::string msg = "cannot open file '" + path + "': " + std::strerror(err);
    return err == ENOENT || err == ENOTDIR ? NotFoundError(msg) : UnavailableError(msg);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return UnavailableError("cannot stat file '" + path + "': " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgumentError("'" + path + "' is not a regular file");
  }
  auto file = std::unique_ptr<RandomAccessFile>(new RandomAccessFile());
  file->path_ = path;
  file->fd_ = fd;
  file->size_ = static_cast<uint64_t>(st.st_size);
  return file;
}

RandomAccessFile::~RandomAccessFile() {
  if (fd_ >= 0) ::close(fd_);
}

Status RandomAccessFile::ReadAt(uint64_t offset, std::span<std::byte> dst) const {
  size_t done = 0;
  while (done < dst.size()) {
    const ssize_t got = ::pread(fd_, dst.data() + done, dst.size() - done, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return UnavailableError("read of " + std::to_string(dst.size()) + " bytes at offset " + std::to_string(offset) +
                              " from '" + path_ + "' failed: " + std::strerror(errno));
    }
    if (got == 0) {
      // The end is the file's size now, not where this read stopped (a read can start past it).
      struct stat st {};
      const std::string now = ::fstat(fd_, &st) == 0 ? std::to_string(st.st_size) : "an unknown number of";
      return DataLossError("file '" + path_ + "' ended before byte " + std::to_string(offset + done) +
                           " while reading bytes [" + std::to_string(offset) + ", " +
                           std::to_string(offset + dst.size()) + "): it had " + std::to_string(size_) +
                           " bytes at open and has " + now + " bytes now (truncated after open?)");
    }
    done += static_cast<size_t>(got);
  }
  return Status::Ok();
}

StatusOr<uint32_t> RandomAccessFile::Crc32cOf(uint64_t offset, uint64_t length) const {
  std::vector<std::byte> buf(static_cast<size_t>(std::min<uint64_t>(length, uint64_t{1} << 20)));
  uint32_t crc = 0;
  for (uint64_t pos = 0; pos < length;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), length - pos));
    MF_RETURN_IF_ERROR(ReadAt(offset + pos, std::span<std::byte>(buf.data(), n)));
    crc = Crc32cExtend(crc, std::span<const std::byte>(buf.data(), n));
    pos += n;
  }
  return crc;
}

Status WriteFileParts(const std::string& path, std::span<const std::span<const std::byte>> parts) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return UnavailableError("cannot create file '" + tmp + "': " + std::strerror(errno));
  for (std::span<const std::byte> part : parts) {
    if (part.empty()) continue;
    if (std::fwrite(part.data(), 1, part.size(), f) != part.size()) {
      const int err = errno;
      std::fclose(f);
      std::remove(tmp.c_str());
      return UnavailableError("write to '" + tmp + "' failed: " + std::strerror(err));
    }
  }
  if (std::fclose(f) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return UnavailableError("closing '" + tmp + "' failed: " + std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return UnavailableError("renaming '" + tmp + "' to '" + path + "' failed: " + std::strerror(err));
  }
  return Status::Ok();
}

}  // namespace meshflow
