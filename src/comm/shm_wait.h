// Waiting on peers through shared memory, and noticing when a peer will never come.
//
// Every wait in the shm backend is "until these counters of these ranks reach these values". A
// waiter spins briefly (a handoff between two busy ranks takes well under a microsecond), then
// yields the core, then sleeps in short naps, so that a machine with more ranks than cores, or
// busy with other work, keeps making progress instead of burning every core on spinning.
//
// While it waits it checks, every few milliseconds, each rank it is still waiting on: a rank
// whose process has died (its pid is gone, or is a zombie not yet reaped), that aborted after a
// failure of its own, or that destroyed its group can never advance its counters, so the wait
// fails at once with that rank named ("rank 2 (pid 4242) died") instead of running into the
// timeout. The timeout, when it does expire, names the ranks that had not arrived.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "comm/shm_segment.h"
#include "core/status.h"

namespace cann::comm::shm {

// Wait until `counter` (owned by `rank`) reaches at least `at_least`.
struct WaitTarget {
  const std::atomic<uint64_t>* counter = nullptr;
  uint64_t at_least = 0;
  int rank = 0;
};

// Reads peers' control blocks to tell whether they can still make progress. Thread safety:
// const and stateless apart from the segment it reads, so any lane may use it.
class PeerWatch {
 public:
  explicit PeerWatch(const ShmSegment& segment);

  // Why `rank` will never advance its counters ("rank 2 (pid 4242) died"), or nullopt when it
  // is alive and attached (or not attached yet, which only a timeout can resolve).
  std::optional<std::string> why_stuck(int rank) const;
  // "rank 2 (pid 4242)".
  std::string describe(int rank) const;

 private:
  const ShmSegment& segment_;
  const uint64_t my_pid_namespace_;
};

// Waits until every target is reached, or fails: at once when a rank still waited on cannot
// progress (PeerWatch), or after `timeout` with the missing ranks named. `what` names the call
// in errors ("shm allreduce #12"). `targets` is reordered.
Status wait_for(std::span<WaitTarget> targets, const PeerWatch& peers, const std::string& what,
                std::chrono::milliseconds timeout);

// This process's pid namespace (the inode of /proc/self/ns/pid; 0 when unknown).
uint64_t pid_namespace_id();

}  // namespace cann::comm::shm
