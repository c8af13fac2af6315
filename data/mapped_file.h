// RandomAccessFile: a read-only file read with pread, closed on destruction; and WriteFileParts.
//
// Internal to data/ (used by record_shards and token_file). The datasets used to memory-map
// their files; a file truncated by another process after open then killed the reader with
// SIGBUS on the first touch of a vanished page. pread instead returns a short count, which
// ReadAt reports as DATA_LOSS naming the file, the range and the size at open.
// WriteFileParts is the matching writer (stdio, every call checked; written to a temporary
// name and renamed into place, so a reader never sees a half-written file).
//
//   MF_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> f, RandomAccessFile::Open("train.bin"));
//   std::vector<std::byte> head(64);
//   MF_RETURN_IF_ERROR(f->ReadAt(0, head));   // DATA_LOSS if the file is shorter than 64 bytes
#ifndef MESHFLOW_DATA_MAPPED_FILE_H_
#define MESHFLOW_DATA_MAPPED_FILE_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "meshflow/base/status.h"

namespace meshflow {

class RandomAccessFile {
 public:
  // Errors: NOT_FOUND when the file (or a directory on its path) does not exist, UNAVAILABLE when
  // open fails otherwise (EACCES, ELOOP, EIO, ...) or stat fails, INVALID_ARGUMENT for a directory
  // or other non-regular file; all name the path and the errno text.
  static StatusOr<std::unique_ptr<RandomAccessFile>> Open(const std::string& path);
  ~RandomAccessFile();
  RandomAccessFile(const RandomAccessFile&) = delete;
  RandomAccessFile& operator=(const RandomAccessFile&) = delete;

  const std::string& path() const { return path_; }
  // The size at open.
  uint64_t size() const { return size_; }
  // Reads exactly dst.size() bytes at `offset`. Errors: DATA_LOSS when the file ends before
  // offset + dst.size() (it was truncated after open, or the range is past the size at open);
  // UNAVAILABLE for an I/O error. Thread-safe.
  Status ReadAt(uint64_t offset, std::span<std::byte> dst) const;
  // CRC-32C of the bytes [offset, offset + length), read in 1 MiB chunks.
  StatusOr<uint32_t> Crc32cOf(uint64_t offset, uint64_t length) const;

 private:
  RandomAccessFile() = default;
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Writes the concatenation of `parts` to `path` (via "<path>.tmp" and a rename). Errors name the
// path.
Status WriteFileParts(const std::string& path, std::span<const std::span<const std::byte>> parts);

}  // namespace meshflow

#endif  // MESHFLOW_DATA_MAPPED_FILE_H_
