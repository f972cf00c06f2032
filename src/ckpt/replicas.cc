// The committed step over the ranks' snapshot directories, and each rank's copies of it.
#include "ckpt/replicas.h"

#include <algorithm>
#include <functional>
#include <set>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"
#include "ckpt/format.h"
#include "core/fs.h"

namespace cann::ckpt {
namespace {

constexpr char kRankSnapshotKey[] = "rank_snapshot";

std::optional<RankSnapshotMark> mark_of_copy(const std::string& step_dir) {
  auto meta = read_checkpoint_meta(step_dir);
  if (!meta.ok()) return std::nullopt;
  return rank_snapshot_mark(*meta);
}

// Model parallelism: each rank's own copy only, all of one layout; else no step (`note` why).
void plan_own_copies(const std::vector<std::string>& copy, int64_t step, ReplicaPlan* plan) {
  const int world = static_cast<int>(copy.size());
  std::optional<RankSnapshotMark> first;
  for (int r = 0; r < world; ++r) {
    const std::string at =
        "rank " + std::to_string(r) + "'s snapshot of step " + std::to_string(step);
    if (copy[r].empty()) {
      plan->note = "rank " + std::to_string(r) + " has no snapshot of step " +
                   std::to_string(step) + ", and under model parallelism no other rank's serves";
      return;
    }
    const std::optional<RankSnapshotMark> mark = mark_of_copy(copy[r]);
    if (!mark || mark->rank != r || (first && mark->layout != first->layout)) {
      plan->note = at + " (" + copy[r] + ") holds " +
                   (mark ? "rank " + std::to_string(mark->rank) + "'s state under " + mark->layout
                         : std::string("no rank mark")) +
                   (first ? ", rank 0's is of " + first->layout : std::string());
      return;
    }
    if (!first) first = mark;
  }
  plan->step = step;
  for (int r = 0; r < world; ++r) plan->candidates[r] = copy[r];
}

}  // namespace

int64_t snapshot_step(const std::string& step_dir) {
  const size_t slash = step_dir.find_last_of('/');
  return internal::parse_step_name(slash == std::string::npos ? step_dir
                                                              : step_dir.substr(slash + 1));
}

std::optional<RankSnapshotMark> rank_snapshot_mark(const std::string& meta_json) {
  const nlohmann::json meta = nlohmann::json::parse(meta_json, nullptr, false);
  if (meta.is_discarded() || !meta.is_object() || !meta.contains(kRankSnapshotKey))
    return std::nullopt;
  const nlohmann::json& m = meta[kRankSnapshotKey];
  if (!m.is_object() || !m.contains("layout") || !m.contains("rank") || !m["layout"].is_string() ||
      !m["rank"].is_number_integer())
    return std::nullopt;
  return RankSnapshotMark{m["layout"].get<std::string>(), m["rank"].get<int>()};
}

std::string with_rank_snapshot_mark(const std::string& meta_json, const RankSnapshotMark& mark) {
  nlohmann::json meta = nlohmann::json::parse(meta_json);
  meta[kRankSnapshotKey] = {{"layout", mark.layout}, {"rank", mark.rank}};
  return meta.dump();
}

std::string without_rank_snapshot_mark(const std::string& meta_json) {
  nlohmann::json meta = nlohmann::json::parse(meta_json);
  meta.erase(kRankSnapshotKey);
  return meta.dump();
}

ReplicaPlan plan_replica_restore(const std::string& root, int world_size) {
  ReplicaPlan plan;
  plan.candidates.assign(static_cast<size_t>(world_size), "");
  std::vector<std::vector<std::string>> listed(static_cast<size_t>(world_size));
  int64_t committed = -1, newest_any = -1;
  bool any = false;
  for (int r = 0; r < world_size; ++r) {
    auto l = list_checkpoints(join_path(root, "rank" + std::to_string(r)));
    if (!l.ok() || l->empty()) continue;
    listed[r] = std::move(*l);
    const int64_t newest = snapshot_step(listed[r].front());
    committed = any ? std::min(committed, newest) : newest;
    newest_any = std::max(newest_any, newest);
    any = true;
  }
  if (!any) return plan;
  // Each rank's copy of the committed step, if it still has one.
  std::vector<std::string> copy(static_cast<size_t>(world_size));
  bool found = false;
  for (int r = 0; r < world_size; ++r)
    for (const std::string& p : listed[r])
      if (snapshot_step(p) == committed) {
        copy[r] = p;
        found = true;
      }
  if (!found) return plan;
  for (const std::string& p : copy)
    if (!p.empty() && mark_of_copy(p)) {
      plan_own_copies(copy, committed, &plan);
      return plan;
    }
  // Whole-state copies: the newest step any rank wrote is one every rank's collectives
  // finished, and its copy serves everyone. Behind its copies come those of the older steps
  // kept: when no copy of the committed step verifies (memory damaged), every rank falls back
  // to the same older step, since each tries the same files in the same step order and a
  // file verifies alike for every reader.
  std::set<int64_t, std::greater<>> steps;
  for (const auto& l : listed)
    for (const std::string& p : l) steps.insert(snapshot_step(p));
  plan.step = newest_any;
  for (int r = 0; r < world_size; ++r) {
    std::string list;
    for (const int64_t step : steps)
      // Own copy, then the neighbours' in ring order (r+1, r+2, ...).
      for (int d = 0; d < world_size; ++d)
        for (const std::string& p : listed[(r + d) % world_size]) {
          if (snapshot_step(p) != step) continue;
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
      const int g = gen.rfind("gen", 0) == 0 ? std::atoi(gen.c_str() + 3) : -1;
      for (const std::string& p : *steps) out.push_back({snapshot_step(p), p, g});
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
