// The simulated schedule of one strategy as a Chrome trace (the JSON "Trace Event Format"
// that chrome://tracing and ui.perfetto.dev open): one process per pipeline stage, with a
// track for compute (forward and backward of each micro-batch and chunk, then the optimizer
// step), one for point-to-point sends, and one for collectives (the tensor-parallel and expert
// traffic exposed inside each pass, and the data-parallel gradient tail after the last
// backward). Times are in microseconds of simulated time from the start of the step.
#pragma once

#include <string>

#include "plan/predict.h"

namespace cann::plan {

// `p` must come from predict(..., Fidelity::kExact, /*record_events=*/true).
std::string chrome_trace(const PlanInput& in, const Prediction& p);

}  // namespace cann::plan
