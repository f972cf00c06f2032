// Membership and bounds records as JSON, and the choice of the next generation's members.
#include "elastic/node_membership.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "comm/store.h"

namespace cann::elastic {
namespace {

const char* state_name(JobState s) {
  switch (s) {
    case JobState::kRunning:
      return "running";
    case JobState::kFinished:
      return "finished";
    case JobState::kFailed:
      return "failed";
  }
  return "running";
}

bool fits(int count, int nproc_per_node, int global_batch, const NodeLayouts& layouts) {
  if (!layouts.empty()) return layouts.count(count) > 0;
  return global_batch <= 0 || global_batch % (count * nproc_per_node) == 0;
}

}  // namespace

int NodeRecord::index_of(int id) const {
  auto it = std::find(nodes.begin(), nodes.end(), id);
  return it == nodes.end() ? -1 : static_cast<int>(it - nodes.begin());
}

std::string node_record_json(const NodeRecord& r) {
  nlohmann::json j;
  j["generation"] = r.generation;
  j["world_size"] = r.world_size();
  j["nproc_per_node"] = r.nproc_per_node;
  j["nodes"] = r.nodes;
  nlohmann::json members = nlohmann::json::array();
  for (size_t i = 0; i < r.nodes.size(); ++i)
    for (int l = 0; l < r.nproc_per_node; ++l)
      members.push_back(
          {{"rank", static_cast<int>(i) * r.nproc_per_node + l}, {"node", r.nodes[i]}});
  j["members"] = members;
  j["restarts"] = r.restarts;
  j["graceful"] = r.graceful;
  j["state"] = state_name(r.state);
  j["reason"] = r.reason;
  if (!r.strategy.empty()) j["strategy"] = r.strategy;
  return j.dump();
}

StatusOr<NodeRecord> parse_node_record(const std::string& json) {
  try {
    const nlohmann::json j = nlohmann::json::parse(json);
    NodeRecord r;
    r.generation = j.at("generation").get<int>();
    r.nproc_per_node = j.at("nproc_per_node").get<int>();
    r.nodes = j.at("nodes").get<std::vector<int>>();
    r.restarts = j.value("restarts", 0);
    r.graceful = j.value("graceful", false);
    const std::string state = j.value("state", "running");
    r.state = state == "finished" ? JobState::kFinished
              : state == "failed" ? JobState::kFailed
                                  : JobState::kRunning;
    r.reason = j.value("reason", "");
    r.strategy = j.value("strategy", "");
    return r;
  } catch (const std::exception& e) {
    return DataLoss(std::string("malformed membership record (") + e.what() + ")");
  }
}

std::string bounds_json(const NodeBounds& b) {
  return nlohmann::json{{"min_nodes", b.min_nodes},   {"max_nodes", b.max_nodes},
                        {"version", b.version},       {"launch_min", b.launch_min},
                        {"launch_max", b.launch_max}, {"reason", b.reason}}
      .dump();
}

StatusOr<NodeBounds> parse_bounds(const std::string& json) {
  try {
    const nlohmann::json j = nlohmann::json::parse(json);
    NodeBounds b;
    b.min_nodes = j.at("min_nodes").get<int>();
    b.max_nodes = j.at("max_nodes").get<int>();
    b.version = j.value("version", 0);
    b.launch_min = j.value("launch_min", 0);
    b.launch_max = j.value("launch_max", 0);
    b.reason = j.value("reason", std::string());
    if (b.min_nodes < 1 || b.max_nodes < b.min_nodes)
      return DataLoss("bounds record has min_nodes " + std::to_string(b.min_nodes) +
                      " and max_nodes " + std::to_string(b.max_nodes));
    return b;
  } catch (const std::exception& e) {
    return DataLoss(std::string("malformed bounds record (") + e.what() + ")");
  }
}

std::optional<std::vector<int>> next_members(const std::vector<int>& current_live,
                                             const std::vector<int>& waiting_live,
                                             const NodeBounds& bounds, int nproc_per_node,
                                             int global_batch, const NodeLayouts& layouts) {
  std::vector<int> members = current_live;
  std::vector<int> waiting = waiting_live;
  std::sort(waiting.begin(), waiting.end());
  for (int id : waiting)
    if (std::find(members.begin(), members.end(), id) == members.end()) members.push_back(id);
  int count = std::min<int>(static_cast<int>(members.size()), bounds.max_nodes);
  while (count >= bounds.min_nodes && count > 0 &&
         !fits(count, nproc_per_node, global_batch, layouts))
    --count;
  if (count < bounds.min_nodes || count <= 0) return std::nullopt;
  members.resize(static_cast<size_t>(count));
  return members;
}

int smallest_admissible(const NodeBounds& bounds, int nproc_per_node, int global_batch,
                        const NodeLayouts& layouts) {
  for (int n = bounds.min_nodes; n <= bounds.max_nodes; ++n)
    if (fits(n, nproc_per_node, global_batch, layouts)) return n;
  return 0;
}

Status check_launch_range(const NodeBounds& b, const std::string& job, int min_nodes,
                          int max_nodes) {
  if (b.launch_max <= 0 || (min_nodes >= b.launch_min && max_nodes <= b.launch_max))
    return OkStatus();
  return InvalidArgument("--min-nodes " + std::to_string(min_nodes) + " --max-nodes " +
                         std::to_string(max_nodes) + " leave job '" + job +
                         "''s launch range --nnodes " + std::to_string(b.launch_min) + ":" +
                         std::to_string(b.launch_max) +
                         "; hint: scale within it (nodes beyond it were never started)");
}

StatusOr<NodeBounds> get_node_bounds(comm::Store& store, const std::string& job) {
  CANN_ASSIGN_OR_RETURN(auto raw, store.try_get("cann/" + job + "/bounds"));
  if (!raw) return NotFound("job '" + job + "' has no bounds record at " + store.address());
  return parse_bounds(*raw);
}

StatusOr<NodeBounds> set_node_bounds(comm::Store& store, const std::string& job, int min_nodes,
                                     int max_nodes, const std::string& reason,
                                     NodeRecord* current) {
  const std::string keys = "cann/" + job;
  CANN_ASSIGN_OR_RETURN(auto raw, store.try_get(keys + "/membership"));
  if (!raw)
    return NotFound("no elastic job '" + job + "' at " + store.address() +
                    " (no membership record); hint: --job is the run's --rdzv-id, and the job "
                    "must run with --elastic --nnodes MIN:MAX");
  CANN_ASSIGN_OR_RETURN(NodeRecord record, parse_node_record(*raw));
  if (current != nullptr) *current = record;
  if (record.state != JobState::kRunning)
    return FailedPrecondition("job '" + job + "' has " +
                              (record.state == JobState::kFinished ? "finished" : "failed") +
                              "; nothing to scale");
  // Retry until our write lands on the record we read (another `scale` may race us).
  for (int attempt = 0; attempt < 100; ++attempt) {
    CANN_ASSIGN_OR_RETURN(auto old_raw, store.try_get(keys + "/bounds"));
    NodeBounds old;
    if (old_raw) {
      CANN_ASSIGN_OR_RETURN(old, parse_bounds(*old_raw));
    }
    CANN_RETURN_IF_ERROR(check_launch_range(old, job, min_nodes, max_nodes));
    NodeBounds next = old;
    next.min_nodes = min_nodes;
    next.max_nodes = max_nodes;
    next.version = old.version + 1;
    next.reason = reason;
    const std::string desired = bounds_json(next);
    CANN_ASSIGN_OR_RETURN(std::string got, store.compare_set(keys + "/bounds", old_raw, desired));
    if (got == desired) return old;
  }
  return IoError("job '" + job +
                 "': the bounds kept changing under this command; hint: run "
                 "one `cann-train scale` at a time");
}

std::string describe_nodes(const std::vector<int>& nodes) {
  std::string s = nodes.size() == 1 ? "node " : "nodes ";
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (i > 0) s += ",";
    s += std::to_string(nodes[i]);
  }
  return s;
}

}  // namespace cann::elastic
