// The link probe of `run --link-probe-every K`: every K steps each rank measures the bandwidth
// from every peer with point-to-point transfers, and the figures travel in its monitoring
// snapshots to the alert engine, which names a slow pair ("pair 2-3 at 0.3x the median
// bandwidth", monitor/stragglers.h). A data-parallel step's all-reduce cannot say which link
// is slow (every rank waits for the slowest), so the pairs are measured on their own.
//
// Rounds s = 1..P-1: rank r sends `bytes` to r+s and receives from r-s (mod P), all pairs of
// a round at once, a barrier between rounds so one round's stragglers do not delay the next
// round's clocks. The receive's time (issue to completion) measures the link from r-s to r.
// Each round runs kLinkProbeRepeats times and keeps the best figure: a link's capacity is what
// it reaches when nothing else (a descheduled thread, a page fault) gets in the way, and a
// single slow transfer on a healthy link must not look like a slow link.
// Cost: 3(P-1) transfers of `bytes` each way per rank, plus as many barriers; with the default
// 1 MiB and 8 ranks on a 10 GB/s link, about 3 ms every K steps.
#pragma once

#include <cstddef>
#include <vector>

#include "core/status.h"

namespace cann::comm {
class Group;
}

namespace cann::train {

inline constexpr size_t kLinkProbeBytes = size_t{1} << 20;
inline constexpr int kLinkProbeRepeats = 3;

// GB/s measured receiving from each peer, by peer rank (0 for this rank). A collective over
// `group`: every rank calls it at the same point. Each transfer keeps the group's timeout.
StatusOr<std::vector<double>> probe_links(comm::Group& group, size_t bytes = kLinkProbeBytes);

}  // namespace cann::train
