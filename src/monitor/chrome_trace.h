// RankTrace: the events one rank records while profiling, written as a Chrome trace (the JSON
// "Trace Event Format" that Perfetto and chrome://tracing open), and the merge of several
// ranks' traces into one file with a process per rank.
//
// Layout of a written trace: {"displayTimeUnit":"ms","otherData":{...},"traceEvents":[...]}.
// Every event is a complete event ("ph":"X") with "ts" and "dur" in microseconds of Unix time
// (CLOCK_REALTIME), so the ranks of a job line up when merged: their clocks differ only by the
// machines' NTP error. "pid" is the rank; "tid" is the track (compute, collectives, p2p send,
// p2p receive, checkpoint), named by "thread_name" metadata events, and the process by a
// "process_name" event ("rank 3 (host h2)").
//
// Thread safety: none; one thread records (the training loop).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace cann::monitor {

enum class TraceTrack { kCompute = 1, kCollective = 2, kSend = 3, kRecv = 4, kCheckpoint = 5 };

// The track's name in a trace ("compute", "collectives", ...).
const char* trace_track_name(TraceTrack track);

struct TraceArg {
  std::string key;
  double number = 0.0;
  std::string text;  // used instead of number when non-empty
};

struct TraceEvent {
  std::string name;
  std::string category;  // "compute", "collective", "p2p", "checkpoint"
  TraceTrack track = TraceTrack::kCompute;
  double start_s = 0.0;     // Unix seconds
  double duration_s = 0.0;  // >= 0
  std::vector<TraceArg> args;
};

class RankTrace {
 public:
  RankTrace(int rank, std::string host) : rank_(rank), host_(std::move(host)) {}

  void add(TraceEvent event) { events_.push_back(std::move(event)); }
  void clear() { events_.clear(); }
  size_t size() const { return events_.size(); }
  const std::vector<TraceEvent>& events() const { return events_; }

  // The whole trace as JSON text; `other` holds extra top-level metadata (key, value) pairs.
  std::string to_json(const std::vector<TraceArg>& other = {}) const;
  // Writes to_json() to `path` (through a temporary file and a rename, so a reader never sees
  // half a trace). Errors: kIoError naming the path.
  Status write(const std::string& path, const std::vector<TraceArg>& other = {}) const;

 private:
  int rank_;
  std::string host_;
  std::vector<TraceEvent> events_;
};

// Concatenates the events of every input trace into one trace at `output`. The inputs keep
// their pids (ranks), so the result shows one process per rank. Errors: kNotFound for a
// missing input, kInvalidArgument for one that is not a Chrome trace (naming the file),
// kIoError when the output cannot be written.
Status merge_chrome_traces(const std::vector<std::string>& inputs, const std::string& output);

}  // namespace cann::monitor
