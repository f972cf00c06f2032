// JSON forms of the planner's answers: `cann-train simulate --json` (one prediction) and
// `cann-train search --json` (the search with its strategies, best first). The fields are
// documented in docs/planner.md; names and units are part of the interface (seconds, bytes,
// fractions in [0, 1]).
#pragma once

#include <string>

#include "plan/predict.h"
#include "plan/search.h"

namespace cann::plan {

// One strategy's object: strategy, step_time_s, tokens_per_s, model_tflops_per_device, mfu,
// memory_peak_bytes, fits, comm_ratio, bubble_ratio, goodput, tei, energy_kwh_per_step,
// cost_usd_per_day, and the breakdowns (time, goodput, stages).
std::string prediction_json(const PlanInput& in, const Prediction& p, int indent = -1);
// The search's object: model, cluster, devices, global_batch, objective, candidates_in_space,
// candidates_evaluated, candidates_pruned, search_time_s, feasible, pareto, baseline (null
// without one), strategies (with estimated_speedup against the baseline) and pareto_front.
// `no_baseline` says why there is none (`baseline_missing`).
std::string search_json(const PlanInput& in, const SearchResult& r, int indent = -1,
                        const Prediction* baseline = nullptr, const std::string& no_baseline = "");

}  // namespace cann::plan
