// HeartbeatMonitor: the agent's view of its workers' heartbeats, and the two failure signals
// that do not end a process: a stale heartbeat (the worker is stopped or its process wedged)
// and no progress (the heartbeat goes on but no step completes: a hang inside the step).
//
// Each worker's StateKeeper sets cann/<job>/heartbeat/rank<r> to
// "<generation> <step> <total steps> <beat>" every --heartbeat-interval. The monitor reads the
// keys on every poll and remembers when each value last changed, by the agent's own clock (so
// clocks of other machines never matter):
//   - stale: no change for heartbeat_timeout after the first beat of this generation;
//   - silent: no beat of this generation at all within start_timeout of the spawn;
//   - no progress: the step has not advanced for max(kHangFactor x the median step interval
//     seen so far, kHangFloorSeconds), counted only between completed steps (setup and the
//     work after the last step are not steps).
// A read that fails (the store is down) restarts that rank's clocks: an outage of the store is
// not a hang of the worker.
//
// Thread safety: one thread (the agent's loop).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace cann::comm {
class Store;
}

namespace cann::elastic {

inline constexpr double kHangFactor = 10.0;
inline constexpr double kHangFloorSeconds = 5.0;

enum class HeartbeatVerdict { kSilent, kStale, kNoProgress };

struct HeartbeatFailure {
  int rank = 0;
  HeartbeatVerdict verdict = HeartbeatVerdict::kStale;
  std::string detail;
};

class HeartbeatMonitor {
 public:
  HeartbeatMonitor(std::string job_prefix, double timeout_s, double start_timeout_s)
      : prefix_(std::move(job_prefix)), timeout_s_(timeout_s), start_timeout_s_(start_timeout_s) {}

  // A new generation spawned at time `now` (steady seconds): the `count` ranks from
  // `first_rank` on are watched (one node's workers of a job of fixed nodes).
  void start_generation(int generation, int count, double now, int first_rank = 0);
  // Reads every watched rank's key; returns the first failure found (none while all are
  // healthy). `running[i]` false: watched rank first_rank + i has exited, its heartbeat no
  // longer counts.
  std::optional<HeartbeatFailure> poll(comm::Store& store, const std::vector<bool>& running,
                                       double now);
  // After a store outage in which this monitor was not polled: every rank's clocks start again
  // at `now`, since no beat could be seen meanwhile.
  void restart_clocks(double now);
  // Every rank has beaten at least once in this generation.
  bool all_joined() const;
  // The highest step any rank reported in this generation.
  int max_step() const;

 private:
  struct Rank {
    std::string value;
    bool joined = false;
    double changed_at = 0.0;
    int step = -1;
    int total = 0;
    double step_at = 0.0;
  };
  double median_step_interval() const;

  std::string prefix_;
  double timeout_s_;
  double start_timeout_s_;
  int generation_ = 0;
  int first_rank_ = 0;
  double started_at_ = 0.0;
  std::vector<Rank> ranks_;
  std::vector<double> intervals_;  // seconds between consecutive steps, every rank
};

}  // namespace cann::elastic
