// The committed step over the ranks' snapshot directories, and each rank's copies of it.
#include "ckpt/replicas.h"

#include <algorithm>
#include <set>

#include "ckpt/checkpoint.h"
#include "core/fs.h"

namespace cann::ckpt {
namespace {

// "<...>/step-00000007" -> 7.
int64_t step_of(const std::string& path) {
  const size_t dash = path.find_last_of('-');
  return dash == std::string::npos ? -1 : std::stoll(path.substr(dash + 1));
}

}  // namespace

ReplicaPlan plan_replica_restore(const std::string& root, int world_size) {
  ReplicaPlan plan;
  plan.candidates.assign(static_cast<size_t>(world_size), "");
  std::vector<std::vector<std::string>> listed(static_cast<size_t>(world_size));
  int64_t committed = -1;
  bool any = false;
  for (int r = 0; r < world_size; ++r) {
    auto l = list_checkpoints(join_path(root, "rank" + std::to_string(r)));
    if (!l.ok() || l->empty()) continue;
    listed[r] = std::move(*l);
    const int64_t newest = step_of(listed[r].front());
    committed = any ? std::min(committed, newest) : newest;
    any = true;
  }
  if (!any) return plan;
  // Each rank's copy of the committed step, if it still has one.
  std::vector<std::string> copy(static_cast<size_t>(world_size));
  bool found = false;
  for (int r = 0; r < world_size; ++r)
    for (const std::string& p : listed[r])
      if (step_of(p) == committed) {
        copy[r] = p;
        found = true;
      }
  if (!found) return plan;
  plan.step = committed;
  for (int r = 0; r < world_size; ++r) {
    std::string list;
    // Own copy, then the neighbours' in ring order (r+1, r+2, ...).
    for (int d = 0; d < world_size; ++d) {
      const std::string& p = copy[(r + d) % world_size];
      if (p.empty()) continue;
      if (!list.empty()) list += ";";
      list += p;
    }
    plan.candidates[r] = list;
  }
  return plan;
}

std::vector<SnapshotCopy> list_node_snapshots(const std::string& root) {
  std::vector<SnapshotCopy> out;
  auto gens = list_dir(root);
  if (!gens.ok()) return out;
  for (const std::string& gen : *gens) {
    auto ranks = list_dir(join_path(root, gen));
    if (!ranks.ok()) continue;
    for (const std::string& rank : *ranks) {
      auto steps = list_checkpoints(join_path(join_path(root, gen), rank));
      if (!steps.ok()) continue;
      for (const std::string& p : *steps) out.push_back({step_of(p), p});
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const SnapshotCopy& a, const SnapshotCopy& b) { return a.step > b.step; });
  return out;
}

void prune_node_snapshots(const std::string& root, int keep_steps) {
  std::set<int64_t> kept;
  for (const SnapshotCopy& c : list_node_snapshots(root)) {
    if (kept.count(c.step) == 0 && static_cast<int>(kept.size()) < keep_steps) kept.insert(c.step);
    if (kept.count(c.step) == 0) (void)remove_all(c.path);
  }
}

}  // namespace cann::ckpt
