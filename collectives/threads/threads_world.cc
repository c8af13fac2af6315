#include "meshflow/collectives/threads/threads_world.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "meshflow/collectives/call_check.h"
#include "meshflow/collectives/reduce.h"

namespace meshflow {

namespace threads_internal {

struct RankCounters {
  std::atomic<int64_t> sent{0};
  std::atomic<int64_t> received{0};
};

struct CounterTable {
  explicit CounterTable(int n) : ranks(static_cast<size_t>(n)) {}
  // Bytes moved from `from` (world rank) to `to` (world rank); self-transfers are not counted.
  void Add(int from, int to, int64_t bytes) {
    if (from == to || bytes == 0) return;
    ranks[static_cast<size_t>(from)].sent.fetch_add(bytes, std::memory_order_relaxed);
    ranks[static_cast<size_t>(to)].received.fetch_add(bytes, std::memory_order_relaxed);
  }
  std::vector<RankCounters> ranks;
};

}  // namespace threads_internal

namespace {

using threads_internal::CounterTable;
using Clock = std::chrono::steady_clock;

// Pointer arithmetic that is well defined for null pointers with a zero offset.
const std::byte* At(const void* p, int64_t bytes) {
  return bytes == 0 ? static_cast<const std::byte*>(p) : static_cast<const std::byte*>(p) + bytes;
}
std::byte* At(void* p, int64_t bytes) {
  return bytes == 0 ? static_cast<std::byte*>(p) : static_cast<std::byte*>(p) + bytes;
}
void Copy(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0 && dst != src) std::memmove(dst, src, static_cast<size_t>(bytes));
}
bool Overlap(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  if (a_bytes <= 0 || b_bytes <= 0) return false;
  const auto pa = reinterpret_cast<uintptr_t>(a);
  const auto pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + static_cast<uintptr_t>(b_bytes) && pb < pa + static_cast<uintptr_t>(a_bytes);
}
int64_t Sum(std::span<const int64_t> v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}
// Element offsets of blocks laid out back to back.
std::vector<int64_t> Offsets(std::span<const int64_t> counts) {
  std::vector<int64_t> off(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) off[i + 1] = off[i] + counts[i];
  return off;
}

class GroupState;

// What Run watches: which ranks have returned, their results, and whether the run has failed (a
// rank returned an error, or a group broke: a timeout or a mismatch). Shared by Run, the rank threads
// and every group, so that an abandoned rank thread never touches freed memory. Its mutex is a leaf
// lock (taken under a group's or the run's lock, never the other way round).
struct RunMonitor {
  explicit RunMonitor(int n) : results(static_cast<size_t>(n)), finished(static_cast<size_t>(n), false) {}
  void Fail() {
    std::lock_guard<std::mutex> lock(mu);
    failed = true;
    cv.notify_all();
  }
  void Finish(int rank, Status s) {
    std::lock_guard<std::mutex> lock(mu);
    results[static_cast<size_t>(rank)] = std::move(s);
    finished[static_cast<size_t>(rank)] = true;
    ++done;
    cv.notify_all();
  }
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Status> results;
  std::vector<bool> finished;
  int done = 0;
  bool failed = false;
};

// What one rank posts for a collective.
struct Post {
  CollectiveCall call;  // what the members must agree on (collectives/call_check.h)
  const void* send = nullptr;
  void* recv = nullptr;
  const StridedBlock* send_blocks = nullptr;  // AllToAllStrided: one per member
  int color = 0;
  int key = 0;
  // Published between the mid barrier and the end of the collective.
  const void* staged = nullptr;
  std::shared_ptr<GroupState> new_group;
};

// Element offset of block `to` in the dense send buffer of an AllToAllV post.
int64_t SendOffset(const Post& p, int to) {
  int64_t off = 0;
  for (int t = 0; t < to; ++t) off += p.call.counts[static_cast<size_t>(t)];
  return off;
}

// The post of an all_to_all (AllToAllV and AllToAllStrided): what the members must agree on and
// the buffers.
Post AllToAllPost(DType dtype, std::span<const int64_t> send_counts, std::span<const int64_t> recv_counts,
                  const void* send, void* recv) {
  Post post;
  post.call.kind = CollectiveKind::kAllToAll;
  post.call.dtype = dtype;
  post.call.counts.assign(send_counts.begin(), send_counts.end());
  post.call.counts2.assign(recv_counts.begin(), recv_counts.end());
  post.send = send;
  post.recv = recv;
  return post;
}

// One pending point-to-point message, owned by the sender's SendRecv frame.
struct Message {
  enum class State { kPosted, kCopying, kDone, kFailed };
  const void* buffer = nullptr;
  int64_t count = 0;
  DType dtype = DType::kF32;
  int src = 0;
  int dst = 0;
  State state = State::kPosted;
  Status error;
};

// Shared state of one group (all members hold it through their communicators).
class GroupState {
 public:
  GroupState(std::vector<int> world_ranks, std::chrono::milliseconds timeout, std::shared_ptr<CounterTable> counters,
             std::shared_ptr<RunMonitor> monitor)
      : world_ranks_(std::move(world_ranks)),
        n_(static_cast<int>(world_ranks_.size())),
        timeout_(timeout),
        counters_(std::move(counters)),
        monitor_(std::move(monitor)),
        posts_(static_cast<size_t>(n_)),
        arrived_(static_cast<size_t>(n_), false),
        exited_(static_cast<size_t>(n_), false),
        mailbox_(static_cast<size_t>(n_) * static_cast<size_t>(n_)) {}

