#include "meshflow/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <set>

#include "meshflow/base/checksum.h"
#include "meshflow/collectives/dtensor_api.h"

namespace meshflow {
namespace {

static_assert(std::endian::native == std::endian::little,
              "checkpoint data files are little-endian; big-endian hosts need byte swaps");

namespace fs = std::filesystem;

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

std::string Errno(int err) { return std::strerror(err); }

std::string StripSlashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

std::string BackupDir(const std::string& dir) { return dir + ".old"; }

// ---------------------------------------------------------------------------------------------
// Agreement: every rank learns whether any rank failed, and returns the first failure.

Status AgreeStatus(Communicator& comm, const Status& local) {
  const int n = comm.size();
  const int64_t mine[2] = {static_cast<int64_t>(local.code()), static_cast<int64_t>(local.message().size())};
  std::vector<int64_t> info(static_cast<size_t>(2 * n));
  Status s = comm.AllGather(mine, info.data(), 2, DType::kI64);
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
// given (computed just before the part is written).
Status WriteFileSynced(const std::string& path, std::span<const std::span<const std::byte>> parts,
                       std::vector<uint32_t>* crcs = nullptr) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return UnavailableError("cannot create " + path + ": " + Errno(errno));
  Status s;
  for (std::span<const std::byte> p : parts) {
    if (crcs != nullptr) crcs->push_back(Crc32c(p));
    s = WriteAll(fd, p.data(), static_cast<int64_t>(p.size()), path);
    if (!s.ok()) break;
  }
  if (s.ok() && ::fsync(fd) != 0) s = UnavailableError("fsync of " + path + " failed: " + Errno(errno));
  if (::close(fd) != 0 && s.ok()) s = UnavailableError("close of " + path + " failed: " + Errno(errno));
  return s;
}

StatusOr<std::string> ReadWholeFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFoundError("checkpoint metadata " + path + " is missing");
    return UnavailableError("cannot open " + path + ": " + Errno(errno));
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

bool Exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

// ---------------------------------------------------------------------------------------------
// Save.

struct PlannedChunk {
  Box box;
  int owner_world_rank = 0;
  int file = 0;  // communicator index of the owner
  int64_t byte_offset = 0;
  int64_t byte_length = 0;
  int64_t num_blocks = 0;
};

struct PlannedTensor {
  const DTensor* x = nullptr;  // the (reduced) tensor this rank holds
  std::vector<PlannedChunk> chunks;
};

Status ValidateSave(const std::string& dir, const std::vector<std::pair<std::string, const DTensor*>>& tensors,
                    MeshComms& comms, const SaveOptions& options) {
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
    if (!(x->layout().mesh() == comms.mesh())) {
      return InvalidArgumentError("SaveCheckpoint: tensor '" + name + "' is on " + x->layout().mesh().ToString() +
                                  " but the communicators are for " + comms.mesh().ToString());
    }
    if (x->rank() != comms.world_rank()) {
      return InvalidArgumentError("SaveCheckpoint: tensor '" + name + "' belongs to rank " + std::to_string(x->rank()) +
                                  " but is saved by rank " + std::to_string(comms.world_rank()));
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

// Rank 0: recovers from a crash between the commit renames, checks `dir`, creates the temp dir.
Status PrepareDirs(const std::string& dir, const std::string& tmp) {
  const fs::path parent = fs::path(dir).parent_path();
  if (!parent.empty() && !Exists(parent.string())) {
    return NotFoundError("SaveCheckpoint: parent directory " + parent.string() + " of " + dir + " does not exist");
  }
  std::error_code ec;
  if (!Exists(dir) && Exists(BackupDir(dir))) {
    fs::rename(BackupDir(dir), dir, ec);
    if (ec) return UnavailableError("cannot restore " + BackupDir(dir) + " to " + dir + ": " + ec.message());
  }
  if (Exists(dir)) {
    if (!fs::is_directory(dir, ec)) {
      return FailedPreconditionError("SaveCheckpoint: " + dir + " exists and is not a directory");
    }
    const bool empty = fs::is_empty(dir, ec);
    if (!empty && !Exists((fs::path(dir) / kMetadataFileName).string())) {
      return FailedPreconditionError("SaveCheckpoint: refusing to replace " + dir +
                                     ": it is not empty and holds no " + std::string(kMetadataFileName));
    }
  }
  if (::mkdir(tmp.c_str(), 0755) != 0) return UnavailableError("cannot create " + tmp + ": " + Errno(errno));
  return Status();
}

Status Commit(const std::string& dir, const std::string& tmp, SaveCrashPoint crash) {
  if (crash == SaveCrashPoint::kBeforeRename) {
    return AbortedError("SaveCheckpoint: injected crash before the rename of " + tmp + " to " + dir);
  }
  std::error_code ec;
  const bool had_old = Exists(dir);
  const std::string backup = BackupDir(dir);
  if (had_old) {
    if (Exists(backup)) {  // a stale backup of a save that committed but did not clean up
      fs::remove_all(backup, ec);
      if (ec) return UnavailableError("cannot remove stale backup " + backup + ": " + ec.message());
    }
    fs::rename(dir, backup, ec);
    if (ec) return UnavailableError("cannot rename " + dir + " to " + backup + ": " + ec.message());
  }
  if (crash == SaveCrashPoint::kBetweenRenames) {
    return AbortedError("SaveCheckpoint: injected crash after renaming " + dir + " to " + backup);
  }
  fs::rename(tmp, dir, ec);
  if (ec) return UnavailableError("cannot rename " + tmp + " to " + dir + ": " + ec.message());
  std::string parent = fs::path(dir).parent_path().string();
  if (parent.empty()) parent = ".";
  MF_RETURN_IF_ERROR(FsyncPath(parent, /*directory=*/true));
  if (had_old) {
    fs::remove_all(backup, ec);
    if (ec) return UnavailableError("cannot remove backup " + backup + ": " + ec.message());
  }
  return Status();
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
                      MeshComms& comms, const SaveOptions& options) {
  Communicator& comm = comms.world();
  const std::string dir = StripSlashes(dir_in);
  const int n = comm.size();
  const int me = comm.rank();

  // 1. Inputs valid on every rank, and the same tensor list everywhere.
  Status local = ValidateSave(dir, tensors, comms, options);
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
      StatusOr<DTensor> y = Redistribute(*x, *rl, comms);
      if (!y.ok()) {
        local = y.status().WithContext("SaveCheckpoint: reducing Partial tensor '" + tensors[i].first + "'");
        break;
      }
      reduced.push_back(*std::move(y));
      x = &reduced.back();
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
      c.num_blocks = NumChecksumBlocks(c.byte_length, options.checksum_block_bytes);
      crc_counts[c.file] += c.num_blocks;
    }
  }

  // 3. Rank 0 prepares the directories and picks the temporary name.
  int64_t id = 0;
  local = Status();
  if (me == 0) {
    id = static_cast<int64_t>(NewUniqueId());
    local = PrepareDirs(dir, dir + ".tmp-" + UniqueSuffix(static_cast<uint64_t>(id)));
  }
  MF_RETURN_IF_ERROR(comm.Broadcast(&id, 1, DType::kI64, 0));
  MF_RETURN_IF_ERROR(AgreeStatus(comm, local));
  const std::string tmp = dir + ".tmp-" + UniqueSuffix(static_cast<uint64_t>(id));

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
    const int64_t block = options.checksum_block_bytes;
    for (const PlannedTensor& t : plan) {
      for (const PlannedChunk& c : t.chunks) {
        if (c.file != me) continue;
        const Tensor& lt = t.x->local();
        // The owner's local box is the chunk's box, so its buffer is the chunk, row-major.
        const std::span<const std::byte> bytes(lt.raw(), static_cast<size_t>(lt.NumBytes()));
        for (int64_t k = 0; k < c.num_blocks; ++k) {
          const int64_t b = k * block, e = std::min(c.byte_length, b + block);
          parts.push_back(bytes.subspan(static_cast<size_t>(b), static_cast<size_t>(e - b)));
        }
      }
    }
    my_crcs.reserve(parts.size());
    local = WriteFileSynced((fs::path(tmp) / DataFileName(me)).string(), parts, &my_crcs);
    if (local.ok()) ++files_written;
    if (local.ok() && options.fail_after_files == files_written) local = injected();
  }
  MF_RETURN_IF_ERROR(AgreeStatus(comm, local));  // also the barrier: every data file is synced

