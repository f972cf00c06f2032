// Fault-tolerance events in the JSONL step log: one object per line,
//   {"event": "failure_detected", "time": 1767000000.123, "rank": 1, "generation": 0,
//    "detail": "rank 1 (pid 4242) was killed by signal 9 (KILL)"}
// written by the agent (failures, rendezvous) and by rank 0 (restores, checkpoints) into the
// same file. Each line goes out in one write() on a descriptor opened with O_APPEND, so lines
// from several processes and threads never interleave or overwrite each other.
//
// Thread safety: append() may be called from any thread.
#pragma once

#include <string>

#include "core/status.h"

namespace cann {

struct Event {
  std::string event;  // failure_detected, rendezvous_complete, state_restored, ...
  double time = 0.0;  // Unix seconds
  int rank = -1;      // -1: the whole job (written as null)
  int generation = 0;
  std::string detail;
};

std::string event_json(const Event& e);

class EventLog {
 public:
  EventLog() = default;
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;
  // Opens `path` for appending (created if missing); an empty path makes append() a no-op.
  Status open(const std::string& path);
  bool is_open() const { return fd_ >= 0; }
  // Appends one event line; also logged at info level. Errors are returned, never thrown.
  Status append(const Event& e);

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace cann
