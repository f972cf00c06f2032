// How far a predicted step time may be from the real one: an interval read off the planner's
// own residuals on published runs it was never fitted to (validation.h,
// configs/validation/planner_cases.yaml), by the kind of layout, since a pure data-parallel
// ZeRO-3 job and a pipelined tensor-parallel one miss for different reasons.
//
// For each kind the band is the 10th and 90th percentile of the signed errors
// e = predicted / published - 1 of that kind's validation rows. A prediction T then carries
//
//   low = T / (1 + p90),  high = T / (1 + p10)
//
// e.g. p10 = -20%, p90 = +5%, T = 10 s: the real step is likely within 9.52 .. 12.5 s.
// The table below is what `validation_bench` prints under "error bands"; a test reruns the
// validation and fails when they differ, so the bands follow the model as it changes.
#pragma once

#include <string_view>

#include "model/spec.h"
#include "plan/strategy.h"

namespace cann::plan {

// dp: data parallelism and ZeRO only; tp: tensor or context parallelism with data parallelism;
// pipeline: pipeline stages with anything but experts; moe: expert layers, any layout.
enum class LayoutKind { kDp, kTp, kPipeline, kMoe };

std::string_view layout_kind_name(LayoutKind k);
LayoutKind layout_kind(const Strategy& s, const model::ModelSpec& m);

struct ErrorBand {
  double p10 = 0, p90 = 0;  // signed errors, predicted / published - 1
  int rows = 0;             // validation rows behind it
};

// The checked-in band of a kind (see the file comment).
ErrorBand error_band(LayoutKind k);
// The interval a prediction of `step_s` carries under band `b`: {low, high}.
struct StepBand {
  double low_s = 0, high_s = 0;
};
StepBand step_band(double step_s, const ErrorBand& b);
// Whether two predicted intervals overlap: the model cannot rank the two.
inline bool bands_overlap(const StepBand& a, const StepBand& b) {
  return a.low_s <= b.high_s && b.low_s <= a.high_s;
}

}  // namespace cann::plan
