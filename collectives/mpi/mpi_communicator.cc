#include "meshflow/collectives/mpi/mpi_communicator.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "meshflow/collectives/call_check.h"
#include "meshflow/collectives/reduce.h"

namespace meshflow {

namespace {

using Clock = std::chrono::steady_clock;

// Per-process byte counters (one process = one world rank).
std::atomic<int64_t> g_sent{0};
std::atomic<int64_t> g_received{0};

void CountBytes(int64_t sent, int64_t received) {
  if (sent != 0) g_sent.fetch_add(sent, std::memory_order_relaxed);
  if (received != 0) g_received.fetch_add(received, std::memory_order_relaxed);
}

// Buffers that MPI may still use after a timeout (collectives cannot be cancelled): kept reachable
// for the rest of the process.
std::mutex g_abandoned_mu;
std::vector<std::unique_ptr<std::byte[]>>* g_abandoned = new std::vector<std::unique_ptr<std::byte[]>>();

// Stand-ins for null buffers of empty transfers (MPI implementations may reject null pointers).
// Send and receive stand-ins differ: OpenMPI's nonblocking collectives (libnbc) treat
// sendbuf == recvbuf as MPI_IN_PLACE, so equal pointers on some ranks only would make the ranks
// run different schedules and hang the next collective.
alignas(16) std::byte g_dummy[16];
alignas(16) std::byte g_send_dummy[16];
alignas(16) std::byte g_recv_dummy[16];

std::mutex g_init_mu;

// The first error that broke a communicator of this process (named by MpiFinalize), and the longest
// timeout of any communicator (MpiFinalize's agreement waits twice that; 60 s without communicators).
std::mutex g_fatal_mu;
Status* g_fatal = new Status();
std::atomic<int64_t> g_longest_timeout_ms{0};

void RecordFatal(const Status& s) {
  std::lock_guard<std::mutex> lock(g_fatal_mu);
  if (g_fatal->ok()) *g_fatal = s;
}
Status FirstFatal() {
  std::lock_guard<std::mutex> lock(g_fatal_mu);
  return *g_fatal;
}

MPI_Datatype MpiType(DType t) {
  switch (t) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kF64:
      return MPI_DOUBLE;
    case DType::kBF16:
      return MPI_UINT16_T;  // storage only: reductions never use MPI ops
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI64:
      return MPI_INT64_T;
  }
  return MPI_BYTE;
}

std::string MpiErrorString(int rc) {
  char buf[MPI_MAX_ERROR_STRING + 1] = {};
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(buf, static_cast<size_t>(std::max(0, len))) + " (code " + std::to_string(rc) + ")";
}

// A Status for a failed MPI call: names the function, the MPI error and `where`.
Status MpiError(int rc, const char* fn, const std::string& where) {
  std::string msg = std::string(fn) + " failed: " + MpiErrorString(rc) + " in " + where;
  int cls = rc;
  if (MPI_Error_class(rc, &cls) != MPI_SUCCESS) cls = rc;
  if (cls == MPI_ERR_TRUNCATE) return FailedPreconditionError(msg + " (a peer sent more elements than expected)");
  return InternalError(msg);
}

Status CheckMpi(int rc, const char* fn, const std::string& where) {
  return rc == MPI_SUCCESS ? Status() : MpiError(rc, fn, where);
}

bool MpiUsable() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

void* NonNull(void* p) { return p == nullptr ? static_cast<void*>(g_recv_dummy) : p; }
const void* NonNull(const void* p) { return p == nullptr ? static_cast<const void*>(g_send_dummy) : p; }
bool Overlap(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  if (a_bytes <= 0 || b_bytes <= 0) return false;
  const auto pa = reinterpret_cast<uintptr_t>(a);
  const auto pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + static_cast<uintptr_t>(b_bytes) && pb < pa + static_cast<uintptr_t>(a_bytes);
}
// The (send, recv) pointers to hand to an MPI collective: never null, and never equal (see
// g_send_dummy). Overlapping non-empty buffers must have been staged by the caller.
struct BufferPair {
  const void* send;
  void* recv;
};
BufferPair Separate(const void* send, int64_t send_bytes, void* recv, int64_t recv_bytes) {
  BufferPair p{NonNull(send), NonNull(recv)};
  if (p.send == p.recv) {
    if (send_bytes == 0) {
      p.send = g_send_dummy;
    } else if (recv_bytes == 0) {
      p.recv = g_recv_dummy;
    }
  }
  return p;
}
int64_t Sum(std::span<const int64_t> v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

// Between MPI_Test polls: re-test at once, then yield the core (OpenMPI progresses nonblocking
// collectives only inside MPI calls, so a sleeping rank stalls the transfer for everyone); only a
// wait longer than kSpinFor (a late or stalled peer) sleeps, with back-off up to 200 us, so that
// oversubscribed ranks leave the cores to the ranks that have work. `members_arrived`: every
// member's header has arrived (the call was validated), so a long wait is the transfer itself,
// which sleeping would stall (a 64 MiB all-to-all runs well past kSpinFor): yield only. (Capping
// the sleeps at 20 us instead kept half of the 64 MiB overhead; bench/README.md.)
constexpr std::chrono::milliseconds kSpinFor{20};
void Pause(int iteration, std::chrono::steady_clock::duration waited, bool members_arrived = false) {
  if (iteration < 16) return;
  if (waited < kSpinFor || members_arrived) {
    std::this_thread::yield();
    return;
  }
  const auto slept = std::chrono::duration_cast<std::chrono::microseconds>(waited - kSpinFor).count();
  std::this_thread::sleep_for(std::chrono::microseconds(std::clamp<int64_t>(slept / 8, 1, 200)));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Header of a collective (see the file comment of the header). Wire form: kFixed int64 values, then
// counts (n) and counts2 (n).
struct MpiCommunicator::Header {
  static constexpr int64_t kMagic = 0x6d657368666c6f77;  // "meshflow"
  static constexpr int kValues = 10;                       // magic .. line
  static constexpr int kFileWords = 5;                     // the call site's file name: its last 40 chars
  static constexpr int kFixed = kValues + kFileWords;
  int64_t magic = kMagic;
  CollectiveCall call;  // seq, kind, dtype, op, root, count, line; counts and counts2 hold n entries
  int64_t color = 0;
  int64_t key = 0;
  // call.file views this (NUL-padded; empty: no call site); PointFile() sets it again after a copy.
  char file[kFileWords * 8] = {};

  void SetSite(const CallerSite& where) {
    const std::string_view f = where.file_name();
    const std::string_view tail = f.size() > sizeof(file) ? f.substr(f.size() - sizeof(file)) : f;
    std::memset(file, 0, sizeof(file));
    std::memcpy(file, tail.data(), tail.size());
    call.line = where.line;
    PointFile();
  }
  void PointFile() { call.file = std::string_view(file, strnlen(file, sizeof(file))); }

  Header(CollectiveKind k, int n) {
    call.kind = k;
    call.counts.resize(static_cast<size_t>(n));
    call.counts2.resize(static_cast<size_t>(n));
  }
  Header(const Header& o) : magic(o.magic), call(o.call), color(o.color), key(o.key) {
    std::memcpy(file, o.file, sizeof(file));
    PointFile();
  }
  Header& operator=(const Header& o) {
    magic = o.magic, call = o.call, color = o.color, key = o.key;
    std::memcpy(file, o.file, sizeof(file));
    PointFile();
    return *this;
  }

  static int Words(int n) { return kFixed + 2 * n; }
  void Write(int64_t* w) const {
    const int64_t fixed[kValues] = {magic,
                                   call.seq,
                                   static_cast<int64_t>(call.kind),
                                   static_cast<int64_t>(call.dtype),
                                   static_cast<int64_t>(call.op),
                                   call.root,
                                   call.count,
                                   color,
                                   key,
                                   call.line};
    std::copy(fixed, fixed + kValues, w);
    std::memcpy(w + kValues, file, sizeof(file));
    std::copy(call.counts.begin(), call.counts.end(), w + kFixed);
    std::copy(call.counts2.begin(), call.counts2.end(), w + kFixed + call.counts.size());
  }
  void Read(const int64_t* w) {
    magic = w[0], call.seq = w[1], call.kind = static_cast<CollectiveKind>(w[2]);
    call.dtype = static_cast<DType>(w[3]), call.op = static_cast<ReduceOp>(w[4]);
    call.root = w[5], call.count = w[6], color = w[7], key = w[8], call.line = w[9];
    std::memcpy(file, w + kValues, sizeof(file));
    PointFile();
    const size_t n = call.counts.size();
    std::copy(w + kFixed, w + kFixed + n, call.counts.begin());
    std::copy(w + kFixed + n, w + kFixed + 2 * n, call.counts2.begin());
  }
};

// One call's deadline, staging buffers and polling.
class MpiCommunicator::Call {
 public:
  Call(const MpiCommunicator& comm, const char* what)
      : comm_(comm), what_(what), deadline_(Clock::now() + comm.options_.timeout) {}
  ~Call() {
    if (abandon_) {
      if (staging_.empty()) return;
      std::lock_guard<std::mutex> lock(g_abandoned_mu);
      for (auto& b : staging_) g_abandoned->push_back(std::move(b.data));
      return;
    }
    for (auto& b : staging_) comm_.ReturnStaging(std::move(b));
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  const char* what() const { return what_; }
  std::string Where() const { return comm_.Describe(what_) + " at " + comm_.RankName(comm_.rank_); }

  // A buffer of `bytes` bytes (uninitialized, reused from the communicator's pool) that stays valid
  // even if MPI keeps using it after a timeout.
  std::byte* Stage(int64_t bytes) {
    if (bytes <= 0) return g_dummy;
    staging_.push_back(comm_.TakeStaging(bytes));
    return staging_.back().data.get();
  }
  // Keeps the staging buffers alive forever (MPI may still use them).
  void Abandon() { abandon_ = true; }

  Status Check(int rc, const char* fn) const { return CheckMpi(rc, fn, Where()); }

  // Polls until every request is MPI_REQUEST_NULL (complete) or the deadline passes. Sets *timed_out
  // on timeout (and returns OK; the caller names what is missing). `statuses` may be empty.
  Status Poll(std::span<MPI_Request> reqs, std::span<MPI_Status> statuses, const char* fn, bool* timed_out) {
    *timed_out = false;
    const Clock::time_point start = Clock::now();
    for (int it = 0;; ++it) {
      bool all = true;
      for (size_t i = 0; i < reqs.size(); ++i) {
        if (reqs[i] == MPI_REQUEST_NULL) continue;
        int flag = 0;
        MPI_Status st;
        const int rc = MPI_Test(&reqs[i], &flag, &st);
        if (rc != MPI_SUCCESS) return MpiError(rc, fn, Where());
        if (!flag) {
          all = false;
        } else if (!statuses.empty()) {
          statuses[i] = st;
        }
      }
      if (all) return Status();
      const Clock::time_point now = Clock::now();
      if (now >= deadline_) {
        *timed_out = true;
        return Status();
      }
      Pause(it, now - start, members_arrived_);
    }
  }

  // Every member's header has arrived and matched (ExchangeHeaders): Poll no longer sleeps.
  void MembersArrived() { members_arrived_ = true; }

  // Waits for one collective request; on timeout returns DeadlineExceeded and abandons the staging.
  Status Wait(MPI_Request& req, const char* fn) {
    bool timed_out = false;
    MF_RETURN_IF_ERROR(Poll(std::span<MPI_Request>(&req, 1), {}, fn, &timed_out));
    if (!timed_out) return Status();
    Abandon();
    return DeadlineExceededError(comm_.Describe(what_) + ": timed out after " + TimeoutString() + ": " + fn +
                                 " did not complete at " + comm_.RankName(comm_.rank_) +
                                 (comm_.options_.validate
                                      ? " (every member had arrived; a peer died or stalled inside the collective)"
                                      : " (a member did not arrive, died or stalled)"));
  }

  std::string TimeoutString() const { return std::to_string(comm_.options_.timeout.count()) + " ms"; }

 private:
  const MpiCommunicator& comm_;
  bool members_arrived_ = false;
  const char* what_;
  Clock::time_point deadline_;
  bool abandon_ = false;
  std::vector<Staging> staging_;
};

MpiCommunicator::Staging MpiCommunicator::TakeStaging(int64_t bytes) const {
  // Best fit among the pooled buffers; a new (uninitialized) one when none is large enough.
  size_t best = pool_.size();
  for (size_t i = 0; i < pool_.size(); ++i) {
    if (pool_[i].bytes >= bytes && (best == pool_.size() || pool_[i].bytes < pool_[best].bytes)) best = i;
  }
  if (best == pool_.size()) return Staging{std::unique_ptr<std::byte[]>(new std::byte[static_cast<size_t>(bytes)]), bytes};
  Staging s = std::move(pool_[best]);
  pool_.erase(pool_.begin() + static_cast<std::ptrdiff_t>(best));
  return s;
}

void MpiCommunicator::ReturnStaging(Staging s) const {
  pool_.push_back(std::move(s));
  if (pool_.size() <= kMaxPooledBuffers) return;
  // Keep the largest buffers: a call's needs grow with the message size.
  auto smallest = std::min_element(pool_.begin(), pool_.end(),
                                   [](const Staging& a, const Staging& b) { return a.bytes < b.bytes; });
  pool_.erase(smallest);
}

namespace {

// MPI counts and displacements are int.
Status CheckIntRange(const CallSite& site, const std::string& name, int64_t elements) {
  if (elements <= INT_MAX) return Status();
  return InvalidArgumentError(site.Describe() + ": " + name + " = " + std::to_string(elements) + " elements exceeds INT_MAX (" +
                              std::to_string(INT_MAX) +
                              "), the most one MPI call can address with int counts and displacements; split the "
                              "transfer into smaller ones");
}

std::vector<int> ToInt(std::span<const int64_t> v) {
  std::vector<int> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<int>(v[i]);
  return out;
}
std::vector<int> IntOffsets(std::span<const int64_t> counts) {
  std::vector<int> out(counts.size());
  int64_t off = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    out[i] = static_cast<int>(off);
    off += counts[i];
  }
  return out;
}

// The MPI op of a native reduction (MpiOptions::deterministic off), or nullopt where only the
// rank-order path gives the interface's result: bf16 (no MPI type) and integer avg (ReduceBuffers
// truncates the wide sum; an MPI sum wraps first).
std::optional<MPI_Op> NativeOp(DType dtype, ReduceOp op) {
  if (dtype == DType::kBF16) return std::nullopt;
  switch (op) {
    case ReduceOp::kSum: return MPI_SUM;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kAvg: return IsFloatDType(dtype) ? std::optional<MPI_Op>(MPI_SUM) : std::nullopt;
  }
  return std::nullopt;
}

// kAvg after a native sum: each element divided by the group size in ReduceBuffers' accumulator
// type (float for f32, double for f64).
void DivideByGroupSize(void* p, int64_t count, DType dtype, int n) {
  if (dtype == DType::kF32) {
    float* x = static_cast<float*>(p);
    const float d = static_cast<float>(n);
    for (int64_t i = 0; i < count; ++i) x[i] = x[i] / d;
  } else if (dtype == DType::kF64) {
    double* x = static_cast<double*>(p);
    const double d = static_cast<double>(n);
    for (int64_t i = 0; i < count; ++i) x[i] = x[i] / d;
  }
}

// World ranks (MPI_COMM_WORLD numbering) of the members of `comm`, in comm order.
StatusOr<std::vector<int>> WorldRanksOf(MPI_Comm comm, const std::string& where) {
  int n = 0;
  MF_RETURN_IF_ERROR(CheckMpi(MPI_Comm_size(comm, &n), "MPI_Comm_size", where));
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  MF_RETURN_IF_ERROR(CheckMpi(MPI_Comm_group(comm, &group), "MPI_Comm_group", where));
  Status s = CheckMpi(MPI_Comm_group(MPI_COMM_WORLD, &world), "MPI_Comm_group", where);
  std::vector<int> in(static_cast<size_t>(n)), out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) in[static_cast<size_t>(i)] = i;
  if (s.ok()) {
    s = CheckMpi(MPI_Group_translate_ranks(group, n, in.data(), world, out.data()), "MPI_Group_translate_ranks", where);
  }
  MPI_Group_free(&group);
  if (world != MPI_GROUP_NULL) MPI_Group_free(&world);
  MF_RETURN_IF_ERROR(s);
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

MpiCommunicator::MpiCommunicator(MPI_Comm owned, int rank, std::vector<int> world_ranks, MpiOptions opts)
    : comm_(owned), rank_(rank), world_ranks_(std::move(world_ranks)), options_(opts) {}

MpiCommunicator::~MpiCommunicator() {
  if (comm_ != MPI_COMM_NULL && MpiUsable()) MPI_Comm_free(&comm_);
}

StatusOr<std::shared_ptr<MpiCommunicator>> MpiCommunicator::Create(MPI_Comm comm, MpiOptions opts) {
  if (!MpiUsable()) {
    return FailedPreconditionError(
        "MpiCommunicator::Create: MPI is not initialized or already finalized "
        "(call MpiInit() or MpiWorld() first)");
  }
  if (opts.timeout.count() <= 0) {
    return InvalidArgumentError("MpiCommunicator::Create: timeout " + std::to_string(opts.timeout.count()) +
                                " ms must be positive");
  }
  MF_ASSIGN_OR_RETURN(std::vector<int> parent_world, WorldRanksOf(comm, "mpi create"));
  int64_t longest = g_longest_timeout_ms.load();
  while (opts.timeout.count() > longest && !g_longest_timeout_ms.compare_exchange_weak(longest, opts.timeout.count())) {
  }
  const std::string where = "mpi create (duplicating the communicator of world ranks " + ElidedListString(parent_world) + ")";
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_Request req = MPI_REQUEST_NULL;
  MF_RETURN_IF_ERROR(CheckMpi(MPI_Comm_idup(comm, &dup, &req), "MPI_Comm_idup", where));
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + opts.timeout;
  for (int it = 0;; ++it) {
    int flag = 0;
    MF_RETURN_IF_ERROR(CheckMpi(MPI_Test(&req, &flag, MPI_STATUS_IGNORE), "MPI_Comm_idup", where));
    if (flag) break;
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      return DeadlineExceededError(where + ": MPI_Comm_idup timed out after " + std::to_string(opts.timeout.count()) +
                                   " ms: not every member called it");
    }
    Pause(it, now - start);
  }
  Status s = CheckMpi(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", where);
  int rank = 0;
  if (s.ok()) s = CheckMpi(MPI_Comm_rank(dup, &rank), "MPI_Comm_rank", where);
  if (!s.ok()) {
    MPI_Comm_free(&dup);
    return s;
  }
  return std::shared_ptr<MpiCommunicator>(new MpiCommunicator(dup, rank, std::move(parent_world), opts));
}

CallSite MpiCommunicator::Site(const char* what) const { return CallSite{"mpi ", what, world_ranks_, rank_}; }
std::string MpiCommunicator::Describe(const char* what) const { return Site(what).Describe(); }
std::string MpiCommunicator::RankName(int r) const { return Site("").RankName(r); }

ByteCounters MpiCommunicator::counters() const {
  return ByteCounters{g_sent.load(std::memory_order_relaxed), g_received.load(std::memory_order_relaxed)};
}
void MpiCommunicator::ResetCounters() {
  g_sent.store(0, std::memory_order_relaxed);
  g_received.store(0, std::memory_order_relaxed);
}

// Runs `body` unless the communicator is broken; an error from it (other than a local argument
// error) breaks the communicator.
template <typename Body>
Status MpiCommunicator::Guarded(const char* what, Body&& body) {
  if (!broken_.ok()) {
    return AbortedError(Describe(what) + ": the communicator is broken by an earlier error: " + broken_.ToString());
  }
  if (!MpiUsable()) return FailedPreconditionError(Describe(what) + ": MPI is not initialized or already finalized");
  static const bool trace = std::getenv("MESHFLOW_MPI_TRACE") != nullptr;
  if (trace) {
    std::fprintf(stderr, "[meshflow mpi trace] world rank %d: %s (collective #%lld)\n", world_rank(),
                 Describe(what).c_str(), static_cast<long long>(sequence_));
  }
  Call call(*this, what);
  Status s = body(call);
  if (trace) {
    std::fprintf(stderr, "[meshflow mpi trace] world rank %d: %s -> %s\n", world_rank(), Describe(what).c_str(),
                 s.ToString().c_str());
  }
  if (!s.ok() && s.code() != StatusCode::kInvalidArgument) {
    broken_ = s;
    RecordFatal(s);
  }
  return s;
}

Status MpiCommunicator::ExchangeHeaders(Call& call, Header& mine, const CallerSite& where,
                                        std::vector<Header>* all) {
  const int n = size();
  const int words = Header::Words(n);
  mine.call.seq = sequence_++;
  if (options_.check_call_sites) mine.SetSite(where);
  auto* wire = reinterpret_cast<int64_t*>(call.Stage(static_cast<int64_t>(words) * (n + 1) * 8));
  int64_t* my_wire = wire + static_cast<size_t>(n) * static_cast<size_t>(words);
  mine.Write(my_wire);
  std::copy(my_wire, my_wire + words, wire + static_cast<size_t>(rank_) * static_cast<size_t>(words));
  std::vector<MPI_Request> reqs;
  std::vector<int> recv_peer;  // reqs[i] for i < recv_peer.size() are receives
  reqs.reserve(static_cast<size_t>(2 * n));
  auto cleanup = [&] {
    // Cancels pending receives, releases pending sends (their buffers are abandoned).
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (reqs[i] == MPI_REQUEST_NULL) continue;
      if (i < recv_peer.size()) MPI_Cancel(&reqs[i]);
      MPI_Request_free(&reqs[i]);
    }
    call.Abandon();
  };
  for (int q = 0; q < n; ++q) {
    if (q == rank_) continue;
    reqs.push_back(MPI_REQUEST_NULL);
    recv_peer.push_back(q);
    Status s = call.Check(MPI_Irecv(wire + static_cast<size_t>(q) * static_cast<size_t>(words), words, MPI_INT64_T, q,
                                    kHeaderTag, comm_, &reqs.back()),
                          "MPI_Irecv");
    if (!s.ok()) {
      cleanup();
      return s;
    }
  }
  for (int q = 0; q < n; ++q) {
    if (q == rank_) continue;
    reqs.push_back(MPI_REQUEST_NULL);
    Status s = call.Check(MPI_Isend(my_wire, words, MPI_INT64_T, q, kHeaderTag, comm_, &reqs.back()), "MPI_Isend");
    if (!s.ok()) {
      cleanup();
      return s;
    }
  }
  bool timed_out = false;
  Status s = call.Poll(reqs, {}, "MPI_Test (header exchange)", &timed_out);
  if (!s.ok() || timed_out) {
    std::vector<int> missing, missing_world;
    for (size_t i = 0; i < recv_peer.size(); ++i) {
      if (reqs[i] != MPI_REQUEST_NULL) {
        missing.push_back(recv_peer[i]);
        missing_world.push_back(world_ranks_[static_cast<size_t>(recv_peer[i])]);
      }
    }
    cleanup();
    if (!s.ok()) return s;
    if (missing.empty()) {
      return DeadlineExceededError(Describe(call.what()) + ": timed out after " + call.TimeoutString() + " at " +
                                   RankName(rank_) + ": every member arrived but its header could not be delivered");
    }
    return DeadlineExceededError(Describe(call.what()) + ": timed out after " + call.TimeoutString() + " (waiting at " +
                                 RankName(rank_) + "); group ranks " + ElidedListString(missing) + " (world ranks " +
                                 ElidedListString(missing_world) + ") did not arrive");
  }
  std::vector<Header> headers(static_cast<size_t>(n), Header(CollectiveKind::kBarrier, n));
  for (int q = 0; q < n; ++q)
    headers[static_cast<size_t>(q)].Read(wire + static_cast<size_t>(q) * static_cast<size_t>(words));
  MF_RETURN_IF_ERROR(Validate(call.what(), headers));
  call.MembersArrived();
  if (all != nullptr) *all = std::move(headers);
  return Status();
}

// Every rank runs this on the same headers, so every rank reaches the same verdict.
Status MpiCommunicator::Validate(const char* what, const std::vector<Header>& all) const {
  const int n = size();
  for (int r = 0; r < n; ++r) {
    if (all[static_cast<size_t>(r)].magic != Header::kMagic) {
      return InternalError(Describe(what) + ": corrupted collective header from " + RankName(r));
    }
  }
  return CheckCallsMatch(Site(what), n, [&all](int r) -> const CollectiveCall& { return all[static_cast<size_t>(r)].call; });
}

// ---------------------------------------------------------------------------------------------
// Collectives.

Status MpiCommunicator::AllGatherV(const void* send, int64_t send_count, void* recv,
                                   std::span<const int64_t> recv_counts, DType dtype, CallerSite where) {
  const char* what = "all_gather";
  const CallSite site = Site(what);
  const int n = size();
  MF_RETURN_IF_ERROR(CheckCounts(site, "recv_counts", recv_counts));
  MF_RETURN_IF_ERROR(CheckSendCount(site, send_count, recv_counts));
  const int64_t total = Sum(recv_counts);
  MF_RETURN_IF_ERROR(CheckIntRange(site, "sum of recv_counts", total));
  MF_RETURN_IF_ERROR(CheckBuffer(site, "send", send, send_count));
  MF_RETURN_IF_ERROR(CheckBuffer(site, "recv", recv, total));
  const int64_t es = DTypeSize(dtype);
  return Guarded(what, [&](Call& call) -> Status {
    if (options_.validate) {
      Header h(CollectiveKind::kAllGather, n);
      h.call.dtype = dtype;
      std::copy(recv_counts.begin(), recv_counts.end(), h.call.counts.begin());
      MF_RETURN_IF_ERROR(ExchangeHeaders(call, h, where, nullptr));
    }
    const void* src = send;
    if (Overlap(send, send_count * es, recv, total * es)) {  // MPI forbids aliasing: stage the input
      std::byte* copy = call.Stage(send_count * es);
      std::memcpy(copy, send, static_cast<size_t>(send_count * es));
      src = copy;
    }
    const std::vector<int> counts = ToInt(recv_counts);
    const std::vector<int> displs = IntOffsets(recv_counts);
    const BufferPair bufs = Separate(src, send_count * es, recv, total * es);
    MPI_Request req = MPI_REQUEST_NULL;
    MF_RETURN_IF_ERROR(call.Check(MPI_Iallgatherv(bufs.send, static_cast<int>(send_count), MpiType(dtype), bufs.recv,
                                                  counts.data(), displs.data(), MpiType(dtype), comm_, &req),
                                  "MPI_Iallgatherv"));
    MF_RETURN_IF_ERROR(call.Wait(req, "MPI_Iallgatherv"));
    CountBytes((n - 1) * send_count * es, (total - send_count) * es);
    return Status();
  });
}

Status MpiCommunicator::ReduceScatterV(const void* send, std::span<const int64_t> counts, void* recv, DType dtype,
                                       ReduceOp op, CallerSite where) {
  const char* what = "reduce_scatter";
  const CallSite site = Site(what);
  const int n = size();
  MF_RETURN_IF_ERROR(CheckCounts(site, "counts", counts));
  const int64_t total = Sum(counts);
  const int64_t mine = counts[static_cast<size_t>(rank_)];
  MF_RETURN_IF_ERROR(CheckIntRange(site, "sum of counts", total));
  MF_RETURN_IF_ERROR(CheckIntRange(site, "group size * counts[rank]", n * mine));
  MF_RETURN_IF_ERROR(CheckBuffer(site, "send", send, total));
  MF_RETURN_IF_ERROR(CheckBuffer(site, "recv", recv, mine));
  const int64_t es = DTypeSize(dtype);
  return Guarded(what, [&](Call& call) -> Status {
    if (options_.validate) {
      Header h(CollectiveKind::kReduceScatter, n);
      h.call.dtype = dtype;
      h.call.op = op;
      std::copy(counts.begin(), counts.end(), h.call.counts.begin());
      MF_RETURN_IF_ERROR(ExchangeHeaders(call, h, where, nullptr));
    }
    // Rank q receives block q of every rank; blocks land in rank order in `staged`. This rank's own
    // block is reduced straight from `send` (not copied through MPI) unless recv overlaps send.
    const bool own_direct = !Overlap(send, total * es, recv, mine * es);
    std::byte* staged = call.Stage(n * mine * es);
    std::vector<int> scounts = ToInt(counts);
    const std::vector<int> sdispls = IntOffsets(counts);
    std::vector<int> rcounts(static_cast<size_t>(n), static_cast<int>(mine));
    std::vector<int> rdispls(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) rdispls[static_cast<size_t>(r)] = static_cast<int>(r * mine);
    if (own_direct) scounts[static_cast<size_t>(rank_)] = rcounts[static_cast<size_t>(rank_)] = 0;
    const BufferPair bufs = Separate(send, total * es, staged, n * mine * es);
    MPI_Request req = MPI_REQUEST_NULL;
    MF_RETURN_IF_ERROR(call.Check(MPI_Ialltoallv(bufs.send, scounts.data(), sdispls.data(), MpiType(dtype), bufs.recv,
                                                 rcounts.data(), rdispls.data(), MpiType(dtype), comm_, &req),
                                  "MPI_Ialltoallv"));
    MF_RETURN_IF_ERROR(call.Wait(req, "MPI_Ialltoallv"));
    std::vector<const void*> inputs(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) inputs[static_cast<size_t>(r)] = staged + r * mine * es;
    if (own_direct) {
      inputs[static_cast<size_t>(rank_)] = static_cast<const std::byte*>(send) + sdispls[static_cast<size_t>(rank_)] * es;
    }
    MF_RETURN_IF_ERROR(ReduceBuffers(inputs, NonNull(recv), mine, dtype, op));
    CountBytes((total - mine) * es, (n - 1) * mine * es);
    return Status();
  });
}

Status MpiCommunicator::AllReduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                                  CallerSite where) {
  const char* what = "all_reduce";
  const CallSite site = Site(what);
  const int n = size();
  MF_RETURN_IF_ERROR(CheckBuffer(site, "send", send, count));
  MF_RETURN_IF_ERROR(CheckBuffer(site, "recv", recv, count));
  MF_RETURN_IF_ERROR(CheckIntRange(site, "count", count));
  const int64_t chunk = (count + n - 1) / n;  // torch.chunk chunks
  auto begin = [&](int c) { return std::min<int64_t>(count, c * chunk); };
  auto end = [&](int c) { return std::min<int64_t>(count, (c + 1) * chunk); };
  const int64_t mine = end(rank_) - begin(rank_);
  MF_RETURN_IF_ERROR(CheckIntRange(site, "group size * chunk", n * mine));
  const int64_t es = DTypeSize(dtype);
  return Guarded(what, [&](Call& call) -> Status {
    if (options_.validate) {
      Header h(CollectiveKind::kAllReduce, n);
      h.call.dtype = dtype;
      h.call.op = op;
      h.call.count = count;
      MF_RETURN_IF_ERROR(ExchangeHeaders(call, h, where, nullptr));
    }
    const int64_t others = count - mine;
    const std::optional<MPI_Op> native = options_.deterministic ? std::nullopt : NativeOp(dtype, op);
    if (native) {
      const void* src = send == recv ? MPI_IN_PLACE : send;
      if (send != recv && Overlap(send, count * es, recv, count * es)) {  // MPI forbids aliasing
        std::byte* copy = call.Stage(count * es);
        std::memcpy(copy, send, static_cast<size_t>(count * es));
        src = copy;
      }
      MPI_Request req = MPI_REQUEST_NULL;
      MF_RETURN_IF_ERROR(call.Check(MPI_Iallreduce(src == MPI_IN_PLACE ? src : NonNull(src), NonNull(recv),
                                                   static_cast<int>(count), MpiType(dtype), *native, comm_, &req),
                                    "MPI_Iallreduce"));
      MF_RETURN_IF_ERROR(call.Wait(req, "MPI_Iallreduce"));
      if (op == ReduceOp::kAvg) DivideByGroupSize(recv, count, dtype, n);
      // The counters stay the interface's (the deterministic algorithm's bytes), whatever MPI moved.
      CountBytes((others + (n - 1) * mine) * es, ((n - 1) * mine + others) * es);
      return Status();
    }
    std::vector<int> ccounts(static_cast<size_t>(n)), cdispls(static_cast<size_t>(n));
    for (int c = 0; c < n; ++c) {
      ccounts[static_cast<size_t>(c)] = static_cast<int>(end(c) - begin(c));
      cdispls[static_cast<size_t>(c)] = static_cast<int>(begin(c));
    }
    // 1. Reduce-scatter: chunk c of every rank goes to rank c and is reduced there in rank order,
    //    straight into recv's chunk c. The own chunk is read from `send` in place (not copied
    //    through MPI) unless send and recv partially overlap.
    const bool own_direct = send == recv || !Overlap(send, count * es, recv, count * es);
    std::byte* staged = call.Stage(n * mine * es);
    std::vector<int> scounts = ccounts;
    std::vector<int> rcounts(static_cast<size_t>(n), static_cast<int>(mine));
    std::vector<int> rdispls(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) rdispls[static_cast<size_t>(r)] = static_cast<int>(r * mine);
    if (own_direct) scounts[static_cast<size_t>(rank_)] = rcounts[static_cast<size_t>(rank_)] = 0;
    const BufferPair step1 = Separate(send, count * es, staged, n * mine * es);
    MPI_Request req = MPI_REQUEST_NULL;
    MF_RETURN_IF_ERROR(call.Check(MPI_Ialltoallv(step1.send, scounts.data(), cdispls.data(), MpiType(dtype), step1.recv,
                                                 rcounts.data(), rdispls.data(), MpiType(dtype), comm_, &req),
                                  "MPI_Ialltoallv"));
    MF_RETURN_IF_ERROR(call.Wait(req, "MPI_Ialltoallv"));
    std::vector<const void*> inputs(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) inputs[static_cast<size_t>(r)] = staged + r * mine * es;
    std::byte* own = static_cast<std::byte*>(NonNull(recv)) + begin(rank_) * es;
    // Otherwise the own chunk was copied into `staged` by MPI, and send is no longer read. Block-wise
    // reduction reads every input of a block before writing it, so own may equal inputs[rank_]
    // (send == recv).
    if (own_direct) inputs[static_cast<size_t>(rank_)] = static_cast<const std::byte*>(send) + begin(rank_) * es;
    MF_RETURN_IF_ERROR(ReduceBuffers(inputs, own, mine, dtype, op));
    // 2. All-gather in place: every rank's chunk is already in its recv (every rank passes
    //    MPI_IN_PLACE, as MPI requires of an in-place all-gather).
    MF_RETURN_IF_ERROR(call.Check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, NonNull(recv), ccounts.data(),
                                                  cdispls.data(), MpiType(dtype), comm_, &req),
                                  "MPI_Iallgatherv"));
    MF_RETURN_IF_ERROR(call.Wait(req, "MPI_Iallgatherv"));
    CountBytes((others + (n - 1) * mine) * es, ((n - 1) * mine + others) * es);
    return Status();
  });
}

