#include "meshflow/runtime/stream.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace meshflow {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;  // NOLINT: literals only

// A latch that work items block on, so a test controls when a stream's worker proceeds.
class Gate {
 public:
  void Open() { open_.store(true); }
  void Wait() const {
    while (!open_.load()) std::this_thread::sleep_for(100us);
  }

 private:
  std::atomic<bool> open_{false};
};

TEST(HostStreamTest, RunsWorkInFifoOrderOnItsOwnThread) {
  std::unique_ptr<Stream> s = NewHostStream("s");
  std::vector<int> order;
  std::thread::id worker;
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(s->Enqueue([&order, &worker, i]() {
                   order.push_back(i);
                   worker = std::this_thread::get_id();
                   return Status::Ok();
                 }).ok());
  }
  ASSERT_TRUE(s->Synchronize().ok());
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  EXPECT_NE(worker, std::this_thread::get_id());
  EXPECT_EQ(s->device(), Device::Host());
  EXPECT_EQ(s->name(), "s");
  EXPECT_FALSE(s->is_inline());
}

TEST(HostStreamTest, EnqueueReturnsBeforeTheWorkRuns) {
  std::unique_ptr<Stream> s = NewHostStream("s");
  Gate gate;
  std::atomic<bool> ran{false};
  ASSERT_TRUE(s->Enqueue([&]() {
                 gate.Wait();
                 ran.store(true);
                 return Status::Ok();
               }).ok());
  StatusOr<std::shared_ptr<Event>> e = s->RecordEvent();
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE(ran.load());
  EXPECT_FALSE((*e)->Query());
  EXPECT_FALSE(s->Query());
  gate.Open();
  EXPECT_TRUE((*e)->Synchronize().ok());
  EXPECT_TRUE(ran.load());
  EXPECT_TRUE((*e)->Query());
  EXPECT_TRUE(s->Query());
}

TEST(HostStreamTest, WaitEventOrdersWorkAcrossStreams) {
  std::unique_ptr<Stream> a = NewHostStream("a"), b = NewHostStream("b");
  int value = 0;  // written on a's worker, read on b's: the event is the only ordering
  ASSERT_TRUE(a->Enqueue([&]() {
                 std::this_thread::sleep_for(20ms);
                 value = 42;
                 return Status::Ok();
               }).ok());
  StatusOr<std::shared_ptr<Event>> e = a->RecordEvent();
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE(b->WaitEvent(*e).ok());
  int seen = -1;
  ASSERT_TRUE(b->Enqueue([&]() {
                 seen = value;
                 return Status::Ok();
               }).ok());
  ASSERT_TRUE(b->Synchronize().ok());
  EXPECT_EQ(seen, 42);
  EXPECT_GE(b->stats().wait_us, 1000.0);  // b's worker blocked on a
}

TEST(HostStreamTest, ErrorsAreSticky) {
  std::unique_ptr<Stream> s = NewHostStream("s");
  std::atomic<int> after{0};
  ASSERT_TRUE(s->Enqueue([]() { return InternalError("boom"); }).ok());
  StatusOr<std::shared_ptr<Event>> e = s->RecordEvent();
  ASSERT_TRUE(e.ok());
  (void)s->Enqueue([&]() {
    ++after;
    return Status::Ok();
  });
  const Status sync = s->Synchronize();
  EXPECT_EQ(sync.code(), StatusCode::kInternal);
  EXPECT_THAT(sync.message(), HasSubstr("boom"));
  EXPECT_THAT(sync.message(), HasSubstr("stream 's'"));
  EXPECT_EQ(after.load(), 0);  // skipped
  EXPECT_EQ((*e)->Synchronize().code(), StatusCode::kInternal);
  EXPECT_EQ(s->Enqueue([]() { return Status::Ok(); }).code(), StatusCode::kInternal);
  EXPECT_EQ(s->status().code(), StatusCode::kInternal);
  // A stream that waits on the failed stream's event takes the error over.
  std::unique_ptr<Stream> t = NewHostStream("t");
  ASSERT_TRUE(t->WaitEvent(*e).ok());
  EXPECT_THAT(t->Synchronize().message(), HasSubstr("boom"));
}

