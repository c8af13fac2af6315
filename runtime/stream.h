// Streams and events: ordered queues of work on a device, and markers in them.
//
// One interface for every device:
//   - Enqueue(work): `work` runs after everything enqueued on the stream before it.
//   - RecordEvent(): an Event that completes once everything enqueued before it has run.
//   - WaitEvent(e): work enqueued later starts only after `e` completed (a cross-stream edge).
//   - Query() / Synchronize(): is the stream idle / wait until it is.
//
// Implementations:
//   - NewHostStream: a real asynchronous host stream, one worker thread with a FIFO queue. Work
//     runs on the worker, later; the caller continues at once. Used for communication on the host
//     backends (threads, MPI): a collective enqueued on it overlaps with the caller's compute.
//   - NewInlineHostStream: runs work at once on the caller's thread (host compute: the rank's own
//     thread is the compute stream). Its events are complete when recorded; WaitEvent blocks the
//     caller until the event completes.
//   - CUDA streams (runtime/cuda/cuda_device.h): Enqueue calls `work` at once on the caller's
//     thread and `work` must only enqueue device work on native_handle() (kernel launches, async
//     copies, NCCL calls); events are cudaEvent_t, WaitEvent is cudaStreamWaitEvent.
//
// Errors are sticky, as on CUDA streams: once a work item fails, its Status becomes the stream's
// error; the work enqueued after it is skipped (not run), events recorded after it complete with
// that error, a stream that waits on such an event takes the error over, and Synchronize, status()
// and later Enqueue calls return it.
//
//   std::unique_ptr<Stream> comm = NewHostStream("comm");
//   std::vector<float> x(4, 1.0f);
//   MF_RETURN_IF_ERROR(comm->Enqueue([&x]() -> Status {   // runs on the worker thread
//     for (float& v : x) v *= 2;
//     return Status::Ok();
//   }));
//   MF_ASSIGN_OR_RETURN(std::shared_ptr<Event> done, comm->RecordEvent());
//   MF_RETURN_IF_ERROR(done->Synchronize());               // x is {2, 2, 2, 2} from here on
//
// Timeline: with set_record_timeline(true) a stream keeps, per work item (and per blocking wait on
// an inline stream), its label and start and end times (TakeTimeline()), for overlap measurements
// and traces. stats() counts work items, busy time and time spent blocked in waits.
//
// Threading: Enqueue, RecordEvent, WaitEvent, Query and Synchronize may be called from any thread,
// but the order of work is the order of the Enqueue calls, so a stream is normally fed by one
// thread (its rank's). Events may be queried and waited on from any thread.
#ifndef MESHFLOW_RUNTIME_STREAM_H_
#define MESHFLOW_RUNTIME_STREAM_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "meshflow/base/status.h"
#include "meshflow/runtime/device.h"

namespace meshflow {

class Event {
 public:
  virtual ~Event() = default;
  virtual Device device() const = 0;
  // True once every work item enqueued on its stream before the record has run (or been skipped
  // after an error).
  virtual bool Query() const = 0;
  // Blocks the calling thread until the event completes. Returns the stream's error if a work item
  // before the record failed, else OK.
  virtual Status Synchronize() const = 0;
};

// One work item (or, on an inline stream, one blocking wait) on a stream's timeline.
struct StreamRecord {
  const char* label = "";  // the Enqueue label ("wait" for a wait)
  std::chrono::steady_clock::time_point start, end;
};

struct StreamStats {
  int64_t work_items = 0;  // work items run (skipped ones not counted)
  double busy_us = 0;      // time spent running work items
  double wait_us = 0;      // time the stream's thread spent blocked waiting for events
};

class Stream {
 public:
  virtual ~Stream() = default;

  virtual Device device() const = 0;
  virtual const std::string& name() const = 0;

  // Enqueues `work` (see the file comment for when and where it runs). `label` (a string with
  // static storage, or null) names it on the timeline. Returns the stream's sticky error if it has
  // one (the work is then not enqueued), else OK; the work's own Status surfaces later (events,
  // Synchronize) on asynchronous streams and here on inline ones.
  virtual Status Enqueue(std::function<Status()> work, const char* label = nullptr) = 0;

  // Runs `work` in this stream's order and returns once `work` itself has run (so it may capture by
  // reference): an idle asynchronous host stream runs it on the calling thread (no hand-off to the
  // worker; work enqueued meanwhile waits behind it); a busy one queues it and waits for the stream;
  // a device stream calls it at once (the device work it enqueues completes later, in stream
  // order). Returns the stream's error after `work` (its own included).
  virtual Status RunNow(std::function<Status()> work, const char* label = nullptr);

  // An event that completes after the work enqueued so far.
  virtual StatusOr<std::shared_ptr<Event>> RecordEvent() = 0;

  // Work enqueued after this call starts only after `event` completed; an error of the event's
  // stream becomes this stream's error. Errors: a null event (InvalidArgument), the sticky error.
  virtual Status WaitEvent(std::shared_ptr<Event> event) = 0;

  // True when every enqueued work item has run.
  virtual bool Query() = 0;
  // Blocks until every enqueued work item has run; returns the sticky error, else OK.
  virtual Status Synchronize() = 0;
  // The sticky error (OK if none), without waiting.
  virtual Status status() const = 0;

  // The native handle (cudaStream_t for CUDA streams), nullptr for host streams.
  virtual void* native_handle() const { return nullptr; }
  // True when work runs on the caller's thread as it is enqueued (inline host streams).
  virtual bool is_inline() const { return false; }

  // Notes on this stream's timeline and wait time that its thread was blocked on other work from
  // `start` to `end` (an inline stream's caller running a collective: exposed communication).
  // Other streams ignore it.
  virtual void RecordBlocked(const char* label, std::chrono::steady_clock::time_point start,
                             std::chrono::steady_clock::time_point end) {}

  virtual void set_record_timeline(bool on) = 0;
  // The records since the last call (or since recording started), in order.
  virtual std::vector<StreamRecord> TakeTimeline() = 0;
  virtual StreamStats stats() const = 0;
};

// An asynchronous host stream with one worker thread. The destructor waits for the enqueued work
// to finish, then joins the worker. `device` is what device() reports: the host, or (tests,
// runtime/fake_device.h) a device whose memory is host memory.
std::unique_ptr<Stream> NewHostStream(std::string name, Device device = Device::Host());

// A host stream that runs work on the caller's thread as it is enqueued.
std::unique_ptr<Stream> NewInlineHostStream(std::string name);

// An event that is already complete with `status` (for inline streams and tests).
std::shared_ptr<Event> CompletedEvent(Device device, Status status = Status::Ok());

// Makes `waiter` wait for everything enqueued on `producer` so far (RecordEvent + WaitEvent).
Status StreamWaitStream(Stream& waiter, Stream& producer);

}  // namespace meshflow

#endif  // MESHFLOW_RUNTIME_STREAM_H_
