// Event lines: JSON through JsonLine, one write() each.
#include "core/event_log.h"

#include <fcntl.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/json_line.h"

namespace cann {

std::string event_json(const Event& e) {
  JsonLine j;
  j.add("event", e.event).add("time", e.time);
  if (e.rank >= 0) {
    j.add("rank", e.rank);
  } else {
    j.add_raw("rank", "null");
  }
  j.add("generation", e.generation).add("detail", e.detail);
  return j.str();
}

EventLog::~EventLog() {
  if (fd_ >= 0) ::close(fd_);
}

Status EventLog::open(const std::string& path) {
  if (path.empty()) return OkStatus();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return IoError(path + ": cannot open the step log for events: " + errno_text());
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  path_ = path;
  return OkStatus();
}

Status EventLog::append(const Event& e) {
  if (fd_ < 0) return OkStatus();
  const std::string line = event_json(e) + "\n";
  // One write: O_APPEND makes the seek-and-write atomic, so concurrent writers cannot split
  // the line (regular files, lines far below any partial-write limit).
  const ssize_t n = ::write(fd_, line.data(), line.size());
  if (n != static_cast<ssize_t>(line.size()))
    return IoError(path_ + ": cannot write an event: " + errno_text() +
                   "; hint: check free disk space");
  return OkStatus();
}

}  // namespace cann