TEST(HostStreamTest, BadArguments) {
  std::unique_ptr<Stream> s = NewHostStream("s");
  EXPECT_EQ(s->Enqueue(nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->WaitEvent(nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->RunNow(nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(s->Synchronize().ok());  // none of them broke the stream
}

TEST(HostStreamTest, RunNowRunsOnTheCallerWhenIdleAndQueuesOtherwise) {
  std::unique_ptr<Stream> s = NewHostStream("s");
  std::thread::id ran_on;
  ASSERT_TRUE(s->RunNow([&]() {
                 ran_on = std::this_thread::get_id();
                 return Status::Ok();
               }).ok());
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  Gate gate;
  std::vector<int> order;
  ASSERT_TRUE(s->Enqueue([&]() {
                 gate.Wait();
                 order.push_back(1);
                 return Status::Ok();
               }).ok());
  std::thread opener([&] {
    std::this_thread::sleep_for(10ms);
    gate.Open();
  });
  ASSERT_TRUE(s->RunNow([&]() {
                 order.push_back(2);
                 ran_on = std::this_thread::get_id();
                 return Status::Ok();
               }).ok());
  opener.join();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));  // behind the queued work
  EXPECT_NE(ran_on, std::this_thread::get_id());
  EXPECT_EQ(s->RunNow([]() { return InternalError("x"); }).code(), StatusCode::kInternal);
  EXPECT_EQ(s->status().code(), StatusCode::kInternal);
}

TEST(HostStreamTest, DestructorFinishesTheQueuedWork) {
  std::atomic<int> ran{0};
  {
    std::unique_ptr<Stream> s = NewHostStream("s");
    for (int i = 0; i < 20; ++i) {
      ASSERT_TRUE(s->Enqueue([&]() {
                     std::this_thread::sleep_for(100us);
                     ++ran;
                     return Status::Ok();
                   }).ok());
    }
  }
  EXPECT_EQ(ran.load(), 20);
}

TEST(HostStreamTest, TimelineRecordsEveryItemInOrder) {
  std::unique_ptr<Stream> s = NewHostStream("s");
  s->set_record_timeline(true);
  ASSERT_TRUE(s->Enqueue([]() { return Status::Ok(); }, "first").ok());
  ASSERT_TRUE(s->Enqueue([]() { return Status::Ok(); }, "second").ok());
  ASSERT_TRUE(s->Synchronize().ok());
  std::vector<StreamRecord> t = s->TakeTimeline();
  ASSERT_EQ(t.size(), 2u);
  EXPECT_STREQ(t[0].label, "first");
  EXPECT_STREQ(t[1].label, "second");
  EXPECT_LE(t[0].start, t[0].end);
  EXPECT_LE(t[0].end, t[1].start);
  EXPECT_TRUE(s->TakeTimeline().empty());
  EXPECT_EQ(s->stats().work_items, 2);
}

TEST(InlineHostStreamTest, RunsOnTheCallerAndWaitsBlockIt) {
  std::unique_ptr<Stream> compute = NewInlineHostStream("compute");
  std::unique_ptr<Stream> comm = NewHostStream("comm");
  EXPECT_TRUE(compute->is_inline());
  std::thread::id ran_on;
  ASSERT_TRUE(compute->Enqueue([&]() {
                        ran_on = std::this_thread::get_id();
                        return Status::Ok();
                      }).ok());
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  StatusOr<std::shared_ptr<Event>> own = compute->RecordEvent();
  ASSERT_TRUE(own.ok());
  EXPECT_TRUE((*own)->Query());  // nothing is ever pending on an inline stream
  int value = 0;
  ASSERT_TRUE(comm->Enqueue([&]() {
                     std::this_thread::sleep_for(20ms);
                     value = 7;
                     return Status::Ok();
                   }).ok());
  compute->set_record_timeline(true);
  ASSERT_TRUE(StreamWaitStream(*compute, *comm).ok());  // blocks the caller
  EXPECT_EQ(value, 7);
  std::vector<StreamRecord> t = compute->TakeTimeline();
  ASSERT_EQ(t.size(), 1u);
  EXPECT_STREQ(t[0].label, "wait");
  EXPECT_GE(compute->stats().wait_us, 1000.0);
  EXPECT_EQ(compute->Enqueue([]() { return InternalError("bad"); }).code(), StatusCode::kInternal);
  EXPECT_EQ(compute->Synchronize().code(), StatusCode::kInternal);
}

TEST(EventTest, CompletedEventCarriesItsStatus) {
  std::shared_ptr<Event> ok = CompletedEvent(Device::Host());
  EXPECT_TRUE(ok->Query());
  EXPECT_TRUE(ok->Synchronize().ok());
  std::shared_ptr<Event> bad = CompletedEvent(Device::Cuda(1), UnavailableError("gone"));
  EXPECT_EQ(bad->device(), Device::Cuda(1));
  EXPECT_EQ(bad->Synchronize().code(), StatusCode::kUnavailable);
}

// ---- Property test: random DAGs of work over several streams with event waits equal the serial
// result. Task i runs on stream stream_of[i] and combines the values of its dependencies (earlier
// tasks); a dependency on another stream is honoured only through an event recorded right after
// that task and waited on by the dependent task's stream. Values are relaxed atomics, so a missing
// wait shows up as a wrong (unset or stale) value, not as undefined behaviour.

struct Dag {
  int streams = 0;
  std::vector<int> stream_of;
  std::vector<std::vector<int>> deps;
  std::vector<int> sleep_us;
};

Dag RandomDag(std::mt19937_64& rng) {
  Dag d;
  d.streams = 2 + static_cast<int>(rng() % 3);
  const int n = 4 + static_cast<int>(rng() % 24);
  for (int i = 0; i < n; ++i) {
    d.stream_of.push_back(static_cast<int>(rng() % static_cast<uint64_t>(d.streams)));
    std::vector<int> deps;
    const int k = i == 0 ? 0 : static_cast<int>(rng() % 4);
    for (int j = 0; j < k; ++j) deps.push_back(static_cast<int>(rng() % static_cast<uint64_t>(i)));
    d.deps.push_back(deps);
    d.sleep_us.push_back(rng() % 4 == 0 ? static_cast<int>(rng() % 300) : 0);
  }
  return d;
}

uint64_t Combine(int i, const std::vector<uint64_t>& dep_values) {
  uint64_t h = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(i + 1);
  for (uint64_t v : dep_values) h = (h ^ v) * 0x100000001B3ull + 0x7F4A7C15ull;
  return h | 1;  // never 0, the "unset" value
}

std::vector<uint64_t> SerialResult(const Dag& d) {
  std::vector<uint64_t> v(d.stream_of.size());
  for (size_t i = 0; i < v.size(); ++i) {
    std::vector<uint64_t> in;
    for (int dep : d.deps[i]) in.push_back(v[static_cast<size_t>(dep)]);
    v[i] = Combine(static_cast<int>(i), in);
  }
  return v;
}

// Runs the DAG on host streams; `drop_wait` (a task index, or -1) leaves out that task's
// cross-stream waits (the mutation the property must catch).
std::vector<uint64_t> StreamResult(const Dag& d, int drop_wait) {
  std::vector<std::unique_ptr<Stream>> streams;
  for (int s = 0; s < d.streams; ++s) streams.push_back(NewHostStream("s" + std::to_string(s)));
  const size_t n = d.stream_of.size();
  std::vector<std::atomic<uint64_t>> v(n);
  std::vector<std::shared_ptr<Event>> after(n);
  for (size_t i = 0; i < n; ++i) {
    Stream& s = *streams[static_cast<size_t>(d.stream_of[i])];
    for (int dep : d.deps[i]) {
      if (d.stream_of[static_cast<size_t>(dep)] == d.stream_of[i] || static_cast<int>(i) == drop_wait) continue;
      EXPECT_TRUE(s.WaitEvent(after[static_cast<size_t>(dep)]).ok());
    }
    EXPECT_TRUE(s.Enqueue([&v, &d, i]() {
                   if (d.sleep_us[i] > 0) std::this_thread::sleep_for(std::chrono::microseconds(d.sleep_us[i]));
                   std::vector<uint64_t> in;
                   for (int dep : d.deps[i]) in.push_back(v[static_cast<size_t>(dep)].load(std::memory_order_relaxed));
                   v[i].store(Combine(static_cast<int>(i), in), std::memory_order_relaxed);
                   return Status::Ok();
                 }).ok());
    StatusOr<std::shared_ptr<Event>> e = s.RecordEvent();
    EXPECT_TRUE(e.ok());
    after[i] = *e;
  }
  for (auto& s : streams) EXPECT_TRUE(s->Synchronize().ok());
  std::vector<uint64_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = v[i].load();
  return out;
}

TEST(StreamPropertyTest, RandomDagsEqualTheSerialResult) {
  std::mt19937_64 rng(20261207);
  for (int c = 0; c < 1000; ++c) {
    const Dag d = RandomDag(rng);
    ASSERT_EQ(StreamResult(d, -1), SerialResult(d)) << "case " << c;
  }
}

// The property can fail: a DAG whose consumer depends on a slow producer on another stream gives a
// wrong value when the consumer's wait is dropped.
TEST(StreamPropertyTest, AMissingWaitIsCaught) {
  Dag d;
  d.streams = 2;
  d.stream_of = {0, 1};
  d.deps = {{}, {0}};
  d.sleep_us = {50000, 0};  // the producer takes 50 ms; the consumer does not wait for it
  EXPECT_EQ(StreamResult(d, -1), SerialResult(d));
  EXPECT_NE(StreamResult(d, /*drop_wait=*/1), SerialResult(d));
}

}  // namespace
}  // namespace meshflow
