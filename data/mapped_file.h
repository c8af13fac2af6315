// MappedFile: a read-only memory map of a whole file (POSIX mmap), closed on destruction.
//
// Internal to data/ (used by record_shards and token_file). An empty file maps to an empty span.
// WriteFileParts is the matching writer (stdio, every call checked).
//
//   MF_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> f, MappedFile::Open("train.bin"));
//   std::span<const std::byte> bytes = f->bytes();
#ifndef MESHFLOW_DATA_MAPPED_FILE_H_
#define MESHFLOW_DATA_MAPPED_FILE_H_

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "meshflow/base/status.h"

namespace meshflow {

class MappedFile {
 public:
  // Errors: NOT_FOUND when the file cannot be opened, UNAVAILABLE when mmap fails; both name
  // the path and the OS error.
  static StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }

 private:
  MappedFile() = default;
  std::string path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

// Writes the concatenation of `parts` to `path` (created or truncated). Errors name the path.
Status WriteFileParts(const std::string& path, std::span<const std::span<const std::byte>> parts);

}  // namespace meshflow

#endif  // MESHFLOW_DATA_MAPPED_FILE_H_
