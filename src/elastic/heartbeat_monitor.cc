// Heartbeat bookkeeping: change times, step intervals, and the three verdicts.
#include "elastic/heartbeat_monitor.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "comm/store.h"

namespace cann::elastic {
namespace {

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f s", s);
  return buf;
}

}  // namespace

void HeartbeatMonitor::start_generation(int generation, int count, double now, int first_rank) {
  generation_ = generation;
  first_rank_ = first_rank;
  started_at_ = now;
  ranks_.assign(static_cast<size_t>(count), Rank{});
  intervals_.clear();
}

void HeartbeatMonitor::restart_clocks(double now) {
  for (Rank& r : ranks_) {
    r.changed_at = now;
    r.step_at = now;
  }
}

bool HeartbeatMonitor::all_joined() const {
  return std::all_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.joined; });
}

int HeartbeatMonitor::max_step() const {
  int m = 0;
  for (const Rank& r : ranks_) m = std::max(m, r.step);
  return m;
}

double HeartbeatMonitor::median_step_interval() const {
  if (intervals_.size() < 3) return 0.0;
  std::vector<double> v = intervals_;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

std::optional<HeartbeatFailure> HeartbeatMonitor::poll(comm::Store& store,
                                                       const std::vector<bool>& running,
                                                       double now) {
  const double median = median_step_interval();
  const double hang_limit = std::max(kHangFactor * median, kHangFloorSeconds);
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (r >= running.size() || !running[r]) continue;
    Rank& rk = ranks_[r];
    const int rank = first_rank_ + static_cast<int>(r);
    auto v = store.try_get(prefix_ + "/heartbeat/rank" + std::to_string(rank));
    if (!v.ok()) {
      // The store is unreachable (a restarting Redis): no beat can be seen, so none is judged
      // missing; the clocks restart when the store answers again.
      rk.changed_at = now;
      rk.step_at = now;
      continue;
    }
    if (v->has_value() && **v != rk.value) {
      std::istringstream in(**v);
      int gen = -1, step = 0, total = 0;
      in >> gen >> step >> total;
      if (gen == generation_) {
        rk.value = **v;
        rk.joined = true;
        rk.changed_at = now;
        rk.total = total;
        if (step != rk.step) {
          if (rk.step >= 0 && step == rk.step + 1) intervals_.push_back(now - rk.step_at);
          rk.step = step;
          rk.step_at = now;
        }
      }
    }
    if (!rk.joined) {
      if (now - started_at_ > start_timeout_s_)
        return HeartbeatFailure{rank, HeartbeatVerdict::kSilent,
                                "rank " + std::to_string(rank) + " sent no heartbeat within " +
                                    seconds(start_timeout_s_) + " of its start"};
      continue;
    }
    if (now - rk.changed_at > timeout_s_)
      return HeartbeatFailure{rank, HeartbeatVerdict::kStale,
                              "rank " + std::to_string(rank) + "'s heartbeat is stale (" +
                                  seconds(now - rk.changed_at) +
                                  " without a beat): stopped or hung"};
    if (median > 0 && rk.step < rk.total && now - rk.step_at > hang_limit)
      return HeartbeatFailure{rank, HeartbeatVerdict::kNoProgress,
                              "rank " + std::to_string(rank) + " made no progress for " +
                                  seconds(now - rk.step_at) + " (median step " + seconds(median) +
                                  "): hung inside step " + std::to_string(rk.step + 1)};
  }
  return std::nullopt;
}

}  // namespace cann::elastic
