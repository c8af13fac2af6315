// Status and StatusOr<T>: meshflow's error values.
//
// No exception crosses the public API. Every fallible function returns a `Status` or a
// `StatusOr<T>`, both `[[nodiscard]]`, whose message names the offending value, e.g.
//
//   StatusOr<DeviceMesh> mesh = DeviceMesh::Create({2, 0});
//   if (!mesh.ok()) std::cerr << mesh.status();   // INVALID_ARGUMENT: mesh dim 1 has size 0 ...
//
// Helper macros (used inside functions that return Status or StatusOr):
//   MF_RETURN_IF_ERROR(expr);            returns the error of a Status / StatusOr expression
//   MF_ASSIGN_OR_RETURN(lhs, expr);      unwraps a StatusOr or returns its error
#ifndef MESHFLOW_BASE_STATUS_H_
#define MESHFLOW_BASE_STATUS_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

// Every meshflow header includes this one: a consumer that forgets C++20 gets one line naming the
// fix instead of dozens of errors inside meshflow.
#if __cplusplus < 202002L
#error "meshflow needs C++20: compile code that includes meshflow headers with -std=c++20 (Bazel: copts = [\"-std=c++20\"], or MESHFLOW_COPTS from @meshflow//:build_defs.bzl)"
#endif

#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

namespace meshflow {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller passed a bad value (named in the message)
  kOutOfRange,          // an index or rank outside its range
  kFailedPrecondition,  // the call is valid in general but not in this state (e.g. mismatched ranks)
  kNotFound,
  kUnimplemented,
  kDeadlineExceeded,  // a blocking wait timed out (the message names what did not arrive)
  kAborted,           // a peer failed; this operation cannot complete
  kDataLoss,          // corrupted or truncated data
  kInternal,          // a broken invariant inside meshflow (a bug)
  kUnavailable,       // a resource (device, backend) is not present
  kResourceExhausted,  // the request needs more memory (or another resource) than the limit allows
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "CODE: message", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is "context: message" (no-op on OK, and on a message that
  // already starts with "context: ": a status agreed across ranks that names the failing rank,
  // returned by that rank, would otherwise read "rank 0: rank 0: ...").
  Status WithContext(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

std::ostream& operator<<(std::ostream& os, const Status& s);

Status InvalidArgumentError(std::string message);
Status OutOfRangeError(std::string message);
Status FailedPreconditionError(std::string message);
Status NotFoundError(std::string message);
Status UnimplementedError(std::string message);
Status DeadlineExceededError(std::string message);
Status AbortedError(std::string message);
Status DataLossError(std::string message);
Status InternalError(std::string message);
Status UnavailableError(std::string message);
Status ResourceExhaustedError(std::string message);

namespace status_internal {
// Prints "StatusOr::value() on an error: <status>" to stderr and aborts.
[[noreturn]] void DieOnValueOfError(const Status& status);
}  // namespace status_internal

// Either a value of type T or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  // Implicit from an error status (must not be OK) and from a value, as in absl::StatusOr.
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok()) status_ = InternalError("StatusOr constructed from an OK Status without a value");
  }
  StatusOr(const T& value) : value_(value) {}        // NOLINT
  StatusOr(T&& value) : value_(std::move(value)) {}  // NOLINT
  template <typename U>
    requires(std::is_constructible_v<T, U&&> && !std::is_same_v<std::decay_t<U>, T> &&
             !std::is_same_v<std::decay_t<U>, Status> &&
             !std::is_same_v<std::decay_t<U>, StatusOr<T>>)
  StatusOr(U&& value) : value_(T(std::forward<U>(value))) {}  // NOLINT

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  // Precondition: ok(). Checked in every build mode: on an error, value() (and *, ->) prints
  // "StatusOr::value() on an error: <status>" to stderr and aborts, never undefined behaviour.
  const T& value() const& {
    CheckValue();
    return *value_;
  }
  T& value() & {
    CheckValue();
    return *value_;
  }
  T&& value() && {
    CheckValue();
    return std::move(*value_);
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  void CheckValue() const {
    if (!ok()) [[unlikely]] status_internal::DieOnValueOfError(status_);
  }

  Status status_;
  std::optional<T> value_;
};

namespace status_internal {
inline const Status& GetStatus(const Status& s) { return s; }
template <typename T>
const Status& GetStatus(const StatusOr<T>& s) {
  return s.status();
}
}  // namespace status_internal

}  // namespace meshflow

#define MF_STATUS_CONCAT_INNER(a, b) a##b
#define MF_STATUS_CONCAT(a, b) MF_STATUS_CONCAT_INNER(a, b)

// The status is copied (not bound by reference): `expr` may return a reference into a temporary,
// e.g. MF_RETURN_IF_ERROR(loader->Next().status()).
#define MF_RETURN_IF_ERROR(expr)                                                                   \
  do {                                                                                             \
    ::meshflow::Status mf_status_tmp = ::meshflow::status_internal::GetStatus((expr));             \
    if (!mf_status_tmp.ok()) return mf_status_tmp;                                                 \
  } while (0)

#define MF_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

#define MF_ASSIGN_OR_RETURN(lhs, expr) \
  MF_ASSIGN_OR_RETURN_IMPL(MF_STATUS_CONCAT(mf_statusor_, __LINE__), lhs, expr)

#endif  // MESHFLOW_BASE_STATUS_H_
