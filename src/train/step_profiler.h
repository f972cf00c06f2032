// StepProfiler: `run --profile wait=W,warmup=U,active=A`. Like torch.profiler's schedule, it
// skips W steps, records U steps and throws them away (caches and lanes settle), then records
// A steps and writes them as a Chrome trace per rank (DIR/trace-rank<R>.json) plus, on rank 0,
// one merged trace with a process per rank (DIR/trace.json).
//
// What a trace holds, one track each: compute (the step, and inside it forward, backward,
// optimizer and evaluation), collectives and point-to-point sends and receives (read from the
// world group's flight recorder, which times every call anyway: no extra cost in the
// communication path), and checkpoint writes. Collective events carry the payload bytes and
// the achieved bandwidth in args (bus bandwidth as debug/trace_replay.h defines it).
//
// Times are Unix time: the trainer's monotonic stopwatch readings are shifted by the offset
// between the two clocks, read at the start of each recorded step, and the flight recorder
// already stamps Unix time. Without --profile the trainer holds no StepProfiler, so recording
// costs nothing. Thread safety: the training thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace cann::comm {
class Group;
}
namespace cann::monitor {
class RankTrace;
}

namespace cann::train {

struct ProfileSchedule {
  int wait = 0;
  int warmup = 0;
  int active = 0;
};

// "wait=1,warmup=1,active=3" (any order; omitted keys: wait 0, warmup 0, active 1). Errors:
// kInvalidArgument naming the bad part.
StatusOr<ProfileSchedule> parse_profile_schedule(const std::string& text);

class StepProfiler {
 public:
  // `dir` is created when the first trace is written.
  StepProfiler(ProfileSchedule schedule, std::string dir, int rank, int world_size,
               std::string host);
  ~StepProfiler();

  // Called at the start of each step: `index` counts from 0 at the first step of this run (the
  // schedule's clock); `step` is the step's number in the step log (1-based, across resumes).
  void begin_step(int index, int step);
  // True while the current step is recorded (warmup or active).
  bool recording() const { return recording_; }
  // A compute or checkpoint span, with monotonic (now_seconds) bounds.
  void compute(const char* name, double t0, double t1);
  void checkpoint(double t0, double t1, const std::string& path);
  // Reads the operations `group` completed since the last call into the trace.
  void collect_comm(const comm::Group& group);
  // Ends the step. Returns true once, at the end of the last active step: the caller then
  // calls finish() on every rank.
  bool end_step();
  // Writes this rank's trace; then (a barrier over `world` when given, so every rank's file
  // exists) rank 0 merges them. Returns a line for the user on rank 0 ("profile: ..."), or "".
  // Idempotent: a second call does nothing.
  StatusOr<std::string> finish(comm::Group* world);
  bool finished() const { return finished_; }

 private:
  double to_unix(double monotonic) const { return monotonic + clock_offset_; }

  ProfileSchedule schedule_;
  std::string dir_;
  int rank_;
  int world_size_;
  std::unique_ptr<monitor::RankTrace> trace_;
  bool recording_ = false;
  bool active_ = false;  // recording and kept
  bool finished_ = false;
  int index_ = -1;
  int step_ = 0;
  int active_steps_ = 0;
  double clock_offset_ = 0.0;  // unix_seconds() - now_seconds()
  double window_start_ = 0.0;  // Unix time of the first recorded step's start
  uint64_t last_seq_ = 0;      // the last flight-recorder sequence number taken
};

}  // namespace cann::train