  int size() const { return n_; }
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  int world(int r) const { return world_ranks_[static_cast<size_t>(r)]; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  CounterTable& counters() { return *counters_; }
  const std::shared_ptr<CounterTable>& counters_ptr() const { return counters_; }

  // Counts `bytes` moved from group rank `from` to group rank `to`.
  void Count(int from, int to, int64_t bytes) { counters_->Add(world(from), world(to), bytes); }

  // Names a call of group rank `rank` in messages (see collectives/call_check.h).
  CallSite Site(const char* what, int rank = 0) const { return CallSite{"", what, world_ranks_, rank}; }
  std::string Describe(const char* what) const { return Site(what).Describe(); }
  std::string RankName(int r) const { return Site("").RankName(r); }

  // Phase 1: posts `post` for `rank` and waits until every member has posted.
  Status Arrive(int rank, Post post, const char* what) {
    const Clock::time_point deadline = Clock::now() + timeout_;
    std::unique_lock<std::mutex> lock(mu_);
    if (!broken_.ok()) return EnterBrokenError(what);
    posts_[static_cast<size_t>(rank)] = std::move(post);
    arrived_[static_cast<size_t>(rank)] = true;
    if (ArriveLocked()) return Status();
    if (Status s = ExitedMemberErrorLocked(); !s.ok()) {  // a member that returned cannot arrive
      BreakLocked(s);
      return s;
    }
    const uint64_t gen = generation_.load(std::memory_order_relaxed);
    lock.unlock();
    if (AwaitGeneration(gen, kArriveYields)) return Status();
    lock.lock();
    cv_.wait_until(lock, deadline, [&] { return Passed(gen) || !broken_.ok(); });
    if (Passed(gen)) return Status();  // completed (even if broken afterwards)
    if (!broken_.ok()) return WaiterBrokenError(what);
    std::vector<int> missing, missing_world;
    for (int r = 0; r < n_; ++r) {
      if (!arrived_[static_cast<size_t>(r)]) {
        missing.push_back(r);
        missing_world.push_back(world(r));
      }
    }
    broken_ = DeadlineExceededError(Describe(what) + ": timed out after " + std::to_string(timeout_.count()) +
                                    " ms (waiting at " + RankName(rank) + "); group ranks " + ElidedListString(missing) +
                                    " (world ranks " + ElidedListString(missing_world) + ") did not arrive");
    cv_.notify_all();
    monitor_->Fail();
    return broken_;
  }

  // Completion barrier without timeout: only called by ranks that all passed the same Arrive.
  void Sync() {
    std::unique_lock<std::mutex> lock(mu_);
    if (ArriveLocked()) return;
    const uint64_t gen = generation_.load(std::memory_order_relaxed);
    lock.unlock();
    if (AwaitGeneration(gen, kYieldsBeforeSleep)) return;
    lock.lock();
    cv_.wait(lock, [&] { return Passed(gen); });
  }

  const Post& post(int r) const { return posts_[static_cast<size_t>(r)]; }
  // Written by rank `r` only, between Arrive and the following Sync.
  Post& own_post(int r) { return posts_[static_cast<size_t>(r)]; }

  // World rank `world_rank` returned from its rank function: it will not enter another call of this
  // group. Members waiting in a collective for it fail at once (FailedPrecondition naming it), as
  // does every later collective of the group, instead of waiting for the timeout.
  void MemberExited(int world_rank) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = std::find(world_ranks_.begin(), world_ranks_.end(), world_rank);
    if (it == world_ranks_.end()) return;
    exited_[static_cast<size_t>(it - world_ranks_.begin())] = true;
    any_exited_ = true;
    if (count_ > 0) {
      if (Status s = ExitedMemberErrorLocked(); !s.ok()) BreakLocked(s);
    }
  }

  // Marks the group broken (the first reason wins) and wakes every waiter.
  void Break(const Status& why) {
    std::lock_guard<std::mutex> lock(mu_);
    BreakLocked(why);
  }

  // Grouped point-to-point (see the header).
  Status SendRecv(int me, std::span<const SendSpec> sends, std::span<const RecvSpec> recvs, DType dtype);

