#include "meshflow/runtime/stream.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

namespace meshflow {
namespace {

using Clock = std::chrono::steady_clock;

double MicrosBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// An event of a host stream: completed once, by the stream's worker (or at once).
class HostEvent final : public Event {
 public:
  explicit HostEvent(Device device) : device_(device) {}
  HostEvent(Device device, bool done, Status status) : device_(device), done_(done), status_(std::move(status)) {}
  Device device() const override { return device_; }
  bool Query() const override { return done_.load(std::memory_order_acquire); }
  Status Synchronize() const override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_.load(std::memory_order_relaxed); });
    return status_;
  }
  void Complete(Status status) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      status_ = std::move(status);
      done_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
  }

 private:
  const Device device_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::atomic<bool> done_{false};
  Status status_;
};

// Timeline and counters shared by both host stream kinds.
class StreamBook {
 public:
  void set_record(bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    record_ = on;
  }
  std::vector<StreamRecord> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(records_, {});
  }
  StreamStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void Work(const char* label, Clock::time_point start, Clock::time_point end) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.work_items;
    stats_.busy_us += MicrosBetween(start, end);
    if (record_) records_.push_back({label != nullptr ? label : "", start, end});
  }
  void Wait(Clock::time_point start, Clock::time_point end, const char* label = "wait") {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.wait_us += MicrosBetween(start, end);
    if (record_) records_.push_back({label, start, end});
  }

 private:
  mutable std::mutex mu_;
  bool record_ = false;
  std::vector<StreamRecord> records_;
  StreamStats stats_;
};

// One worker thread running a FIFO of items: work, event completions and event waits.
// What both host streams share: the name, the first error (under mu_, which the worker-thread
// stream also uses for its queue) and the timeline book.
class HostStreamBase : public Stream {
 public:
  explicit HostStreamBase(std::string name) : name_(std::move(name)) {}

  const std::string& name() const override { return name_; }
  Status status() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }
  void set_record_timeline(bool on) override { book_.set_record(on); }
  std::vector<StreamRecord> TakeTimeline() override { return book_.Take(); }
  StreamStats stats() const override { return book_.stats(); }

 protected:
  // Keeps the first error, naming the stream; mu_ held.
  void KeepFirstErrorLocked(const Status& s) {
    if (!s.ok() && error_.ok()) error_ = s.WithContext("stream '" + name_ + "'");
  }
  // KeepFirstErrorLocked under the lock; returns the stream's error (OK when s is OK).
  Status Fail(Status s) {
    if (s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    KeepFirstErrorLocked(s);
    return error_;
  }

  const std::string name_;
  mutable std::mutex mu_;
  Status error_;
  StreamBook book_;
};

class HostStream final : public HostStreamBase {
 public:
  HostStream(std::string name, Device device) : HostStreamBase(std::move(name)), device_(device) {
    worker_ = std::thread([this] { Loop(); });
  }
  ~HostStream() override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      idle_cv_.wait(lock, [&] { return pending_ == 0; });
      stop_ = true;
    }
    work_cv_.notify_all();
    worker_.join();
  }

  Device device() const override { return device_; }

  Status Enqueue(std::function<Status()> work, const char* label) override {
    if (!work) return InvalidArgumentError("stream '" + name_ + "': Enqueue of an empty work function");
    Item item;
    item.work = std::move(work);
    item.label = label;
    return Push(std::move(item));
  }

  StatusOr<std::shared_ptr<Event>> RecordEvent() override {
    std::unique_lock<std::mutex> lock(mu_);
    if (pending_ == 0) return std::shared_ptr<Event>(std::make_shared<HostEvent>(device_, true, error_));
    auto event = std::make_shared<HostEvent>(device_);
    Item item;
    item.complete = event;
    q_.push_back(std::move(item));
    ++pending_;
    lock.unlock();
    work_cv_.notify_one();
    return std::shared_ptr<Event>(event);
  }

  Status WaitEvent(std::shared_ptr<Event> event) override {
    if (event == nullptr) return InvalidArgumentError("stream '" + name_ + "': WaitEvent on a null event");
    Item item;
    item.wait = std::move(event);
    return Push(std::move(item));
  }

  Status RunNow(std::function<Status()> work, const char* label) override {
    if (!work) return InvalidArgumentError("stream '" + name_ + "': RunNow of an empty work function");
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!error_.ok()) return error_;
      if (pending_ != 0) {
        lock.unlock();
        MF_RETURN_IF_ERROR(Enqueue(std::move(work), label));
        return Synchronize();
      }
      pending_ = 1;
      inline_ = true;  // the worker starts nothing until this work is done
    }
    const Clock::time_point start = Clock::now();
    Status s = work();
    book_.Work(label, start, Clock::now());
    {
      std::lock_guard<std::mutex> lock(mu_);
      inline_ = false;
      KeepFirstErrorLocked(s);
      s = error_;
      if (--pending_ == 0) idle_cv_.notify_all();
    }
    work_cv_.notify_one();
    return s;
  }

  bool Query() override {
    std::lock_guard<std::mutex> lock(mu_);
    return pending_ == 0;
  }
  Status Synchronize() override {
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait(lock, [&] { return pending_ == 0; });
    return error_;
  }

 private:
  struct Item {
    std::function<Status()> work;
    const char* label = nullptr;
    std::shared_ptr<HostEvent> complete;  // an event marker
    std::shared_ptr<Event> wait;          // a wait on another stream's event
  };

  Status Push(Item item) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_.ok()) return error_;
      q_.push_back(std::move(item));
      ++pending_;
    }
    work_cv_.notify_one();
    return Status::Ok();
  }

  // Runs one item outside the lock; returns its error (OK for markers and skipped work).
  Status Run(Item& item, bool skip) {
    if (item.complete != nullptr) return Status::Ok();  // completed by Loop under the lock
    if (skip) return Status::Ok();
    if (item.wait != nullptr) {
      const Clock::time_point start = Clock::now();
      Status s = item.wait->Synchronize();
      book_.Wait(start, Clock::now());
      return s;
    }
    const Clock::time_point start = Clock::now();
    Status s = item.work();
    book_.Work(item.label, start, Clock::now());
    return s;
  }

  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_cv_.wait(lock, [&] { return (stop_ && q_.empty()) || (!q_.empty() && !inline_); });
      if (q_.empty()) return;  // stop_ and drained
      Item item = std::move(q_.front());
      q_.pop_front();
      const bool skip = !error_.ok();
      if (item.complete != nullptr) {
        item.complete->Complete(error_);
      } else {
        lock.unlock();
        Status s = Run(item, skip);
        item = Item();  // drop the work's captures before the stream counts it done
        lock.lock();
        KeepFirstErrorLocked(s);
      }
      if (--pending_ == 0) idle_cv_.notify_all();
    }
  }

  const Device device_;
  std::condition_variable work_cv_, idle_cv_;
  std::deque<Item> q_;
  int64_t pending_ = 0;  // enqueued items not yet finished (the running one included)
  bool inline_ = false;  // RunNow runs work on its caller's thread
  bool stop_ = false;
  std::thread worker_;
};

