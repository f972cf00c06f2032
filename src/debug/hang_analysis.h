// Hang analysis from per-rank beacons.
//
// A beacon (published by each worker about once a second under "cann/<job>/flight/rank<r>"):
//   {"rank", "host", "pid", "time", "step",
//    "groups": [FlightRecorder::summary_json(), ...]}
// The analysis finds, per group, the oldest operation that some rank has started and not
// finished, and reports who waits in it, since when, and who never got there, e.g.
//   allreduce #1234 in group world: ranks 0,1,3 waiting since 12.1 s; rank 2 never entered
//   (last completed #1233, last report 11.8 s ago: stopped, hung or dead)
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace cann::debug {

struct InFlightOp {
  int64_t seq = 0;
  std::string op, tag;
  int64_t bytes = 0;
  double enqueued = 0.0, started = 0.0;
};

struct GroupFlight {
  std::string group;
  int64_t last_enqueued = 0, last_started = 0, last_completed = 0;
  std::vector<InFlightOp> in_flight;
};

struct RankBeacon {
  int rank = 0;
  std::string host;
  int pid = 0;
  double time = 0.0;
  int64_t step = 0;
  std::vector<GroupFlight> groups;
};

StatusOr<RankBeacon> parse_beacon(const std::string& json);

// beacons[r] is rank r's last beacon (nullopt: never reported). `now` is Unix seconds; a beacon
// older than stale_after_s marks its rank as not responding. Returns one line per finding.
std::vector<std::string> analyze_hang(const std::vector<std::optional<RankBeacon>>& beacons,
                                      double now, double stale_after_s = 3.0);

}  // namespace cann::debug
