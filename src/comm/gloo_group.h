// The "gloo" Group backend: collectives between processes on any number of machines over
// Debian's libgloo (TCP, or ibverbs for RDMA), rendezvousing through the group's Store.
//
// What runs where:
//   allreduce fp32/int32/int64   Gloo's ring allreduce (avg = sum, then divide; integers
//                                truncate toward zero)
//   allreduce bf16, and every    our direct algorithms over Gloo's transport (gloo_collectives.h):
//   type on ibverbs              bf16 is summed in fp32 and rounded once, not at every ring hop
//   reduce_scatter, allgather(v), alltoall(v), broadcast, barrier: direct / tree algorithms
//   send, recv                   a channel of their own, so they run beside a collective
//
// Channels: GroupConfig::parallel_contexts Gloo contexts (each on its own device and event
// thread) for collectives, plus one for point to point. A message of at least
// GroupConfig::split_bytes (4 MiB unless tuned) is split into that many slices that run
// concurrently, one per context, so one TCP stream and one event-loop thread are not the
// ceiling; smaller messages use context 0. The fp32/integer all-reduce's algorithm follows
// GroupConfig::allreduce_rules by the whole message's size (`cann-train bench tune` measures
// both and writes the table to comm.yaml).
//
// Addresses (tcp): GroupConfig::hostname when set; otherwise 127.0.0.1 when all ranks share a
// host_id (one machine), else this machine's non-loopback address (default_tcp_address). On a
// multi-homed machine set it explicitly (cann-train run --comm-addr).
//
// Timeouts: a call's Options::timeout, or GroupConfig::timeout when the call leaves the
// default. On ibverbs, waits use GroupConfig::timeout (bound buffers fix it at connect time).
//
// Failure: a call that fails names the dead or unreachable peer (see gloo_failure.h), aborts the
// group's connections so the other ranks fail at once too, and leaves the group broken.
#pragma once

#include <cstddef>
#include <memory>

#include "comm/group.h"

namespace cann::comm {

// Knobs below GroupConfig, for tests and benchmarks.
struct GlooOptions {
  // Run the ibverbs code path (bound buffers, direct algorithms only) on TCP.
  bool bound_buffers = false;
};

StatusOr<std::unique_ptr<Group>> make_gloo_group(const GroupConfig& config,
                                                 const GlooOptions& options);

}  // namespace cann::comm