// Runs work on the caller's thread.
class InlineHostStream final : public HostStreamBase {
 public:
  explicit InlineHostStream(std::string name) : HostStreamBase(std::move(name)) {}

  Device device() const override { return Device::Host(); }
  bool is_inline() const override { return true; }

  Status Enqueue(std::function<Status()> work, const char* label) override {
    if (!work) return InvalidArgumentError("stream '" + name_ + "': Enqueue of an empty work function");
    MF_RETURN_IF_ERROR(status());
    const Clock::time_point start = Clock::now();
    Status s = work();
    book_.Work(label, start, Clock::now());
    return Fail(std::move(s));
  }
  StatusOr<std::shared_ptr<Event>> RecordEvent() override { return CompletedEvent(Device::Host(), status()); }
  Status WaitEvent(std::shared_ptr<Event> event) override {
    if (event == nullptr) return InvalidArgumentError("stream '" + name_ + "': WaitEvent on a null event");
    MF_RETURN_IF_ERROR(status());
    if (event->Query()) return Fail(event->Synchronize());
    const Clock::time_point start = Clock::now();
    Status s = event->Synchronize();
    book_.Wait(start, Clock::now());
    return Fail(std::move(s));
  }
  bool Query() override { return true; }
  Status Synchronize() override { return status(); }
  void RecordBlocked(const char* label, Clock::time_point start, Clock::time_point end) override {
    book_.Wait(start, end, label != nullptr ? label : "blocked");
  }
};

}  // namespace

std::unique_ptr<Stream> NewHostStream(std::string name, Device device) {
  return std::make_unique<HostStream>(std::move(name), device);
}

std::unique_ptr<Stream> NewInlineHostStream(std::string name) {
  return std::make_unique<InlineHostStream>(std::move(name));
}

std::shared_ptr<Event> CompletedEvent(Device device, Status status) {
  class Done final : public Event {
   public:
    Done(Device d, Status s) : device_(d), status_(std::move(s)) {}
    Device device() const override { return device_; }
    bool Query() const override { return true; }
    Status Synchronize() const override { return status_; }

   private:
    Device device_;
    Status status_;
  };
  return std::make_shared<Done>(device, std::move(status));
}

Status Stream::RunNow(std::function<Status()> work, const char* label) {
  MF_RETURN_IF_ERROR(Enqueue(std::move(work), label));
  return Synchronize();
}

Status StreamWaitStream(Stream& waiter, Stream& producer) {
  if (&waiter == &producer || producer.is_inline()) return Status::Ok();  // inline: nothing pending
  MF_ASSIGN_OR_RETURN(std::shared_ptr<Event> e, producer.RecordEvent());
  return waiter.WaitEvent(std::move(e));
}

}  // namespace meshflow