Status MpiCommunicator::AllToAllV(const void* send, std::span<const int64_t> send_counts, void* recv,
                                  std::span<const int64_t> recv_counts, DType dtype, CallerSite where) {
  const char* what = "all_to_all";
  const CallSite site = Site(what);
  const int n = size();
  MF_RETURN_IF_ERROR(CheckCounts(site, "send_counts", send_counts));
  MF_RETURN_IF_ERROR(CheckCounts(site, "recv_counts", recv_counts));
  const int64_t send_total = Sum(send_counts);
  const int64_t recv_total = Sum(recv_counts);
  MF_RETURN_IF_ERROR(CheckIntRange(site, "sum of send_counts", send_total));
  MF_RETURN_IF_ERROR(CheckIntRange(site, "sum of recv_counts", recv_total));
  MF_RETURN_IF_ERROR(CheckBuffer(site, "send", send, send_total));
  MF_RETURN_IF_ERROR(CheckBuffer(site, "recv", recv, recv_total));
  const int64_t es = DTypeSize(dtype);
  return Guarded(what, [&](Call& call) -> Status {
    if (options_.validate) {
      Header h(CollectiveKind::kAllToAll, n);
      h.call.dtype = dtype;
      std::copy(send_counts.begin(), send_counts.end(), h.call.counts.begin());
      std::copy(recv_counts.begin(), recv_counts.end(), h.call.counts2.begin());
      MF_RETURN_IF_ERROR(ExchangeHeaders(call, h, where, nullptr));
    }
    const void* src = send;
    if (Overlap(send, send_total * es, recv, recv_total * es)) {
      std::byte* copy = call.Stage(send_total * es);
      std::memcpy(copy, send, static_cast<size_t>(send_total * es));
      src = copy;
    }
    const std::vector<int> sc = ToInt(send_counts), sd = IntOffsets(send_counts);
    const std::vector<int> rc = ToInt(recv_counts), rd = IntOffsets(recv_counts);
    const BufferPair bufs = Separate(src, send_total * es, recv, recv_total * es);
    MPI_Request req = MPI_REQUEST_NULL;
    MF_RETURN_IF_ERROR(call.Check(MPI_Ialltoallv(bufs.send, sc.data(), sd.data(), MpiType(dtype), bufs.recv, rc.data(),
                                                 rd.data(), MpiType(dtype), comm_, &req),
                                  "MPI_Ialltoallv"));
    MF_RETURN_IF_ERROR(call.Wait(req, "MPI_Ialltoallv"));
    CountBytes((send_total - send_counts[static_cast<size_t>(rank_)]) * es,
               (recv_total - recv_counts[static_cast<size_t>(rank_)]) * es);
    return Status();
  });
}