  // 5. Checksums to rank 0 (all-gather: the communicator has no gather).
  std::vector<int64_t> crc_total_prefix(static_cast<size_t>(n + 1), 0);
  for (int r = 0; r < n; ++r) crc_total_prefix[r + 1] = crc_total_prefix[r] + crc_counts[r];
  std::vector<uint32_t> all_crcs(static_cast<size_t>(crc_total_prefix[n]));
  MF_RETURN_IF_ERROR(comm.AllGatherV(my_crcs.data(), crc_counts[me], all_crcs.data(), crc_counts, DType::kI32));

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
    if (local.ok()) local = Commit(dir, tmp, options.crash_point);
  }
  return AgreeStatus(comm, local);
}

// ---------------------------------------------------------------------------------------------
// Load.

StatusOr<std::string> ResolveCheckpointDir(const std::string& dir_in) {
  const std::string dir = StripSlashes(dir_in);
  if (Exists(dir)) return dir;
  if (Exists(BackupDir(dir))) return BackupDir(dir);
  return NotFoundError("no checkpoint at " + dir + " (nor a backup " + BackupDir(dir) + ")");
}

StatusOr<CheckpointMetadata> ReadCheckpointMetadata(const std::string& dir) {
  MF_ASSIGN_OR_RETURN(std::string resolved, ResolveCheckpointDir(dir));
  const std::string path = (fs::path(resolved) / kMetadataFileName).string();
  MF_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(path));
  return DecodeMetadata(bytes, path);
}

