#include "meshflow/data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace meshflow {

StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFoundError("cannot open file '" + path + "': " + std::strerror(errno));
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
  auto file = std::unique_ptr<MappedFile>(new MappedFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ > 0) {
    void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return UnavailableError("cannot mmap file '" + path + "': " + std::strerror(err));
    }
    file->data_ = static_cast<const std::byte*>(p);
  }
  ::close(fd);  // the mapping stays valid
  return file;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
}

Status WriteFileParts(const std::string& path, std::span<const std::span<const std::byte>> parts) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return UnavailableError("cannot create file '" + path + "': " + std::strerror(errno));
  for (std::span<const std::byte> part : parts) {
    if (part.empty()) continue;
    if (std::fwrite(part.data(), 1, part.size(), f) != part.size()) {
      const int err = errno;
      std::fclose(f);
      return UnavailableError("write to '" + path + "' failed: " + std::strerror(err));
    }
  }
  if (std::fclose(f) != 0) return UnavailableError("closing '" + path + "' failed: " + std::strerror(errno));
  return Status::Ok();
}

}  // namespace meshflow
