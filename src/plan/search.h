// Exhaustive strategy search. Every valid combination of dp, tp, pp, ep, cp, sp, micro-batch,
// ZeRO stage, recomputation and vpp for the cluster's device count is priced, infeasible
// branches are cut before their leaves are priced, feasible candidates are ranked by the chosen
// objective (objective.h; predicted throughput by default) under the user's constraints, and
// the Pareto front over the objective, memory peak and goodput is marked.
//
// Loop order puts the expensive parts outside: block costs (the kernel lists) are computed once
// per (tp, cp, ep, sp, mbs, recompute) and shared by every pp; the stage layout (partition and
// pipeline) once per (pp, vpp); the ZeRO stage only changes the step-level arithmetic.
// Pruning uses a bound that cannot cut a feasible candidate (derivation at memory_floor in
// search.cc): every layer holds at least the state of the lightest layer kind at the ZeRO
// stage in question and the activations of one micro-batch under the recomputation in
// question, and device i of the pipeline holds min(m, p - i) micro-batches of them. Leaves
// whose floor exceeds the memory limit are cut before their stages are laid out, and a
// (pp, vpp) layout is only computed when some ZeRO stage under it can fit.
//
// The ranking uses the fast fidelity (closed-form pipeline); the best candidates are then
// re-priced with the event simulation and the exact partition, and re-ranked.
#pragma once

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "plan/engine_support.h"
#include "plan/objective.h"
#include "plan/predict.h"

namespace cann::plan {

struct SearchOptions {
  int global_batch = 0;         // sequences per step; 0: default_global_batch(model)
  double max_comm_ratio = 1.0;  // exposed communication / step time
  int top_k = 5;                // strategies reported in full
  int exact_rerank = 16;        // fast-ranked candidates re-priced exactly
  bool prune = true;            // false: price every leaf (the tests compare the two)
  int max_micro_batch = 64;     // micro-batch sizes tried: divisors of gbs/dp up to this
  // Only layouts cann-train's engine trains (`run`): every rule of plan::engine_supports
  // (engine_support.h) for a run of `engine`'s shape. Unset: on for an fp32 cluster (which
  // describes the engine), off on bf16 and fp8 clusters, whose plans are for Megatron-style
  // trainers that run those layouts. The loops skip early the branches the engine never trains
  // (sp with ep, cp with MoE layers, ZeRO with ep); the others leave the space when reached.
  std::optional<bool> engine_only;
  EngineShape engine;
  Objective objective = Objective::kThroughput;  // what ranks the candidates
  // Constraints beside memory and communication. Every strategy uses all the cluster's
  // devices, so the cost per hour is the cluster's (objective.h): it passes all or none.
  double max_usd_per_hour = INFINITY;
  double min_goodput = 0;  // 0..1
};

// One feasible candidate, as the scatter plot and the Pareto front see it.
struct Candidate {
  Strategy strategy;
  double step_time_s = 0;
  double step_time_s_low = 0, step_time_s_high = 0;  // its error band (error_band.h)
  double tokens_per_s = 0;
  double memory_peak_bytes = 0;
  double goodput = 0;
  double comm_ratio = 0;
  double mfu = 0;
  double tei = 0;
  double usd_per_million_tokens = 0;
  double joules_per_token = 0;
  bool pareto = false;

  ObjectiveFigures figures() const;
};

struct SearchResult {
  long long space = 0;      // valid strategies for this model, cluster and batch
  long long evaluated = 0;  // strategies priced in full
  long long pruned = 0;     // strategies cut by a bound, never priced
  double search_time_s = 0;
  int global_batch = 0;
  std::vector<Prediction> top;      // best first, exact fidelity
  std::vector<Candidate> feasible;  // every candidate meeting the constraints
  int pareto_count = 0;
  Objective objective = Objective::kThroughput;
  // Candidates that fit memory and the communication limit but failed a constraint (one
  // candidate may fail both; the exact re-pricing's removals included).
  long long removed_by_cost = 0, removed_by_goodput = 0;
  long long within_limits = 0;  // candidates fitting memory and the communication limit
};

// 2^22 tokens (about 4M) per step, rounded to a power-of-two number of sequences: the batch of
// GPT-3 175B (3.2M tokens, Brown et al. 2020, Table 2.1) and of Llama 3 405B's first training
// stage (4M, Dubey et al. 2024, section 3.4.1).
int default_global_batch(const model::ModelSpec& m);

// Fails (InvalidArgument, exit 2) when no strategy fits memory and the communication limit,
// naming the closest candidate and by how much it misses; FailedPrecondition (exit 1) when
// strategies do but --max-cost-per-hour or --min-goodput removes them all, saying which
// removed how many.
StatusOr<SearchResult> search(const PlanInput& in, const SearchOptions& opt);

// Marks candidates no other candidate beats on all of the objective, memory and goodput
// (throughput: step time, the same order at one batch size).
void mark_pareto(std::vector<Candidate>& c, Objective o = Objective::kThroughput);

// A prediction as the search keeps it, its cost and energy figures from the cluster's prices.
Candidate candidate_of(const PlanInput& in, const Prediction& p);
ObjectiveFigures figures_of(const PlanInput& in, const Prediction& p);

}  // namespace cann::plan