Status MpiCommunicator::Broadcast(void* buffer, int64_t count, DType dtype, int root, CallerSite where) {
  const char* what = "broadcast";
  const CallSite site = Site(what);
  const int n = size();
  MF_RETURN_IF_ERROR(CheckRoot(site, root));
  MF_RETURN_IF_ERROR(CheckBuffer(site, "buffer", buffer, count));
  MF_RETURN_IF_ERROR(CheckIntRange(site, "count", count));
  const int64_t es = DTypeSize(dtype);
  return Guarded(what, [&](Call& call) -> Status {
    if (options_.validate) {
      Header h(CollectiveKind::kBroadcast, n);
      h.call.dtype = dtype;
      h.call.root = root;
      h.call.count = count;
      MF_RETURN_IF_ERROR(ExchangeHeaders(call, h, where, nullptr));
    }
    MPI_Request req = MPI_REQUEST_NULL;
    MF_RETURN_IF_ERROR(call.Check(
        MPI_Ibcast(NonNull(buffer), static_cast<int>(count), MpiType(dtype), root, comm_, &req), "MPI_Ibcast"));
    MF_RETURN_IF_ERROR(call.Wait(req, "MPI_Ibcast"));
    if (rank_ == root) {
      CountBytes((n - 1) * count * es, 0);
    } else {
      CountBytes(0, count * es);
    }
    return Status();
  });
}

