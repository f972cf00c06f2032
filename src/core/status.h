// Status and StatusOr: how every expected failure travels up to the user.
//
// A Status carries a code and a one-line message written for the person at the keyboard: what
// is wrong, where, and (after "hint:") what to do. The CLI prints the message as is and maps
// the code to an exit status (kInvalidArgument and kNotFound are usage/config errors: exit 2).
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "core/check.h"

namespace cann {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad flag, bad config value, malformed spec: exit 2
  kNotFound,         // missing file, unknown model or preset name: exit 2
  kDataLoss,         // corrupt or truncated file
  kIoError,          // read/write/fsync failed, disk full
  kFailedPrecondition,
  kInternal,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // The process exit status for this error: 2 for bad usage or configuration, 1 otherwise.
  int exit_code() const;
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() {
  return Status();
}
Status InvalidArgument(std::string message);
Status NotFound(std::string message);
Status DataLoss(std::string message);
Status IoError(std::string message);
Status FailedPrecondition(std::string message);
Status Internal(std::string message);

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    CANN_CHECK(!status_.ok()) << "StatusOr built from an OK status without a value";
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & {
    CANN_CHECK(ok()) << status_.message();
    return *value_;
  }
  const T& value() const& {
    CANN_CHECK(ok()) << status_.message();
    return *value_;
  }
  T&& value() && {
    CANN_CHECK(ok()) << status_.message();
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace cann

#define CANN_CONCAT_INNER(a, b) a##b
#define CANN_CONCAT(a, b) CANN_CONCAT_INNER(a, b)

// Returns early from the enclosing function when `expr` (a Status) is not OK.
#define CANN_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::cann::Status cann_status_ = (expr);        \
    if (!cann_status_.ok()) return cann_status_; \
  } while (0)

// `CANN_ASSIGN_OR_RETURN(auto x, MakeX());` binds the value or returns the error.
#define CANN_ASSIGN_OR_RETURN(lhs, expr) \
  CANN_ASSIGN_OR_RETURN_IMPL(CANN_CONCAT(cann_statusor_, __LINE__), lhs, expr)
#define CANN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