 private:
  // Counts an arrival; completes the barrier when everyone is there. Requires mu_.
  bool ArriveLocked() {
    if (++count_ < n_) return false;
    count_ = 0;
    std::fill(arrived_.begin(), arrived_.end(), false);
    // Release: a waiter that sees the new generation without the lock (AwaitGeneration) also
    // sees every post made under the lock before it.
    generation_.fetch_add(1, std::memory_order_release);
    cv_.notify_all();
    return true;
  }
  // Whether the barrier of generation `gen` has completed.
  bool Passed(uint64_t gen) const { return generation_.load(std::memory_order_acquire) != gen; }
  // Before sleeping on cv_, a waiter gives its core away up to `yields` times while it watches
  // the generation (no lock held). On an oversubscribed machine the members still to arrive get
  // the core; when the last one arrives within these yields, the waiter returns without a futex
  // sleep and wake-up, which is most of a small collective's latency (bench/README.md, "Barrier
  // wake-ups"). Bounded, so a missing member still ends in the timed wait.
  bool AwaitGeneration(uint64_t gen, int yields) const {
    for (int i = 0; i < yields; ++i) {
      if (Passed(gen)) return true;
      std::this_thread::yield();
    }
    return Passed(gen);
  }
  // cv_.wait_until(lock, deadline, pred) after up to `yields` yields, each with mu_ released and
  // pred checked again under it (SendRecv's waits, whose conditions are mailbox states).
  template <typename Pred>
  bool WaitUntil(std::unique_lock<std::mutex>& lock, Clock::time_point deadline, int yields, Pred pred) {
    for (int i = 0; i < yields && !pred(); ++i) {
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
    }
    return cv_.wait_until(lock, deadline, pred);
  }
  // At the completion barrier (Sync) every member is already inside the same call, so the wait is
  // bounded by its copies: up to 32 yields. At the entry barrier (Arrive), and in SendRecv (whose
  // peer may not have called it yet), the members still to come may be busy outside the library
  // (a rank 0 reading a file, a slower rank's compute), and every yield then costs them CPU: 32
  // yields there made a checkpoint load on 4 ranks and 2 cores 6-9% slower, 4 yields did not,
  // and still catch the peers of a tight loop of collectives that are about to arrive.
  static constexpr int kYieldsBeforeSleep = 32;
  static constexpr int kArriveYields = 4;
  void BreakLocked(const Status& why) {
    if (broken_.ok()) broken_ = why;
    cv_.notify_all();
    monitor_->Fail();
  }
  // With at least one member waiting in a collective: FailedPrecondition when a member that has not
  // arrived has returned from its rank function, else OK. Requires mu_.
  Status ExitedMemberErrorLocked() const {
    if (!any_exited_) return Status();  // every arrival that waits comes here: keep it O(1)
    int gone = -1, first = -1;
    std::vector<int> waiting;
    for (int r = 0; r < n_; ++r) {
      if (arrived_[static_cast<size_t>(r)]) {
        waiting.push_back(world(r));
        if (first < 0) first = r;
      } else if (exited_[static_cast<size_t>(r)] && gone < 0) {
        gone = r;
      }
    }
    if (gone < 0 || first < 0) return Status();
    const CollectiveCall& call = posts_[static_cast<size_t>(first)].call;
    return FailedPreconditionError(Describe(CollectiveKindName(call.kind)) + ": " + RankName(gone) +
                                   " returned from its rank function while world ranks " + ElidedListString(waiting) +
                                   " wait in this collective (first: " + CallDescription(call) +
                                   "); it skipped a collective or returned early");
  }
  // A new call on a broken group.
  Status EnterBrokenError(const char* what) const {
    return AbortedError(Describe(what) + ": the group is broken by an earlier error: " + broken_.ToString());
  }
  // A waiter woken because the group broke during its wait: timeouts and mismatches are reported
  // as they are (they name the collective and the ranks); anything else becomes Aborted.
  Status WaiterBrokenError(const char* what) const {
    if (broken_.code() == StatusCode::kDeadlineExceeded || broken_.code() == StatusCode::kFailedPrecondition) {
      return broken_;
    }
    return AbortedError(Describe(what) + ": " + broken_.message());
  }
  std::deque<Message*>& MailboxOf(int src, int dst) {
    return mailbox_[static_cast<size_t>(src) * static_cast<size_t>(n_) + static_cast<size_t>(dst)];
  }
  // Removes this rank's still-posted messages and waits for those being copied. Requires mu_.
  void WithdrawLocked(std::unique_lock<std::mutex>& lock, std::vector<Message>& msgs) {
    for (Message& m : msgs) {
      if (m.state != Message::State::kPosted) continue;
      std::deque<Message*>& box = MailboxOf(m.src, m.dst);
      box.erase(std::remove(box.begin(), box.end(), &m), box.end());
      m.state = Message::State::kFailed;
    }
    // A copy in progress is bounded (a memcpy): wait without timeout.
    cv_.wait(lock, [&] {
      return std::none_of(msgs.begin(), msgs.end(),
                          [](const Message& m) { return m.state == Message::State::kCopying; });
    });
  }

