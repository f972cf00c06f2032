// Node rendezvous for a static job: which node this agent is, which round of the job this is,
// and where workers reach each other.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "comm/store.h"
#include "core/status.h"
#include "elastic/agent.h"

namespace cann::elastic {

struct NodeAssignment {
  int node_rank = 0;
  int round = 0;
  std::string job_prefix;  // "<job>/round<r>": every key of this run lives under it
};

// Joins `nnodes` agents through `store` under job id `job`; waits up to timeout_s for all.
StatusOr<NodeAssignment> join_nodes(comm::Store& store, const std::string& job, int nnodes,
                                    double timeout_s);

// What every node launches when node 0 chooses it (AgentConfig::node0_decides): the agent that
// `decides` calls `decide` and writes the outcome (the launch, or its error) under `key` unless
// the key holds one already (an agent started again finds it); the others wait up to timeout_s
// for it. Returns the launch, or node 0's error as FailedPrecondition.
StatusOr<AgentConfig::NodeLaunch> agree_on_launch(
    comm::Store& store, const std::string& key, bool decides,
    const std::function<StatusOr<AgentConfig::NodeLaunch>()>& decide, double timeout_s);

// The local address of the interface that routes to the host of `store_url` (the address peers
// on other nodes can reach this node at); "127.0.0.1" for local stores.
std::string local_address_towards(const std::string& store_url);

}  // namespace cann::elastic
