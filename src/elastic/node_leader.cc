// The leader's side of the multi-node agent: reading the shared state (beats, membership,
// bounds), who is live and who leads, and the generations the leader writes.
#include "elastic/node_agent.h"

#include <signal.h>

#include "core/timer.h"

namespace cann::elastic {

bool NodeAgent::observe(double now) {
  auto ids = store_->try_get(keys_ + "/agent_ids");
  if (!ids.ok()) return false;
  if (!ids->has_value()) {
    // A restarted store lost the counter: put back at least the ids this agent knows of.
    (void)store_->compare_set(keys_ + "/agent_ids", std::nullopt, std::to_string(max_id_ + 1));
  } else {
    max_id_ = std::max(max_id_, std::atoi((*ids)->c_str()) - 1);
  }
  max_id_ = std::max(max_id_, node_id_);
  for (int id = 0; id <= max_id_; ++id) {
    auto v = store_->try_get(keys_ + "/agents/" + std::to_string(id));
    if (!v.ok()) return false;
    Liveness& l = agents_[id];
    if (v->has_value() && **v != l.value) {
      l.value = **v;
      l.changed_at = now;
    }
  }
  auto raw = store_->try_get(keys_ + "/membership");
  if (!raw.ok()) return false;
  if (!raw->has_value()) {
    if (record_) (void)store_->compare_set(keys_ + "/membership", std::nullopt, record_raw_);
  } else if (**raw != record_raw_) {
    auto r = parse_node_record(**raw);
    if (r.ok()) {
      record_ = *r;
      record_raw_ = **raw;
    }
  }
  auto b = store_->try_get(keys_ + "/bounds");
  if (!b.ok()) return false;
  if (!b->has_value()) {
    (void)store_->compare_set(keys_ + "/bounds", std::nullopt, bounds_raw_);
  } else if (**b != bounds_raw_) {
    auto nb = parse_bounds(**b);
    if (nb.ok()) {
      if (leader(now) == node_id_)
        event("bounds_changed", -1, record_ ? record_->generation : 0,
              "min_nodes " + std::to_string(bounds_.min_nodes) + " -> " +
                  std::to_string(nb->min_nodes) + ", max_nodes " +
                  std::to_string(bounds_.max_nodes) + " -> " + std::to_string(nb->max_nodes) +
                  (nb->reason.empty() ? "" : " (" + nb->reason + ")"));
      bounds_ = *nb;
      bounds_raw_ = **b;
    }
  }
  return true;
}

bool NodeAgent::live(int id, double now) const {
  if (id == node_id_) return true;
  auto it = agents_.find(id);
  return it != agents_.end() && !it->second.value.empty() &&
         now - it->second.changed_at <= config_.heartbeat_timeout_s;
}

std::vector<int> NodeAgent::live_ids(double now) const {
  std::vector<int> out;
  for (int id = 0; id <= max_id_; ++id)
    if (live(id, now)) out.push_back(id);
  return out;
}

int NodeAgent::leader(double now) const {
  if (record_ && record_->state == JobState::kRunning) {
    int best = -1;
    for (int id : record_->nodes)
      if (live(id, now) && (best < 0 || id < best)) best = id;
    if (best >= 0) return best;
  }
  const auto ids = live_ids(now);
  return ids.empty() ? node_id_ : ids.front();
}

bool NodeAgent::propose(NodeRecord next) {
  const std::optional<std::string> expected =
      record_ ? std::optional<std::string>(record_raw_) : std::nullopt;
  if (next.state == JobState::kRunning && !config_.node_layouts.empty()) {
    const auto it = config_.node_layouts.find(static_cast<int>(next.nodes.size()));
    next.strategy = it != config_.node_layouts.end() ? it->second : "";
  }
  const std::string desired = node_record_json(next);
  auto got = store_->compare_set(keys_ + "/membership", expected, desired);
  if (!got.ok() || *got != desired) return false;
  if (next.state == JobState::kRunning) {
    const int old_world = record_ ? record_->world_size() : 0;
    if (record_ && old_world != next.world_size())
      event("scaled", -1, next.generation,
            "world size " + std::to_string(old_world) + " -> " + std::to_string(next.world_size()) +
                " (" + describe_nodes(record_->nodes) + " -> " + describe_nodes(next.nodes) + ")" +
                (next.strategy.empty() || next.strategy == record_->strategy
                     ? ""
                     : ", --strategy " + record_->strategy + " -> " + next.strategy));
    say("generation " + std::to_string(next.generation) + " on " + describe_nodes(next.nodes) +
        ", world size " + std::to_string(next.world_size()) +
        (next.strategy.empty() ? "" : ", --strategy " + next.strategy) + ": " + next.reason);
  }
  record_ = next;
  record_raw_ = desired;
  return true;
}

// The leader's decisions: the first generation, a lost member, and scaling.
void NodeAgent::lead(double now) {
  const std::vector<int> live = live_ids(now);
  if (!record_) {
    if (static_cast<int>(live.size()) < bounds_.min_nodes) return;
    if (min_reached_at_ == 0.0) min_reached_at_ = now;
    if (static_cast<int>(live.size()) < bounds_.max_nodes &&
        now - min_reached_at_ < kLastCallSeconds)
      return;
    auto members = next_members({}, live, bounds_, P_, config_.global_batch, config_.node_layouts);
    if (!members) return;
    NodeRecord r;
    r.generation = 0;
    r.nproc_per_node = P_;
    r.nodes = *members;
    r.reason = "first generation";
    (void)propose(r);
    return;
  }
  if (record_->state != JobState::kRunning) return;
  std::vector<int> current_live, gone, waiting;
  for (int id : record_->nodes) (this->live(id, now) ? current_live : gone).push_back(id);
  for (int id : live)
    if (record_->index_of(id) < 0) waiting.push_back(id);
  NodeRecord next = *record_;
  next.generation = record_->generation + 1;
  if (!gone.empty()) {
    auto members = next_members(current_live, waiting, bounds_, P_, config_.global_batch,
                                config_.node_layouts);
    const std::string cause = describe_nodes(gone) + " gone (agent heartbeat stale for more than " +
                              seconds_text(config_.heartbeat_timeout_s) + ")";
    if (short_since_ == 0.0) {
      event("failure_detected", -1, record_->generation, cause);
      say(cause);
    }
    if (!members) {
      if (short_since_ == 0.0) {
        short_since_ = now;
        kill_workers(SIGKILL);
        say("fewer than " + std::to_string(bounds_.min_nodes) + " nodes left; waiting up to " +
            std::to_string(static_cast<int>(config_.rdzv_timeout_s)) + " s for nodes to join");
      }
      if (now - short_since_ > config_.rdzv_timeout_s) {
        next.state = JobState::kFailed;
        next.reason = "fewer than " + std::to_string(bounds_.min_nodes) + " nodes (--nnodes " +
                      "minimum) for " + std::to_string(static_cast<int>(config_.rdzv_timeout_s)) +
                      " s after " + cause;
        (void)propose(next);
      }
      return;
    }
    short_since_ = 0.0;
    if (record_->restarts >= config_.max_restarts) {
      next.state = JobState::kFailed;
      next.reason = cause + " after " + std::to_string(record_->restarts) +
                    " restarts (--max-restarts " + std::to_string(config_.max_restarts) + ")";
      (void)propose(next);
      return;
    }
    next.nodes = *members;
    next.restarts = record_->restarts + 1;
    next.graceful = false;
    next.reason = cause + "; restart " + std::to_string(next.restarts) + " of " +
                  std::to_string(config_.max_restarts);
    (void)propose(next);
    return;
  }
  // Scaling: only between settled generations (every worker of this one has joined).
  if (rendezvous_pending_ || now - change_at_ < kLastCallSeconds) return;
  auto members =
      next_members(current_live, waiting, bounds_, P_, config_.global_batch, config_.node_layouts);
  if (!members || *members == record_->nodes) return;
  next.nodes = *members;
  next.graceful = true;
  next.reason = members->size() > record_->nodes.size()
                    ? "admitting " + describe_nodes(waiting) + " (up to " +
                          std::to_string(bounds_.max_nodes) + " nodes)"
                    : "scaling down to at most " + std::to_string(bounds_.max_nodes) + " nodes";
  (void)propose(next);
}

// The leader names the moment every rank of the generation has beaten with it.
void NodeAgent::check_rendezvous(double now) {
  if (!rendezvous_pending_ || !record_) return;
  const int world = record_->world_size();
  for (int r = 0; r < world; ++r) {
    auto v = store_->try_get(keys_ + "/heartbeat/rank" + std::to_string(r));
    if (!v.ok() || !v->has_value()) return;
    if (std::atoi((*v)->c_str()) != record_->generation) return;
  }
  rendezvous_pending_ = false;
  if (leader(now) == node_id_)
    event("rendezvous_complete", -1, record_->generation,
          "generation " + std::to_string(record_->generation) + ": " + std::to_string(world) +
              " workers on " + describe_nodes(record_->nodes) + " joined, " +
              seconds_text(now - change_at_) + " after it was decided");
}

}  // namespace cann::elastic
