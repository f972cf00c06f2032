// The worker's side of a multi-process job: from the launcher's environment to the world
// communication group.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/group.h"
#include "core/status.h"
#include "train/dist_env.h"

namespace cann::train {

struct CommConfig {
  std::string backend = "auto";   // auto: shm on one node, hierarchical across nodes
  double timeout_s = 60.0;        // --comm-timeout
  bool debug = false;             // --debug-comm: verify every rank issues the same collective
  std::string transport = "tcp";  // gloo transport between nodes: tcp | ibverbs
  // Gloo's channels, split size and all-reduce algorithms: comm.yaml's (comm_config.h) or the
  // backend's defaults.
  int channels = 2;
  size_t split_bytes = size_t{4} << 20;
  std::vector<comm::AllreduceRule> allreduce_rules;
};

// Opens the store named by the environment and builds the group of all ranks. The store is
// also handed back through `store_out` when given (for monitoring snapshots).
StatusOr<std::unique_ptr<comm::Group>> make_world_group(
    const DistEnv& env, const CommConfig& config,
    std::shared_ptr<comm::Store>* store_out = nullptr);

// Returns once every rank of the job has called it with the same `what`, agreed through the
// store, not a collective: a rank that leaves right after a collective can reset a connection
// under a peer still reading that collective's last message (a barrier has the same last
// message), failing a command that finished correctly. Call it just before a multi-process
// command's ranks exit.
Status leave_together(comm::Store& store, const DistEnv& env, const std::string& what,
                      std::chrono::milliseconds timeout);

}  // namespace cann::train
