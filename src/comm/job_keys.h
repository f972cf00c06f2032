// Store keys an elastic job's agents and processes agree on, under "cann/<job prefix>".
#pragma once

#include <string>

namespace cann::comm {

// The record of the current generation (elastic/local_agent.cc writes it). A job of one node,
// or the multi-node elastic agent's job, has one; a job of several fixed nodes has one per node,
// since each node's agent replaces its own processes (generations count per node).
inline std::string membership_key(const std::string& job_keys, int node, int nodes) {
  return nodes > 1 ? job_keys + "/membership/node" + std::to_string(node)
                   : job_keys + "/membership";
}

}  // namespace cann::comm