  const std::vector<int> world_ranks_;
  const int n_;
  const std::chrono::milliseconds timeout_;
  const std::shared_ptr<CounterTable> counters_;
  const std::shared_ptr<RunMonitor> monitor_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Post> posts_;
  std::vector<bool> arrived_;
  std::vector<bool> exited_;  // members whose rank function returned
  bool any_exited_ = false;
  int count_ = 0;
  std::atomic<uint64_t> generation_{0};  // written under mu_; read without it in AwaitGeneration
  Status broken_;
  std::vector<std::deque<Message*>> mailbox_;
};

Status GroupState::SendRecv(int me, std::span<const SendSpec> sends, std::span<const RecvSpec> recvs, DType dtype) {
  const char* what = "send_recv";
  const int64_t es = DTypeSize(dtype);
  // Validation.
  const CallSite site = Site(what, me);
  SelfTransfers self;
  MF_RETURN_IF_ERROR(CheckSendRecv(
      site, sends, recvs,
      [&](const std::string& name, const void* buffer, int64_t count) {
        return CheckSpecBuffer(site, name, buffer, count);
      },
      &self));
  const std::vector<const SendSpec*>& self_sends = self.sends;
  const std::vector<const RecvSpec*>& self_recvs = self.recvs;

  const Clock::time_point deadline = Clock::now() + timeout_;
  std::vector<Message> msgs;
  msgs.reserve(sends.size());  // stable addresses: the mailboxes hold pointers
  std::unique_lock<std::mutex> lock(mu_);
  if (!broken_.ok()) return EnterBrokenError(what);
  // 1. Post every send to a peer.
  for (const SendSpec& s : sends) {
    if (s.peer == me) continue;
    msgs.push_back(Message{s.buffer, s.count, dtype, me, s.peer, Message::State::kPosted, Status()});
    MailboxOf(me, s.peer).push_back(&msgs.back());
  }
  cv_.notify_all();
  // 2. Self transfers (no peer involved).
  lock.unlock();
  for (size_t k = 0; k < self_sends.size(); ++k)
    Copy(self_recvs[k]->buffer, self_sends[k]->buffer, self_sends[k]->count * es);
  lock.lock();
  // 3. Receives, in order.
  Status result;
  for (size_t i = 0; i < recvs.size() && result.ok(); ++i) {
    const RecvSpec& r = recvs[i];
    if (r.peer == me) continue;
    std::deque<Message*>& box = MailboxOf(r.peer, me);
    const bool ready = WaitUntil(lock, deadline, kArriveYields, [&] { return !box.empty() || !broken_.ok(); });
    if (!broken_.ok()) {
      result = WaiterBrokenError(what);
      break;
    }
    if (!ready) {
      result = DeadlineExceededError(Describe(what) + ": timed out after " + std::to_string(timeout_.count()) +
                                     " ms: " + RankName(me) + " waited for a send from peer " + RankName(r.peer) +
                                     " (receive " + std::to_string(i) + ", " + std::to_string(r.count) + " elements)");
      BreakLocked(result);
      break;
    }
    Message* m = box.front();
    box.pop_front();
    if (m->dtype != dtype || m->count != r.count) {
      m->state = Message::State::kFailed;
      result = FailedPreconditionError(Describe(what) + ": " + RankName(m->src) + " sends " + std::to_string(m->count) +
                                       " elements of " + std::string(DTypeName(m->dtype)) + " but " + RankName(me) +
                                       " receives " + std::to_string(r.count) + " elements of " +
                                       std::string(DTypeName(dtype)) + " (receive " + std::to_string(i) + ")");
      m->error = result;
      BreakLocked(result);
      break;
    }
    m->state = Message::State::kCopying;
    lock.unlock();
    Copy(r.buffer, m->buffer, r.count * es);
    Count(r.peer, me, r.count * es);
    lock.lock();
    m->state = Message::State::kDone;
    cv_.notify_all();
  }
  // 4. Wait until every send of this call has been taken.
  if (result.ok()) {
    auto all_done = [&] {
      return std::all_of(msgs.begin(), msgs.end(), [](const Message& m) {
        return m.state == Message::State::kDone || m.state == Message::State::kFailed;
      });
    };
    WaitUntil(lock, deadline, kArriveYields, [&] { return all_done() || !broken_.ok(); });
    for (const Message& m : msgs) {
      if (m.state == Message::State::kFailed && result.ok()) result = m.error;
    }
    if (result.ok() && !all_done()) {
      if (!broken_.ok()) {
        result = WaiterBrokenError(what);
      } else {
        std::string names;
        for (const Message& m : msgs) {
          if (m.state == Message::State::kDone) continue;
          names += (names.empty() ? "" : ", ") + RankName(m.dst);
        }
        result = DeadlineExceededError(Describe(what) + ": timed out after " + std::to_string(timeout_.count()) +
                                       " ms: sends of " + RankName(me) + " were not received by peer " + names);
        BreakLocked(result);
      }
    }
  }
  WithdrawLocked(lock, msgs);
  return result;
}

// This Run's groups, so that a failing rank can abort all of them.
class RunState {
 public:
  RunState(const ThreadWorldOptions& opts, std::shared_ptr<CounterTable> counters, std::shared_ptr<RunMonitor> monitor)
      : timeout_(opts.timeout),
        check_call_sites_(opts.check_call_sites),
        counters_(std::move(counters)),
        monitor_(std::move(monitor)) {}

  bool check_call_sites() const { return check_call_sites_; }
  RunMonitor& monitor() { return *monitor_; }

  std::shared_ptr<GroupState> NewGroup(std::vector<int> world_ranks) {
    auto g = std::make_shared<GroupState>(std::move(world_ranks), timeout_, counters_, monitor_);
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_.ok()) g->Break(aborted_);
    groups_.push_back(g);
    return g;
  }

  // Tells every group that world rank `world_rank` returned from its rank function.
  void RankExited(int world_rank) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::weak_ptr<GroupState>& w : groups_) {
      if (std::shared_ptr<GroupState> g = w.lock()) g->MemberExited(world_rank);
    }
  }

  void Abort(const Status& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.ok()) aborted_ = why;
    for (const std::weak_ptr<GroupState>& w : groups_) {
      if (std::shared_ptr<GroupState> g = w.lock()) g->Break(aborted_);
    }
  }

  CounterTable& counters() { return *counters_; }

 private:
  const std::chrono::milliseconds timeout_;
  const bool check_call_sites_;
  const std::shared_ptr<CounterTable> counters_;
  const std::shared_ptr<RunMonitor> monitor_;
  std::mutex mu_;
  Status aborted_;
  std::vector<std::weak_ptr<GroupState>> groups_;
};

// Checks that every member posted the same collective with agreeing arguments. Every rank runs it
// on the same posts, so every rank reaches the same verdict.
Status ValidatePosts(const GroupState& g) {
  return CheckCallsMatch(g.Site(CollectiveKindName(g.post(0).call.kind)), g.size(),
                         [&g](int r) -> const CollectiveCall& { return g.post(r).call; });
}

