// The load protocol of checkpoint/checkpoint.h: pinning one committed checkpoint for all ranks,
// checking the requests, and the partial, checksum-verified reads of each rank's boxes. File
// helpers, locks and PinnedDir are in fs_util.h; the save protocol is in save.cc.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>

#include "meshflow/base/checksum.h"
#include "meshflow/base/strings.h"
#include "meshflow/checkpoint/agree.h"
#include "meshflow/checkpoint/checkpoint.h"
#include "meshflow/checkpoint/fs_util.h"
#include "meshflow/checkpoint/testing_hooks.h"
#include "meshflow/runtime/device_copy.h"

namespace meshflow {
namespace {

namespace fs = std::filesystem;
using checkpoint_internal::AgreeStatus;
using checkpoint_internal::Errno;
using checkpoint_internal::FileLock;
using checkpoint_internal::MetadataPath;
using checkpoint_internal::PinnedDir;
using checkpoint_internal::ResolveAndPin;
using checkpoint_internal::StripSlashes;

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
    if (local.ok()) local = RunCheckpointTestHook("load:pinned", comm.world_rank());
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

StatusOr<std::string> ResolveCheckpointDir(const std::string& dir) { return checkpoint_internal::ResolveDir(dir); }

StatusOr<CheckpointMetadata> ReadCheckpointMetadata(const std::string& dir) {
  MF_ASSIGN_OR_RETURN(PinnedDir p, ResolveAndPin(dir));
  return DecodeMetadata(p.metadata, MetadataPath(p.path));
}

StatusOr<std::string> LoadExtraState(const std::string& dir) {
  MF_ASSIGN_OR_RETURN(CheckpointMetadata md, ReadCheckpointMetadata(dir));
  return std::move(md.extra_state);
}

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
