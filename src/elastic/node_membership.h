// Multi-node elastic membership: the records the node agents share through the store, and the
// leader's decision of the next generation.
//
// Keys, under cann/<job>/:
//   agent_ids          counter; an agent's node id is the value it got from add() minus one
//   agents/<id>        "<beat> <host>", rewritten every heartbeat interval by that node's agent
//   bounds             {"min_nodes":A,"max_nodes":B,"version":V} (`cann-train scale` rewrites it)
//   membership         the NodeRecord of the current generation (written with compare_set, so
//                      of two agents that propose a generation at once exactly one wins)
//
// A node is live, for an observer, while its agent's beat value keeps changing within the
// heartbeat timeout by the observer's own clock. The leader is the lowest-numbered live member
// of the current generation (before the first one: the lowest-numbered live agent). Members keep
// their order from one generation to the next, so rank 0 is always a survivor holding the state.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace cann::comm {
class Store;
}

namespace cann::elastic {

enum class JobState { kRunning, kFinished, kFailed };

struct NodeBounds {
  int min_nodes = 1;
  int max_nodes = 1;
  int version = 0;
  // The range the job was launched with (--nnodes MIN:MAX): scaling stays inside it. 0: not
  // recorded (a record written before the range was kept).
  int launch_min = 0;
  int launch_max = 0;
  std::string reason;  // why these bounds were set: "launch", or what `scale` said
};

struct NodeRecord {
  int generation = 0;
  int nproc_per_node = 1;
  std::vector<int> nodes;  // node ids in rank order: nodes[i] holds ranks [i*P, (i+1)*P)
  int restarts = 0;        // generations started because of a failure
  bool graceful = false;   // workers stop at a step boundary (scaling), not killed (failure)
  JobState state = JobState::kRunning;
  std::string reason;  // why this generation began (or why the job ended)
  // The layout this generation trains (a canonical strategy string), where the job's layout
  // depends on its size (model parallelism, train/elastic_layouts.h); empty: the launch flags'.
  std::string strategy;

  int world_size() const { return static_cast<int>(nodes.size()) * nproc_per_node; }
  // Position of node `id` in the generation, or -1 when it is not a member.
  int index_of(int id) const;
};

std::string node_record_json(const NodeRecord& r);
StatusOr<NodeRecord> parse_node_record(const std::string& json);
std::string bounds_json(const NodeBounds& b);
StatusOr<NodeBounds> parse_bounds(const std::string& json);

// Node count -> the layout a generation of that many nodes trains (train/elastic_layouts.h).
// Empty: the job's layout fits any size (data parallelism).
using NodeLayouts = std::map<int, std::string>;

// The members of the next generation: the live members of the current one in their order, then
// live waiting nodes by id, at most max_nodes, and trimmed to the largest admissible count:
// one `layouts` names, or, when it is empty, one whose world size (count x nproc_per_node)
// divides the global batch (global_batch 0: any count). nullopt when fewer than min_nodes
// remain.
std::optional<std::vector<int>> next_members(const std::vector<int>& current_live,
                                             const std::vector<int>& waiting_live,
                                             const NodeBounds& bounds, int nproc_per_node,
                                             int global_batch, const NodeLayouts& layouts = {});

// The smallest admissible node count in [min, max] (as above), or 0 when none is.
int smallest_admissible(const NodeBounds& bounds, int nproc_per_node, int global_batch,
                        const NodeLayouts& layouts = {});

// `cann-train scale`: replaces job's bounds in the store (compare_set, version + 1; the launch
// range is kept, `reason` recorded for the leader's bounds_changed event) and returns the
// bounds it replaced. NotFound when the store holds no membership record for the job;
// FailedPrecondition when the job has ended; InvalidArgument when the bounds leave the launch
// range. The leader reacts at its next poll.
StatusOr<NodeBounds> set_node_bounds(comm::Store& store, const std::string& job, int min_nodes,
                                     int max_nodes, const std::string& reason,
                                     NodeRecord* current = nullptr);
// InvalidArgument when [min_nodes, max_nodes] leaves the launch range `b` records (none
// recorded: any range).
Status check_launch_range(const NodeBounds& b, const std::string& job, int min_nodes,
                          int max_nodes);
// The job's bounds now (NotFound when it has none).
StatusOr<NodeBounds> get_node_bounds(comm::Store& store, const std::string& job);

// "nodes 0,2" for an event's detail.
std::string describe_nodes(const std::vector<int>& nodes);

}  // namespace cann::elastic