StatusOr<std::string> LoadExtraState(const std::string& dir) {
  MF_ASSIGN_OR_RETURN(CheckpointMetadata md, ReadCheckpointMetadata(dir));
  return std::move(md.extra_state);
}

namespace {

class DataFiles {
 public:
  DataFiles(std::string dir, const CheckpointMetadata& md, LoadStats& stats) : dir_(std::move(dir)), md_(md), stats_(stats) {}
  ~DataFiles() {
    for (auto& [i, fd] : fds_) ::close(fd);
  }
  DataFiles(const DataFiles&) = delete;
  DataFiles& operator=(const DataFiles&) = delete;

  std::string Path(int file) const { return (fs::path(dir_) / DataFileName(file)).string(); }

  // The open descriptor of data file `file`, checked against its recorded size.
  StatusOr<int> Get(int file, const std::string& tensor) {
    auto it = fds_.find(file);
    if (it != fds_.end()) return it->second;
    const std::string path = Path(file);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
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
  std::string dir_;
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

// Reads the part `inter` (global coordinates, non-empty) of chunk `c` into `dst` (this rank's
// local tensor, whose global box is `dst_box`). The read spans the chunk bytes from the first to
// the last needed element, rounded out to whole checksum blocks, in pieces of kPieceBytes: each
// piece is one preadv that puts long runs of needed bytes straight into dst and everything else
// (block heads and tails, unneeded row parts, short runs) into a scratch buffer, and is
// checksummed right after the read; short runs are then copied out of scratch. Every checksum
// block read is verified; on a mismatch dst holds garbage and the caller drops it.
Status ReadChunkPart(const TensorRecord& t, const ChunkRecord& c, const Box& inter, const Box& dst_box,
                     int64_t block, DataFiles& files, Tensor& dst, LoadStats& stats, ReadScratch& scratch) {
  const int64_t es = DTypeSize(t.dtype);
  Runs runs(c, inter, dst_box, es, dst.raw());
  const int64_t b0 = runs.first() / block, b1 = (runs.end() + block - 1) / block;
  const int64_t rd_begin = b0 * block, rd_end = std::min(c.byte_length, b1 * block);
  MF_ASSIGN_OR_RETURN(int fd, files.Get(c.file, t.name));
  const std::string path = files.Path(c.file);
  // Runs shorter than kMinDirectRun would cost an iovec each for a few bytes: read them into
  // scratch with the rest and copy them out (memcpy of whole runs).
  const bool direct = runs.run_bytes() >= kMinDirectRun || runs.num_runs() == 1;
  std::byte* const buf = scratch.Buf();
  BlockVerifier verify(t, c, block, b0, path);
  int64_t pos = rd_begin;
  int64_t in_run = 0;  // bytes of the current run already placed
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
        if (!scratch.iov.empty() && static_cast<std::byte*>(scratch.iov.back().iov_base) + scratch.iov.back().iov_len == seg.mem) {
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
  ++stats.chunks_read;
  return Status();
}

std::string NamesList(const CheckpointMetadata& md) {
  std::string s;
  for (size_t i = 0; i < md.tensors.size() && i < 20; ++i) s += (i ? ", " : "") + md.tensors[i].name;
  if (md.tensors.size() > 20) s += ", ...";
  return s;
}

Status LoadLocal(const std::string& dir, const std::vector<LoadRequest>& requests, MeshComms& comms,
                 std::vector<DTensor>& out, LoadStats& stats) {
  MF_ASSIGN_OR_RETURN(std::string resolved, ResolveCheckpointDir(dir));
  const std::string md_path = (fs::path(resolved) / kMetadataFileName).string();
  MF_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(md_path));
  MF_ASSIGN_OR_RETURN(CheckpointMetadata md, DecodeMetadata(bytes, md_path));
  DataFiles files(resolved, md, stats);
  ReadScratch scratch;
  const int me = comms.world_rank();
  for (const LoadRequest& req : requests) {
    const TensorRecord* t = md.Find(req.name);
    if (t == nullptr) {
      return NotFoundError("tensor '" + req.name + "' is not in checkpoint " + md_path + " (it holds: " + NamesList(md) +
                           ")");
    }
    if (!(req.layout.mesh() == comms.mesh())) {
      return InvalidArgumentError("tensor '" + req.name + "': target layout is on " + req.layout.mesh().ToString() +
                                  " but the communicators are for " + comms.mesh().ToString());
    }
    if (req.layout.global_shape() != t->shape) {
      return InvalidArgumentError("tensor '" + req.name + "' has shape " + ShapeStr(t->shape) + " in checkpoint " +
                                  md_path + " but the target layout has shape " + ShapeStr(req.layout.global_shape()));
    }
    if (req.dtype.has_value() && *req.dtype != t->dtype) {
      return InvalidArgumentError("tensor '" + req.name + "' has dtype " + std::string(DTypeName(t->dtype)) +
                                  " in checkpoint " + md_path + " but " + std::string(DTypeName(*req.dtype)) +
                                  " was requested");
    }
    MF_ASSIGN_OR_RETURN(Box box, req.layout.LocalBox(me));
    bool zeros = false;  // Replicate -> Partial(sum): only group coordinate 0 holds the value
    if (req.layout.partial_op() == ReduceOp::kSum) {
      MF_ASSIGN_OR_RETURN(std::vector<int64_t> coord, req.layout.mesh().Coordinate(me));
      for (int m = 0; m < req.layout.mesh().ndim(); ++m) zeros = zeros || (IsPartial(req.layout.placement(m)) && coord[m] != 0);
    }
    // The chunks partition the tensor (DecodeMetadata checks it), so the reads below write every
    // byte of the box: no zero-fill.
    Tensor local = zeros || box.empty() ? Tensor::Zeros(t->dtype, box.shape) : Tensor::Uninitialized(t->dtype, box.shape);
    if (!zeros && !box.empty()) {
      int64_t covered = 0;
      for (const ChunkRecord& c : t->chunks) {
        const Box inter = Intersect(c.box, box);
        if (inter.empty()) continue;
        MF_RETURN_IF_ERROR(ReadChunkPart(*t, c, inter, box, md.checksum_block_bytes, files, local, stats, scratch));
        covered += inter.NumElements();
      }
      if (covered != box.NumElements()) {
        return InternalError("tensor '" + req.name + "': the chunks of " + md_path + " cover " + std::to_string(covered) +
                             " of the " + std::to_string(box.NumElements()) + " elements of box " + box.ToString());
      }
    }
    MF_ASSIGN_OR_RETURN(DTensor x, DTensor::FromLocal(std::move(local), req.layout, me));
    out.push_back(std::move(x));
  }
  return Status();
}

}  // namespace

StatusOr<std::vector<DTensor>> LoadTensors(const std::string& dir, const std::vector<LoadRequest>& requests,
                                           MeshComms& comms, LoadStats* stats) {
  LoadStats local_stats;
  std::vector<DTensor> out;
  const Status local = LoadLocal(dir, requests, comms, out, stats != nullptr ? *stats : local_stats);
  MF_RETURN_IF_ERROR(AgreeStatus(comms.world(), local));
  return out;
}

StatusOr<DTensor> LoadTensor(const std::string& dir, const std::string& name, const Layout& target, MeshComms& comms,
                             std::optional<DType> dtype) {
  MF_ASSIGN_OR_RETURN(std::vector<DTensor> v, LoadTensors(dir, {LoadRequest{name, target, dtype}}, comms));
  return std::move(v.front());
}

}  // namespace meshflow