Status MpiCommunicator::Barrier(CallerSite where) {
  const char* what = "barrier";
  return Guarded(what, [&](Call& call) -> Status {
    if (options_.validate) {
      // Receiving every member's header proves that every member has entered the barrier.
      Header h(CollectiveKind::kBarrier, size());
      return ExchangeHeaders(call, h, where, nullptr);
    }
    MPI_Request req = MPI_REQUEST_NULL;
    MF_RETURN_IF_ERROR(call.Check(MPI_Ibarrier(comm_, &req), "MPI_Ibarrier"));
    return call.Wait(req, "MPI_Ibarrier");
  });
}

StatusOr<std::shared_ptr<Communicator>> MpiCommunicator::Split(int color, int key, CallerSite where) {
  const char* what = "split";
  const int n = size();
  std::shared_ptr<Communicator> result;
  Status s = Guarded(what, [&](Call& call) -> Status {
    // The header exchange always runs here (even with validate = false): MPI_Comm_split blocks, so
    // it is entered only once every member is known to have arrived.
    Header h(CollectiveKind::kSplit, n);
    h.color = color;
    h.key = key;
    std::vector<Header> all;
    MF_RETURN_IF_ERROR(ExchangeHeaders(call, h, where, &all));
    std::vector<int> members;  // group ranks of this color, ordered by (key, rank)
    if (color >= 0) {
      for (int r = 0; r < n; ++r) {
        if (all[static_cast<size_t>(r)].color == color) members.push_back(r);
      }
      std::stable_sort(members.begin(), members.end(),
                       [&](int a, int b) { return all[static_cast<size_t>(a)].key < all[static_cast<size_t>(b)].key; });
    }
    MPI_Comm nc = MPI_COMM_NULL;
    MF_RETURN_IF_ERROR(
        call.Check(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &nc), "MPI_Comm_split"));
    if (color < 0) {
      if (nc != MPI_COMM_NULL) MPI_Comm_free(&nc);
      return Status();
    }
    auto owned = std::shared_ptr<MPI_Comm>(new MPI_Comm(nc), [](MPI_Comm* c) {
      if (*c != MPI_COMM_NULL && MpiUsable()) MPI_Comm_free(c);
      delete c;
    });
    MF_RETURN_IF_ERROR(call.Check(MPI_Comm_set_errhandler(nc, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler"));
    int new_rank = 0;
    MF_RETURN_IF_ERROR(call.Check(MPI_Comm_rank(nc, &new_rank), "MPI_Comm_rank"));
    MF_ASSIGN_OR_RETURN(std::vector<int> world, WorldRanksOf(nc, call.Where()));
    std::vector<int> expected;
    for (int r : members) expected.push_back(world_ranks_[static_cast<size_t>(r)]);
    if (world != expected || members[static_cast<size_t>(new_rank)] != rank_) {
      return InternalError(call.Where() + ": MPI_Comm_split produced world ranks " + ListString(world) +
                           " but (color, key) ordering gives " + ListString(expected));
    }
    *owned = MPI_COMM_NULL;  // ownership moves to the communicator
    result = std::shared_ptr<Communicator>(new MpiCommunicator(nc, new_rank, std::move(world), options_));
    return Status();
  });
  MF_RETURN_IF_ERROR(s);
  return result;
}

Status MpiCommunicator::SendRecv(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs, DType dtype) {
  const char* what = "send_recv";
  const std::string where = Describe(what);
  const int64_t es = DTypeSize(dtype);
  const CallSite site = Site(what);
  SelfTransfers self;
  MF_RETURN_IF_ERROR(CheckSendRecv(
      site, sends, recvs,
      [&](const std::string& name, const void* buffer, int64_t count) -> Status {
        MF_RETURN_IF_ERROR(CheckBuffer(site, name.c_str(), buffer, count));
        return CheckIntRange(site, name + " count", count);
      },
      &self));
  const std::vector<const SendSpec*>& self_sends = self.sends;
  const std::vector<const RecvSpec*>& self_recvs = self.recvs;
  return Guarded(what, [&](Call& call) -> Status {
    std::vector<MPI_Request> reqs;
    std::vector<size_t> recv_index;  // reqs[i], i < recv_index.size(): receive recvs[recv_index[i]]
    std::vector<size_t> send_index;  // then the sends
    auto cleanup = [&] {
      for (size_t i = 0; i < reqs.size(); ++i) {
        if (reqs[i] == MPI_REQUEST_NULL) continue;
        if (i < recv_index.size()) MPI_Cancel(&reqs[i]);
        MPI_Request_free(&reqs[i]);
      }
    };
    int64_t sent = 0, received = 0;
    for (size_t i = 0; i < recvs.size(); ++i) {
      const RecvSpec& r = recvs[i];
      if (r.peer == rank_) continue;
      reqs.push_back(MPI_REQUEST_NULL);
      recv_index.push_back(i);
      Status st = call.Check(MPI_Irecv(NonNull(r.buffer), static_cast<int>(r.count), MpiType(dtype), r.peer, kDataTag,
                                       comm_, &reqs.back()),
                             "MPI_Irecv");
      if (!st.ok()) {
        cleanup();
        return st;
      }
      received += r.count * es;
    }
    for (size_t i = 0; i < sends.size(); ++i) {
      const SendSpec& s = sends[i];
      if (s.peer == rank_) continue;
      reqs.push_back(MPI_REQUEST_NULL);
      send_index.push_back(i);
      Status st = call.Check(MPI_Isend(NonNull(s.buffer), static_cast<int>(s.count), MpiType(dtype), s.peer, kDataTag,
                                       comm_, &reqs.back()),
                             "MPI_Isend");
      if (!st.ok()) {
        cleanup();
        return st;
      }
      sent += s.count * es;
    }
    for (size_t k = 0; k < self_sends.size(); ++k) {
      const int64_t bytes = self_sends[k]->count * es;
      if (bytes > 0 && self_recvs[k]->buffer != self_sends[k]->buffer) {
        std::memmove(self_recvs[k]->buffer, self_sends[k]->buffer, static_cast<size_t>(bytes));
      }
    }
    std::vector<MPI_Status> statuses(reqs.size());
    bool timed_out = false;
    Status st = call.Poll(reqs, statuses, "MPI_Test (send_recv)", &timed_out);
    if (!st.ok() || timed_out) {
      std::string waiting, unsent;
      for (size_t i = 0; i < reqs.size(); ++i) {
        if (reqs[i] == MPI_REQUEST_NULL) continue;
        if (i < recv_index.size()) {
          const RecvSpec& r = recvs[recv_index[i]];
          waiting += (waiting.empty() ? "" : ", ") + RankName(r.peer) + " (receive " + std::to_string(recv_index[i]) +
                     ", " + std::to_string(r.count) + " elements)";
        } else {
          const SendSpec& s = sends[send_index[i - recv_index.size()]];
          unsent += (unsent.empty() ? "" : ", ") + RankName(s.peer);
        }
      }
      cleanup();
      if (!st.ok()) return st;
      std::string msg = where + ": timed out after " + call.TimeoutString() + " at " + RankName(rank_) + ":";
      if (!waiting.empty()) msg += " waited for sends from peer " + waiting + ";";
      if (!unsent.empty()) msg += " sends not received by peer " + unsent + ";";
      msg.pop_back();
      return DeadlineExceededError(msg);
    }
    for (size_t i = 0; i < recv_index.size(); ++i) {
      const RecvSpec& r = recvs[recv_index[i]];
      int got = 0;
      MF_RETURN_IF_ERROR(call.Check(MPI_Get_count(&statuses[i], MpiType(dtype), &got), "MPI_Get_count"));
      if (got != r.count) {
        return FailedPreconditionError(
            where + ": " + RankName(r.peer) + " sent " +
            (got == MPI_UNDEFINED ? std::string("a partial element") : std::to_string(got) + " elements") + " of " +
            std::string(DTypeName(dtype)) + " but " + RankName(rank_) + " receives " + std::to_string(r.count) +
            " (receive " + std::to_string(recv_index[i]) + ")");
      }
    }
    CountBytes(sent, received);
    return Status();
  });
}

// ---------------------------------------------------------------------------------------------
// Process-level functions.

Status MpiInit() {
  std::lock_guard<std::mutex> lock(g_init_mu);
  int init = 0, fin = 0;
  MF_RETURN_IF_ERROR(CheckMpi(MPI_Finalized(&fin), "MPI_Finalized", "MpiInit"));
  if (fin) return FailedPreconditionError("MpiInit: MPI is already finalized");
  MF_RETURN_IF_ERROR(CheckMpi(MPI_Initialized(&init), "MPI_Initialized", "MpiInit"));
  if (!init) {
    int provided = 0;
    MF_RETURN_IF_ERROR(
        CheckMpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread", "MpiInit"));
  }
  return CheckMpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler",
                  "MpiInit (MPI_COMM_WORLD)");
}

bool MpiThreadMultiple() {
  if (!MpiUsable()) return false;
  int level = MPI_THREAD_SINGLE;
  if (MPI_Query_thread(&level) != MPI_SUCCESS) return false;
  return level == MPI_THREAD_MULTIPLE;
}

StatusOr<std::shared_ptr<Communicator>> MpiWorld(MpiOptions opts) {
  MF_RETURN_IF_ERROR(MpiInit());
  MF_ASSIGN_OR_RETURN(std::shared_ptr<MpiCommunicator> world, MpiCommunicator::Create(MPI_COMM_WORLD, opts));
  return std::shared_ptr<Communicator>(std::move(world));
}

Status MpiFinalize() {
  std::unique_lock<std::mutex> lock(g_init_mu);
  if (!MpiUsable()) return Status();
  // Finalize only once every rank is known to be finalizing: an MPI_Ibarrier on MPI_COMM_WORLD,
  // polled against the longest communicator timeout. A rank that never arrives (it aborts, died,
  // stalled or skipped MpiFinalize) makes this one abort the job instead of entering an MPI_Finalize
  // that would race the peers' MPI_Abort (OpenMPI/PMIx can then hang or crash in finalize, and
  // mpirun never ends). A peer's MPI_Abort kills this rank while it polls.
  // Twice the longest collective timeout: peers that wait for a rank that skipped its last
  // collectives report it (naming it) before this wait gives up.
  const int64_t longest = g_longest_timeout_ms.load();
  const std::chrono::milliseconds timeout(longest > 0 ? 2 * longest : 60000);
  MPI_Request req = MPI_REQUEST_NULL;
  Status s = CheckMpi(MPI_Ibarrier(MPI_COMM_WORLD, &req), "MPI_Ibarrier", "MpiFinalize");
  const Clock::time_point start = Clock::now();
  for (int it = 0; s.ok(); ++it) {
    int flag = 0;
    s = CheckMpi(MPI_Test(&req, &flag, MPI_STATUS_IGNORE), "MPI_Test", "MpiFinalize");
    if (!s.ok() || flag) break;
    const Clock::time_point now = Clock::now();
    if (now - start >= timeout) {
      const Status fatal = FirstFatal();
      s = DeadlineExceededError("MpiFinalize: not every rank reached MpiFinalize within " +
                                std::to_string(timeout.count()) + " ms; aborting the job instead of finalizing" +
                                (fatal.ok() ? std::string() : " (this rank's first error: " + fatal.ToString() + ")"));
      break;
    }
    Pause(it, now - start);
  }
  if (!s.ok()) {
    lock.unlock();
    MpiAbort(s);
  }
  return CheckMpi(MPI_Finalize(), "MPI_Finalize", "MpiFinalize");
}

MpiFinalizeGuard::~MpiFinalizeGuard() { (void)MpiFinalize(); }

void MpiAbort(const Status& why, int exit_code) {
  int rank = -1;
  const bool usable = MpiUsable();
  if (usable) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "rank %d: aborting the MPI job: %s\n", rank, why.ToString().c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  if (usable) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

}  // namespace meshflow
