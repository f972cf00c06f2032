// FlightRecorder: the last N operations of a group, with when each was issued, started and
// finished. It answers "where is this rank in the collective sequence" for hang diagnosis
// (debug/hang_analysis.h): a rank stuck in all-reduce #1234 shows it started and not finished;
// a rank that never got there shows #1233 as its last completed.
//
// Thread safety: all methods lock mutex_; recording costs one lock and a ring-buffer write.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace cann::comm {

struct FlightEntry {
  uint64_t seq = 0;
  std::string op;  // "allreduce", "send", ...
  std::string tag;
  uint64_t bytes = 0;
  double enqueued = 0.0;   // Unix seconds
  double started = 0.0;    // 0: not started
  double completed = 0.0;  // 0: not completed
  bool ok = true;
};

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity = 512) : ring_(capacity) {}

  void set_group(std::string name, int rank, int size);
  void enqueued(uint64_t seq, const std::string& op, const std::string& tag, uint64_t bytes);
  void started(uint64_t seq);
  void completed(uint64_t seq, bool ok);

  // {"group","rank","size","last_enqueued","last_started","last_completed","in_flight":[...]}
  // where in_flight lists the entries issued but not completed, oldest first.
  std::string summary_json() const;
  // Every entry still in the ring, oldest first (for a full dump).
  std::vector<FlightEntry> entries() const;

 private:
  FlightEntry* find(uint64_t seq);

  mutable std::mutex mutex_;
  std::string group_ = "group";
  int rank_ = 0, size_ = 1;
  std::vector<FlightEntry> ring_;
  uint64_t last_enqueued_ = 0, last_started_ = 0, last_completed_ = 0;
};

}  // namespace cann::comm
