// AutoScaler: the decisions of `cann-train scale --auto`, from measured signals, inside the
// bounds the command was given (--min-nodes/--max-nodes, else the job's launch range).
//
// Each round the command reads the signals and asks decide() for the job's next bounds:
//   1. the band: with --queue FILE, a queue of waiting jobs (> 0) shrinks the band to its
//      minimum (the job yields its nodes) and an empty one opens it to the maximum; else the
//      time window in force (--auto FILE), clipped to the bounds (outside every window, the
//      bounds the job has now); without windows, the bounds themselves;
//   2. with --min-node-throughput T, inside the band: the job's tokens/s per node below T sheds
//      one node (max = nodes - 1: the last node added is not paying for itself); above
//      kGrowMargin x T it may take one more (max + 1); between the two the maximum stays;
//   3. a change within --cooldown seconds of the previous one is held (said once), so a signal
//      that wavers cannot make the job oscillate between sizes.
// Every change carries its reason, which the job's leader writes into its event log.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "elastic/scale_policy.h"

namespace cann::elastic {

struct ScaleSignals {
  int minute = 0;                           // local time of day, minutes after midnight
  std::optional<int> queued;                // jobs waiting for nodes; nullopt: not watched
  std::optional<double> node_tokens_per_s;  // the job's tokens/s per node; nullopt: unmeasured
  int nodes = 0;                            // nodes in the job's current generation
};

struct AutoScaleConfig {
  int min_nodes = 1;  // the bounds every decision stays inside
  int max_nodes = 1;
  std::vector<ScaleWindow> windows;
  double min_node_tokens_per_s = 0;  // 0: throughput not watched
  double cooldown_s = 300;
};

struct ScaleChange {
  int min_nodes = 1;
  int max_nodes = 1;
  std::string reason;
};

class AutoScaler {
 public:
  // Above this multiple of the threshold the job may grow by a node.
  static constexpr double kGrowMargin = 1.25;

  explicit AutoScaler(AutoScaleConfig config) : config_(std::move(config)) {}

  // The bounds to set now given the job's current ones, or nullopt to leave them (the signals
  // ask for what is set, or the cooldown holds; then held() says why, once per hold).
  std::optional<ScaleChange> decide(const ScaleSignals& s, int current_min, int current_max,
                                    double now_s);
  const std::string& held() const { return held_; }

 private:
  AutoScaleConfig config_;
  std::optional<double> last_change_s_;
  std::string held_;
  std::optional<std::pair<int, int>> held_target_;
};

}  // namespace cann::elastic
