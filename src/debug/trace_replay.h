// The collective sequence of a profile trace, for `cann-train debug replay`: the ops, their
// sizes, groups and order, as `run --profile` recorded them (monitor/chrome_trace.h), ready to
// be re-issued without the model to reproduce and measure a communication problem.
//
// All ranks of a data-parallel job issue the same collectives in the same order, so the plan
// is one rank's sequence (by default the lowest rank in the file) and every replaying rank
// issues it. Operations a replay cannot re-issue faithfully without the model are counted as
// skipped: alltoallv (its per-peer counts are not in the trace) and point-to-point calls (their
// peers are not recorded).
//
// Depends on core only (nlohmann in the .cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace cann::debug {

struct ReplayOp {
  std::string op;      // allreduce, allgather, allgatherv, reduce_scatter, broadcast, alltoall,
                       // barrier
  std::string tag;     // the caller's tag ("grad_bucket", "step_scalars", ...)
  std::string group;   // "world"
  uint64_t bytes = 0;  // payload as recorded (count x element size of the call)
  uint64_t seq = 0;    // the group's sequence number when recorded
  double recorded_s = 0.0;  // duration when recorded
  int step = -1;            // training step it belonged to, when known
};

struct ReplayPlan {
  int rank = 0;        // whose sequence this is
  int group_size = 0;  // ranks in the recorded group (0: not recorded)
  std::vector<int> ranks_in_file;
  std::vector<ReplayOp> ops;  // in issue order (by sequence number)
  int skipped = 0;            // alltoallv, send, recv
};

// Bus bandwidth factor (nccl-tests' convention) of an op over n ranks, with the payload
// `bytes` as the flight recorder counts it (count x element size, count as the call took it):
//   allreduce       2(n-1)/n   (ring: reduce-scatter then all-gather of n blocks)
//   allgather       n-1        (count is one rank's block)
//   reduce_scatter  n-1        (count is one rank's output block)
//   alltoall        n-1        (count is the block for one peer)
//   allgatherv      (n-1)/n    (count is the whole output)
//   broadcast, send, recv: 1
// busbw = bytes x factor / time: the bytes each rank moves over its links per second, one
// figure that compares across world sizes and against the link speed. Example: a 100 MB
// allreduce over 4 ranks in 0.1 s is 1 GB/s algorithmic, 1.5 GB/s bus.
double bus_bandwidth_factor(const std::string& op, int n);

// `rank` < 0: the lowest rank in the file. Errors (kInvalidArgument, naming `name`): not a
// Chrome trace, no collective events, a collective without bytes, or `rank` not in the file.
StatusOr<ReplayPlan> parse_replay_plan(const std::string& text, const std::string& name,
                                       int rank = -1);

}  // namespace cann::debug