// Staging memory of one communicator (uninitialized bytes; grows, never shrinks), reused by its
// calls so that repeated collectives allocate nothing. A call's staging is dead when the call
// returns: peers stop reading it at the call's closing barrier.
class Scratch {
 public:
  std::byte* Get(int64_t bytes) {
    if (bytes > capacity_) {
      data_.reset(new std::byte[static_cast<size_t>(bytes)]);  // default-initialized: no zero-fill
      capacity_ = bytes;
    }
    return data_.get();
  }

 private:
  std::unique_ptr<std::byte[]> data_;
  int64_t capacity_ = 0;
};

class ThreadComm final : public Communicator {
 public:
  ThreadComm(std::shared_ptr<RunState> run, std::shared_ptr<GroupState> group, int rank)
      : run_(std::move(run)), group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  int world_rank() const override { return group_->world(rank_); }
  const std::vector<int>& world_ranks() const override { return group_->world_ranks(); }
  std::string backend() const override { return "threads"; }

  Status AllGatherV(const void* send, int64_t send_count, void* recv, std::span<const int64_t> recv_counts,
                    DType dtype, CallerSite where) override;
  Status ReduceScatterV(const void* send, std::span<const int64_t> counts, void* recv, DType dtype, ReduceOp op,
                        CallerSite where) override;
  Status AllReduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                   CallerSite where) override;
  Status AllToAllV(const void* send, std::span<const int64_t> send_counts, void* recv,
                   std::span<const int64_t> recv_counts, DType dtype, CallerSite where) override;
  Status AllToAllStrided(const void* send, std::span<const StridedBlock> send_blocks, void* recv,
                         std::span<const StridedBlock> recv_blocks, DType dtype, CallerSite where) override;
  bool strided_all_to_all_is_direct() const override { return true; }
  Status Broadcast(void* buffer, int64_t count, DType dtype, int root, CallerSite where) override;
  Status Barrier(CallerSite where) override;
  Status SendRecv(std::span<const SendSpec> sends, std::span<const RecvSpec> recvs, DType dtype) override {
    return group_->SendRecv(rank_, sends, recvs, dtype);
  }
  StatusOr<std::shared_ptr<Communicator>> Split(int color, int key, CallerSite where) override;

  ByteCounters counters() const override {
    const threads_internal::RankCounters& c = run_->counters().ranks[static_cast<size_t>(world_rank())];
    return ByteCounters{c.sent.load(std::memory_order_relaxed), c.received.load(std::memory_order_relaxed)};
  }
  void ResetCounters() override {
    threads_internal::RankCounters& c = run_->counters().ranks[static_cast<size_t>(world_rank())];
    c.sent.store(0, std::memory_order_relaxed);
    c.received.store(0, std::memory_order_relaxed);
  }

 private:
  // Runs one collective: phase 1 (post + wait), validation, `data` (reads peers; may call
  // group_->Sync() as a mid barrier, identically on every rank), phase 2, then `after` (writes
  // that must wait until no peer reads this rank's buffers). A mismatch breaks the group.
  template <typename Data, typename After>
  Status Collective(Post post, const CallerSite& where, Data&& data, After&& after) {
    const char* what = CollectiveKindName(post.call.kind);
    post.call.seq = seq_++;
    if (run_->check_call_sites()) {
      post.call.file = where.file_name();
      post.call.line = where.line;
    }
    MF_RETURN_IF_ERROR(group_->Arrive(rank_, std::move(post), what));
    Status s = ValidatePosts(*group_);
    if (s.ok()) s = data();
    group_->Sync();
    if (!s.ok()) {
      group_->Break(s);
      return s;
    }
    after();
    return Status();
  }

  CallSite Site(const char* what) const { return group_->Site(what, rank_); }

  std::shared_ptr<RunState> run_;
  std::shared_ptr<GroupState> group_;
  int rank_;
  int64_t seq_ = 0;  // sequence number of this communicator's next collective
  Scratch scratch_;  // one call's staging at a time (calls on a communicator are sequential)
};

// The output of a collective whose send and recv buffers overlap goes through a temporary (peers
// still read this rank's send buffer until the closing barrier), copied to recv by Finish().
// The temporary is the communicator's Scratch; the collective writes all recv_bytes of it.
class StagedOutput {
 public:
  StagedOutput(const void* send, int64_t send_bytes, void* recv, int64_t recv_bytes, Scratch& scratch)
      : recv_(recv), bytes_(recv_bytes) {
    if (Overlap(send, send_bytes, recv, recv_bytes)) temp_ = scratch.Get(recv_bytes);
  }
  // Where the collective writes its output.
  void* dst() { return temp_ == nullptr ? recv_ : static_cast<void*>(temp_); }
  // Moves staged output into recv (call once no peer reads this rank's send buffer).
  void Finish() {
    if (temp_ != nullptr) Copy(recv_, temp_, bytes_);
  }

 private:
  void* recv_;
  int64_t bytes_;
  std::byte* temp_ = nullptr;
};

Status ThreadComm::AllGatherV(const void* send, int64_t send_count, void* recv, std::span<const int64_t> recv_counts,
                              DType dtype, CallerSite where) {
  const CallSite site = Site("all_gather");
  MF_RETURN_IF_ERROR(CheckCounts(site, "recv_counts", recv_counts));
  MF_RETURN_IF_ERROR(CheckSendCount(site, send_count, recv_counts));
  const int64_t total = Sum(recv_counts);
  MF_RETURN_IF_ERROR(CheckBuffer(site, "send", send, send_count));
  MF_RETURN_IF_ERROR(CheckBuffer(site, "recv", recv, total));
  const int64_t es = DTypeSize(dtype);
  StagedOutput out(send, send_count * es, recv, total * es, scratch_);
  void* dst = out.dst();
  Post post;
  post.call.kind = CollectiveKind::kAllGather;
  post.call.dtype = dtype;
  post.call.counts.assign(recv_counts.begin(), recv_counts.end());
  post.send = send;
  post.recv = recv;
  const std::vector<int64_t> off = Offsets(recv_counts);
  return Collective(
      std::move(post), where,
      [&]() -> Status {
        for (int q = 0; q < size(); ++q) {
          const int64_t bytes = recv_counts[static_cast<size_t>(q)] * es;
          Copy(At(dst, off[static_cast<size_t>(q)] * es), group_->post(q).send, bytes);
          if (q != rank_) group_->Count(q, rank_, bytes);
        }
        return Status();
      },
      [&] { out.Finish(); });
}

