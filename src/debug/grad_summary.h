// `cann-train debug grads LOG`: per-layer gradient-norm statistics from a step log written with
// `run --grad-norms` (the "grad_norms" object of each step line and the "nonfinite_grad"
// event), as a table a person reads: per layer the steps seen, min / median / max, the trend
// (median of the last tenth of the steps over the median of the first tenth), the spikes, and
// the first non-finite gradient (step and layer, in backward order).
//
// A spike is a step whose norm exceeds kSpikeFactor times the median of the layer's previous
// kSpikeWindow finite norms (once at least 5 are known): a robust local baseline, so the
// large norms of the first steps do not hide a later spike and a slow drift is not one.
//
// Depends on core only (nlohmann in the .cc). Errors name the file and line.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace cann::debug {

inline constexpr double kSpikeFactor = 3.0;
inline constexpr int kSpikeWindow = 20;

struct LayerGradSummary {
  std::string name;
  int steps = 0;  // steps with a finite norm
  double min = 0.0, median = 0.0, max = 0.0;
  double trend = 0.0;  // last-tenth median / first-tenth median; 0 with fewer than 10 steps
  std::vector<int> spike_steps;
  int first_nonfinite_step = -1;
};

struct GradLogSummary {
  int lines = 0;  // step lines with grad_norms
  int first_step = 0, last_step = 0;
  std::vector<LayerGradSummary> layers;  // forward order, as the log lists them
  int first_nonfinite_step = -1;
  std::string first_nonfinite_layer;  // first in backward order at that step
};

// `text` is the log's content; `name` (the file) goes into error messages. Errors:
// kInvalidArgument for a line that is not a JSON object ("FILE:LINE: ..."), or for a log with
// no grad_norms at all (with a hint to run with --grad-norms).
StatusOr<GradLogSummary> summarize_grad_log(const std::string& text, const std::string& name);

// The human-readable report.
std::string format_grad_summary(const GradLogSummary& s, const std::string& name);

}  // namespace cann::debug
