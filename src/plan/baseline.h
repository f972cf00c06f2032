// The layout a search states its speed-ups against (`search --baseline`): the estimated
// speed-up of a candidate is the baseline's predicted step time over the candidate's, both
// priced exactly, so 2.0 means "half the baseline's step time at the same batch".
//
// By default the baseline is what a team runs before it plans: pure data parallelism over every
// device with the smallest ZeRO stage that fits, and at that stage the fastest micro-batch and
// recomputation that fit (a ZeRO stage that fits only with full recomputation at micro-batch 1
// is still pure data parallelism; a larger stage is only taken when no choice fits at the
// smaller one). No engine restriction applies: the baseline is a reference, not a plan to run.
#pragma once

#include <string>

#include "core/status.h"
#include "plan/predict.h"

namespace cann::plan {

// The default baseline at global batch `gbs`; NotFound when pure data parallelism cannot hold
// that batch or fits at no ZeRO stage (the message says which).
StatusOr<Prediction> default_baseline(const PlanInput& in, int gbs);

// A strategy string as `simulate --strategy` takes it, at global batch `gbs` where the string
// has none. InvalidArgument (exit 2) when it does not parse, does not suit the model and
// cluster, or does not fit the memory limit.
StatusOr<Prediction> baseline_of(const PlanInput& in, const std::string& text, int gbs);

// baseline step time / candidate step time.
double estimated_speedup(const Prediction& baseline, const Prediction& candidate);

}  // namespace cann::plan
