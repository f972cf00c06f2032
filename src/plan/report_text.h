// The planner's answers as text for a terminal: the table of the best strategies, and the
// winner explained in plain words (where its step goes, what limits it, what the neighbouring
// choices would cost, and why the runner-up loses).
#pragma once

#include <string>
#include <vector>

#include "core/numbers.h"
#include "plan/predict.h"
#include "plan/search.h"

namespace cann::plan {

using ::cann::with_commas;  // core/numbers.h

// One row per strategy: strategy (the keys off their defaults), step time and its likely band,
// tokens/s, MFU, memory peak, communication share, bubble share, goodput, TEI, $ per million
// tokens and joules per token ("-" where the cluster has no price or TDP), and with a
// `baseline` the estimated speed-up against it. Under it: which objective ranked the rows,
// and which rows lie within the first one's error band on that objective.
std::string strategy_table(const PlanInput& in, const std::vector<Prediction>& rows,
                           Objective o = Objective::kThroughput,
                           const Prediction* baseline = nullptr);

// A few sentences about `winner` (and `runner_up`, may be null). Prices the winner's
// neighbours (less recomputation, a lower ZeRO stage, a larger micro-batch) to say which limit
// keeps it where it is.
// Under an objective other than throughput, the runner-up is compared on that objective.
std::string explain_winner(const PlanInput& in, const Prediction& winner,
                           const Prediction* runner_up, Objective o = Objective::kThroughput);

// The Pareto front over the objective (step time for throughput), memory peak and goodput, as
// rows from the best on the objective to the most frugal: all of it when short, else
// `max_rows` spread along it (the best, the smallest and the most reliable always among them).
std::string pareto_table(const std::vector<Candidate>& feasible,
                         Objective o = Objective::kThroughput, size_t max_rows = 8);

// Where one prediction's step goes, as a short line ("GEMM 61%, memory-bound 7%, ...").
std::string time_shares(const Prediction& p);

std::string format_bytes(double bytes);  // "57.0 GB" (binary GB)

// What the planner read the model as, in one line: family, exact parameter count, blocks,
// experts, sequence, and the attention kernel it prices; e.g. "llama3_8b: llama, 8,030,261,248
// parameters; SwiGLU, RMSNorm, rotary, 32 heads / 8 KV heads, untied head; sequence 8192;
// attention fused".
std::string model_summary(const PlanInput& in);

}  // namespace cann::plan