Status ThreadComm::ReduceScatterV(const void* send, std::span<const int64_t> counts, void* recv, DType dtype,
                                  ReduceOp op, CallerSite where) {
  const CallSite site = Site("reduce_scatter");
  MF_RETURN_IF_ERROR(CheckCounts(site, "counts", counts));
  const int64_t total = Sum(counts);
  const int64_t mine = counts[static_cast<size_t>(rank_)];
  MF_RETURN_IF_ERROR(CheckBuffer(site, "send", send, total));
  MF_RETURN_IF_ERROR(CheckBuffer(site, "recv", recv, mine));
  const int64_t es = DTypeSize(dtype);
  StagedOutput out(send, total * es, recv, mine * es, scratch_);
  void* dst = out.dst();
  Post post;
  post.call.kind = CollectiveKind::kReduceScatter;
  post.call.dtype = dtype;
  post.call.op = op;
  post.call.counts.assign(counts.begin(), counts.end());
  post.send = send;
  post.recv = recv;
  const int64_t my_off = Offsets(counts)[static_cast<size_t>(rank_)];
  return Collective(
      std::move(post), where,
      [&]() -> Status {
        std::vector<const void*> inputs(static_cast<size_t>(size()));
        for (int r = 0; r < size(); ++r) {
          inputs[static_cast<size_t>(r)] = At(group_->post(r).send, my_off * es);
          if (r != rank_) group_->Count(r, rank_, mine * es);
        }
        return ReduceBuffers(inputs, dst, mine, dtype, op);
      },
      [&] { out.Finish(); });
}

Status ThreadComm::AllReduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                             CallerSite where) {
  const CallSite site = Site("all_reduce");
  MF_RETURN_IF_ERROR(CheckBuffer(site, "send", send, count));
  MF_RETURN_IF_ERROR(CheckBuffer(site, "recv", recv, count));
  const int64_t es = DTypeSize(dtype);
  const int n = size();
  // torch.chunk chunks: chunk c = [c*chunk, min(count, (c+1)*chunk)).
  const int64_t chunk = (count + n - 1) / n;
  auto begin = [&](int c) { return std::min<int64_t>(count, c * chunk); };
  auto end = [&](int c) { return std::min<int64_t>(count, (c + 1) * chunk); };
  const int64_t mine = end(rank_) - begin(rank_);
  std::byte* const reduced = scratch_.Get(mine * es);  // ReduceBuffers writes all of it
  Post post;
  post.call.kind = CollectiveKind::kAllReduce;
  post.call.dtype = dtype;
  post.call.op = op;
  post.call.count = count;
  post.send = send;
  post.recv = recv;
  return Collective(
      std::move(post), where,
      [&]() -> Status {
        // Reduce-scatter: this rank reduces its chunk, reading every rank's send in rank order.
        std::vector<const void*> inputs(static_cast<size_t>(n));
        for (int r = 0; r < n; ++r) {
          inputs[static_cast<size_t>(r)] = At(group_->post(r).send, begin(rank_) * es);
          if (r != rank_) group_->Count(r, rank_, mine * es);
        }
        Status s = ReduceBuffers(inputs, reduced, mine, dtype, op);
        group_->own_post(rank_).staged = reduced;
        // Mid barrier: every chunk is reduced and nobody reads a send buffer any more, so recv
        // (possibly == send) can be written.
        group_->Sync();
        // All-gather of the reduced chunks.
        for (int c = 0; c < n; ++c) {
          const int64_t bytes = (end(c) - begin(c)) * es;
          Copy(At(recv, begin(c) * es), group_->post(c).staged, bytes);
          if (c != rank_) group_->Count(c, rank_, bytes);
        }
        return s;
      },
      [] {});
}

Status ThreadComm::AllToAllV(const void* send, std::span<const int64_t> send_counts, void* recv,
                             std::span<const int64_t> recv_counts, DType dtype, CallerSite where) {
  const CallSite site = Site("all_to_all");
  MF_RETURN_IF_ERROR(CheckCounts(site, "send_counts", send_counts));
  MF_RETURN_IF_ERROR(CheckCounts(site, "recv_counts", recv_counts));
  const int64_t send_total = Sum(send_counts);
  const int64_t recv_total = Sum(recv_counts);
  MF_RETURN_IF_ERROR(CheckBuffer(site, "send", send, send_total));
  MF_RETURN_IF_ERROR(CheckBuffer(site, "recv", recv, recv_total));
  const int64_t es = DTypeSize(dtype);
  StagedOutput out(send, send_total * es, recv, recv_total * es, scratch_);
  void* dst = out.dst();
  Post post = AllToAllPost(dtype, send_counts, recv_counts, send, recv);
  const std::vector<int64_t> roff = Offsets(recv_counts);
  return Collective(
      std::move(post), where,
      [&]() -> Status {
        for (int s = 0; s < size(); ++s) {
          const Post& p = group_->post(s);
          const int64_t count = recv_counts[static_cast<size_t>(s)];
          const int64_t bytes = count * es;
          if (p.send_blocks != nullptr) {  // the peer called AllToAllStrided
            if (count > 0) {
              CopyStridedBlock(p.send, p.send_blocks[rank_], dst,
                               StridedBlock{roff[static_cast<size_t>(s)], 1, count, count}, es);
            }
          } else {
            Copy(At(dst, roff[static_cast<size_t>(s)] * es), At(p.send, SendOffset(p, rank_) * es), bytes);
          }
          if (s != rank_) group_->Count(s, rank_, bytes);
        }
        return Status();
      },
      [&] { out.Finish(); });
}

