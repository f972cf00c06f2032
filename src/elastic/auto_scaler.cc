// The decision rules of `scale --auto` (auto_scaler.h).
#include "elastic/auto_scaler.h"

#include <algorithm>
#include <cstdio>

namespace cann::elastic {
namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f", v);
  return buf;
}

}  // namespace

std::optional<ScaleChange> AutoScaler::decide(const ScaleSignals& s, int current_min,
                                              int current_max, double now_s) {
  const AutoScaleConfig& c = config_;
  ScaleChange band{c.min_nodes, c.max_nodes, "bounds " + std::to_string(c.min_nodes) + ".." +
                                                 std::to_string(c.max_nodes)};
  if (s.queued) {
    if (*s.queued > 0) {
      band.max_nodes = c.min_nodes;
      band.reason = std::to_string(*s.queued) + " job" + (*s.queued == 1 ? "" : "s") +
                    " queued: yielding nodes down to " + std::to_string(c.min_nodes);
    } else {
      band.reason = "queue empty: up to " + std::to_string(c.max_nodes) + " nodes";
    }
  } else if (const auto w = window_in_force(c.windows, s.minute)) {
    const ScaleWindow& win = c.windows[*w];
    band.min_nodes = std::clamp(win.min_nodes, c.min_nodes, c.max_nodes);
    band.max_nodes = std::clamp(win.max_nodes, band.min_nodes, c.max_nodes);
    band.reason = "window " + win.text + " in force";
  } else if (!c.windows.empty()) {
    // Outside every window the bounds stay as they are (inside the outer ones).
    band.min_nodes = std::clamp(current_min, c.min_nodes, c.max_nodes);
    band.max_nodes = std::clamp(current_max, band.min_nodes, c.max_nodes);
    band.reason = "no window in force";
  }
  ScaleChange want = band;
  if (c.min_node_tokens_per_s > 0 && s.node_tokens_per_s && s.nodes > 0) {
    const double per_node = *s.node_tokens_per_s;
    const std::string measured = "throughput " + number(per_node) + " tokens/s per node on " +
                                 std::to_string(s.nodes) + " node" + (s.nodes == 1 ? "" : "s");
    if (per_node < c.min_node_tokens_per_s) {
      want.max_nodes = std::clamp(s.nodes - 1, band.min_nodes, band.max_nodes);
      want.reason = measured + " < " + number(c.min_node_tokens_per_s) + ": shedding a node; " +
                    band.reason;
    } else if (per_node >= kGrowMargin * c.min_node_tokens_per_s) {
      want.max_nodes = std::clamp(current_max + 1, band.min_nodes, band.max_nodes);
      want.reason = measured + " >= " + number(kGrowMargin * c.min_node_tokens_per_s) +
                    ": room for a node; " + band.reason;
    } else {
      want.max_nodes = std::clamp(current_max, band.min_nodes, band.max_nodes);
      want.reason = measured + " near the threshold: holding; " + band.reason;
    }
  }
  if (want.min_nodes == current_min && want.max_nodes == current_max) {
    held_.clear();
    held_target_.reset();
    return std::nullopt;
  }
  if (last_change_s_ && now_s - *last_change_s_ < c.cooldown_s) {
    // Said once per held target: the same hold again is not news.
    const std::pair<int, int> target{want.min_nodes, want.max_nodes};
    held_ = target == held_target_
                ? std::string()
                : "cooldown: " + std::to_string(want.min_nodes) + ".." +
                      std::to_string(want.max_nodes) + " (" + want.reason + ") waits " +
                      number(c.cooldown_s - (now_s - *last_change_s_)) + " s more";
    held_target_ = target;
    return std::nullopt;
  }
  last_change_s_ = now_s;
  held_.clear();
  held_target_.reset();
  return want;
}

}  // namespace cann::elastic
