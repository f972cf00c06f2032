// Status helpers and the mapping from error codes to exit statuses.
#include "core/status.h"

namespace cann {

int Status::exit_code() const {
  switch (code_) {
    case StatusCode::kOk:
      return 0;
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
      return 2;
    default:
      return 1;
  }
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  return message_;
}

Status InvalidArgument(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message));
}
Status NotFound(std::string message) {
  return Status(StatusCode::kNotFound, std::move(message));
}
Status DataLoss(std::string message) {
  return Status(StatusCode::kDataLoss, std::move(message));
}
Status IoError(std::string message) {
  return Status(StatusCode::kIoError, std::move(message));
}
Status FailedPrecondition(std::string message) {
  return Status(StatusCode::kFailedPrecondition, std::move(message));
}
Status Internal(std::string message) {
  return Status(StatusCode::kInternal, std::move(message));
}

}  // namespace cann