// Each receiver copies its blocks straight from the senders' strided blocks (one copy per element).
// Send and recv regions that overlap go through the base version (pack, AllToAllV, unpack).
Status ThreadComm::AllToAllStrided(const void* send, std::span<const StridedBlock> send_blocks, void* recv,
                                   std::span<const StridedBlock> recv_blocks, DType dtype, CallerSite where) {
  const CallSite site = Site("all_to_all");
  std::vector<int64_t> send_counts, recv_counts;
  MF_RETURN_IF_ERROR(CheckStridedBlocks(send_blocks, recv_blocks, size(), send_counts, recv_counts));
  int64_t send_extent = 0, recv_extent = 0;  // elements from the buffer start
  for (size_t q = 0; q < send_counts.size(); ++q) {
    if (send_counts[q] > 0) send_extent = std::max(send_extent, send_blocks[q].offset + send_blocks[q].extent());
    if (recv_counts[q] > 0) recv_extent = std::max(recv_extent, recv_blocks[q].offset + recv_blocks[q].extent());
  }
  MF_RETURN_IF_ERROR(CheckBuffer(site, "send", send, send_extent));
  MF_RETURN_IF_ERROR(CheckBuffer(site, "recv", recv, recv_extent));
  const int64_t es = DTypeSize(dtype);
  if (Overlap(send, send_extent * es, recv, recv_extent * es)) {
    return Communicator::AllToAllStrided(send, send_blocks, recv, recv_blocks, dtype, where);
  }
  Post post = AllToAllPost(dtype, send_counts, recv_counts, send, recv);
  post.send_blocks = send_blocks.data();
  return Collective(
      std::move(post), where,
      [&]() -> Status {
        for (int s = 0; s < size(); ++s) {
          const Post& p = group_->post(s);
          const size_t q = static_cast<size_t>(s);
          if (recv_counts[q] == 0) continue;
          // A peer that called AllToAllV sends its dense block rank_.
          const StridedBlock from = p.send_blocks != nullptr
                                        ? p.send_blocks[rank_]
                                        : StridedBlock{SendOffset(p, rank_), 1, recv_counts[q], recv_counts[q]};
          CopyStridedBlock(p.send, from, recv, recv_blocks[q], es);
          if (s != rank_) group_->Count(s, rank_, recv_counts[q] * es);
        }
        return Status();
      },
      [] {});
}

Status ThreadComm::Broadcast(void* buffer, int64_t count, DType dtype, int root, CallerSite where) {
  const CallSite site = Site("broadcast");
  MF_RETURN_IF_ERROR(CheckRoot(site, root));
  MF_RETURN_IF_ERROR(CheckBuffer(site, "buffer", buffer, count));
  const int64_t es = DTypeSize(dtype);
  Post post;
  post.call.kind = CollectiveKind::kBroadcast;
  post.call.dtype = dtype;
  post.call.count = count;
  post.call.root = root;
  post.send = buffer;
  post.recv = buffer;
  return Collective(
      std::move(post), where,
      [&]() -> Status {
        if (rank_ != root) {
          Copy(buffer, group_->post(root).send, count * es);
          group_->Count(root, rank_, count * es);
        }
        return Status();
      },
      [] {});
}

Status ThreadComm::Barrier(CallerSite where) {
  Post post;
  post.call.kind = CollectiveKind::kBarrier;
  return Collective(
      std::move(post), where, []() -> Status { return Status(); }, [] {});
}

StatusOr<std::shared_ptr<Communicator>> ThreadComm::Split(int color, int key, CallerSite where) {
  Post post;
  post.call.kind = CollectiveKind::kSplit;
  post.color = color;
  post.key = key;
  std::shared_ptr<GroupState> mine;
  int my_index = -1;
  Status s = Collective(
      std::move(post), where,
      [&]() -> Status {
        std::vector<int> members;  // group ranks of this color, ordered by (key, rank)
        if (color >= 0) {
          for (int r = 0; r < size(); ++r) {
            if (group_->post(r).color == color) members.push_back(r);
          }
          std::stable_sort(members.begin(), members.end(),
                           [&](int a, int b) { return group_->post(a).key < group_->post(b).key; });
          my_index = static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
          if (my_index == 0) {
            std::vector<int> world;
            for (int r : members) world.push_back(group_->world(r));
            group_->own_post(rank_).new_group = run_->NewGroup(std::move(world));
          }
        }
        group_->Sync();  // every leader has published its group
        if (color >= 0) mine = group_->post(members[0]).new_group;
        return Status();
      },
      [] {});
  MF_RETURN_IF_ERROR(s);
  // Drop the published pointer so that the group's lifetime follows its communicators only.
  group_->own_post(rank_).new_group.reset();
  if (color < 0) return std::shared_ptr<Communicator>();
  return std::shared_ptr<Communicator>(std::make_shared<ThreadComm>(run_, std::move(mine), my_index));
}

}  // namespace

ThreadWorld::ThreadWorld(int n, ThreadWorldOptions opts)
    : n_(n), options_(opts), counters_(std::make_shared<threads_internal::CounterTable>(n)) {}

ThreadWorld::~ThreadWorld() = default;

StatusOr<std::unique_ptr<ThreadWorld>> ThreadWorld::Create(int n, ThreadWorldOptions opts) {
  if (n < 1) return InvalidArgumentError("ThreadWorld: world size " + std::to_string(n) + " must be >= 1");
  if (opts.timeout.count() <= 0) {
    return InvalidArgumentError("ThreadWorld: timeout " + std::to_string(opts.timeout.count()) +
                                " ms must be positive");
  }
  return std::unique_ptr<ThreadWorld>(new ThreadWorld(n, opts));
}

Status ThreadWorld::Run(std::function<Status(Communicator& world_comm)> fn) {
  if (!fn) return InvalidArgumentError("ThreadWorld::Run: empty function");
  std::lock_guard<std::mutex> run_lock(run_mu_);
  if (!broken_.ok()) {
    return FailedPreconditionError("ThreadWorld::Run: the world is broken by an earlier Run and cannot run again: " +
                                   broken_.message());
  }
  // Everything a rank thread touches is shared (not on this stack frame): a rank that never returns
  // is abandoned (detached) and may outlive this call.
  auto monitor = std::make_shared<RunMonitor>(n_);
  auto run = std::make_shared<RunState>(options_, counters_, monitor);
  auto shared_fn = std::make_shared<std::function<Status(Communicator&)>>(std::move(fn));
  std::vector<int> all(static_cast<size_t>(n_));
  for (int i = 0; i < n_; ++i) all[static_cast<size_t>(i)] = i;
  std::shared_ptr<GroupState> world_group = run->NewGroup(std::move(all));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n_));
  for (int i = 0; i < n_; ++i) {
    threads.emplace_back([run, world_group, shared_fn, i] {
      Status s;
      {
        ThreadComm comm(run, world_group, i);
        // An exception must not cross the thread boundary (std::terminate): it becomes this rank's
        // status, and aborts the world like any error.
        try {
          s = (*shared_fn)(comm);
        } catch (const std::exception& e) {
          s = InternalError(std::string("the rank's function threw an exception: ") + e.what());
        } catch (...) {
          s = InternalError("the rank's function threw an exception that is not a std::exception");
        }
      }
      if (!s.ok()) run->Abort(AbortedError("rank " + std::to_string(i) + " failed: " + s.ToString()));
      run->RankExited(i);
      run->monitor().Finish(i, std::move(s));
    });
  }
  // Wait for every rank; once the run has failed (a rank returned an error, or a group broke on a
  // timeout or a mismatch), the ranks still running get one more timeout to return: a rank stuck
  // outside the library (user code) is then abandoned.
  std::vector<Status> results;
  std::vector<bool> finished;
  {
    std::unique_lock<std::mutex> lock(monitor->mu);
    monitor->cv.wait(lock, [&] { return monitor->done == n_ || monitor->failed; });
    if (monitor->done < n_) {
      monitor->cv.wait_for(lock, options_.timeout, [&] { return monitor->done == n_; });
    }
    results = monitor->results;
    finished = monitor->finished;
  }
  std::vector<int> stuck;
  for (int i = 0; i < n_; ++i) {
    std::thread& t = threads[static_cast<size_t>(i)];
    if (finished[static_cast<size_t>(i)]) {
      t.join();  // it has recorded its result; join waits only for the thread's exit
    } else {
      stuck.push_back(i);
      t.detach();
    }
  }
  std::string first_error;
  for (int i = 0; i < n_; ++i) {
    const Status& s = results[static_cast<size_t>(i)];
    if (!s.ok() && finished[static_cast<size_t>(i)]) {
      if (stuck.empty()) return s.WithContext("rank " + std::to_string(i));
      if (first_error.empty()) first_error = "rank " + std::to_string(i) + ": " + s.ToString();
    }
  }
  if (stuck.empty()) return Status();
  broken_ = DeadlineExceededError(
      "ThreadWorld::Run: " + (stuck.size() > 1 ? "ranks " + ElidedListString(stuck) : "rank " + std::to_string(stuck[0])) +
      " did not return within " + std::to_string(options_.timeout.count()) +
      " ms after the run failed (stuck outside the library, e.g. in user code); " +
      (stuck.size() > 1 ? "their threads are" : "its thread is") +
      " detached and abandoned, and this world is broken (later Run calls fail); first error: " +
      (first_error.empty() ? std::string("none returned") : first_error));
  return broken_;
}

ByteCounters ThreadWorld::counters(int world_rank) const {
  assert(world_rank >= 0 && world_rank < n_);
  if (world_rank < 0 || world_rank >= n_) return ByteCounters{};
  const threads_internal::RankCounters& c = counters_->ranks[static_cast<size_t>(world_rank)];
  return ByteCounters{c.sent.load(std::memory_order_relaxed), c.received.load(std::memory_order_relaxed)};
}

void ThreadWorld::ResetCounters() {
  for (threads_internal::RankCounters& c : counters_->ranks) {
    c.sent.store(0, std::memory_order_relaxed);
    c.received.store(0, std::memory_order_relaxed);
  }
}

}  // namespace meshflow
