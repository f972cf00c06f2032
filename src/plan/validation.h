// The planner against published training runs it was never fitted to: each case names a
// model, a cluster, the layout the run used and the one figure its source published
// (iteration time, per-layer time, TFLOP/s per GPU under the source's own FLOP formula, MFU,
// tokens per second per GPU); the planner predicts the run and both are turned into seconds
// per iteration by the source's formula, so like is compared with like. The cases live in
// configs/validation/planner_cases.yaml, each pointing at its row of published_runs.yaml,
// which records where every number was read.
//
// Signed error = predicted / published iteration time - 1: negative means the planner is too
// fast (optimistic).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "plan/error_band.h"
#include "plan/plan_input.h"
#include "plan/predict.h"

namespace cann::plan {

// What the source published, and how it counts FLOPs.
enum class Measure { kIterationTime, kLayerTime, kTflopsPerGpu, kMfu, kTokensPerGpu };
enum class FlopFormula {
  kNone,
  // Narayanan et al. 2021, eq. 3: 96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)) per iteration, the
  // hardware FLOPs of a GPT with full recomputation.
  kNarayanan,
  // Megatron-LM's model FLOPs: 72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)) for an MHA 4h GPT
  // (Korthikanti et al. 2022, Appendix A; megatron/training/training.py).
  kMegatron,
  // PaLM (Chowdhery et al. 2022, appendix B): model_shape's flops_per_token.
  kPalm,
  // 6*N + 12*L*h*s per token with N every parameter, embeddings included (MosaicML's and
  // torchtitan's scripts).
  kSixNAll,
};

struct ValidationCase {
  std::string id;      // the row of published_runs.yaml
  std::string source;  // "Narayanan et al. 2021, Table 2"
  std::string kind;    // layout kind for error bands: dp, tp, pipeline, moe, cp
  std::string model;   // a shipped name, or a spec as YAML text
  std::string cluster;
  PlanOverrides overrides;
  double memory_gb = 0;        // > 0: a device of this capacity (A100 40GB)
  double inter_node_GBps = 0;  // > 0: this network per device (BLOOM's Omni-Path)
  bool zero3_per_tensor = false;  // zero3_gather: tensor (DeepSpeed's 2021 stage 3; predict.h)
  bool bf16_optimizer_state = false;  // optimizer_state: bf16 (predict.h)
  std::string strategy;
  Measure measure = Measure::kIterationTime;
  FlopFormula formula = FlopFormula::kNone;
  double published = 0;      // in the measure's unit (s, ms, TFLOP/s, fraction, tokens/s)
  bool calibration = false;  // fitted against (Korthikanti 2022, Table 5): not out of sample
  std::string assumptions;
};

struct ValidationOutcome {
  ValidationCase c;
  double published_s = 0;  // the published figure as seconds per iteration (or per layer)
  double predicted_s = 0;
  double error = 0;  // predicted_s / published_s - 1
  bool fits = false;
  double memory_peak_bytes = 0, memory_limit_bytes = 0;
  Prediction prediction;              // the whole-step prediction (its time breakdown, bubble, MFU)
  LayoutKind kind = LayoutKind::kDp;  // of the resolved layout; the case's `kind` must agree
  // Whether the fit is a target: a source that timed one layer (Korthikanti et al. 2022,
  // Table 4) ran that layer, not the whole model in the row's layout, so the whole model's
  // memory (shown) says nothing about a run that took place.
  bool memory_judged() const { return c.measure != Measure::kLayerTime; }
};

// Parses the cases file; `source` names it in errors.
StatusOr<std::vector<ValidationCase>> parse_validation_cases(const std::string& text,
                                                             const std::string& source);
StatusOr<ValidationOutcome> run_validation_case(const ValidationCase& c);

struct ValidationSummary {
  int rows = 0, sources = 0;
  double median_abs = 0, mean_signed = 0;
  std::string worst_id;
  double worst = 0;
  // The 10th and 90th percentiles of the signed errors, overall.
  double p10 = 0, p90 = 0;
};
// Over the out-of-sample outcomes (calibration rows left out).
ValidationSummary summarize(const std::vector<ValidationOutcome>& outcomes);
// Error bands by layout kind (error_band.h) from the out-of-sample outcomes, indexed by
// LayoutKind. A kind with fewer than kMinBandRows rows takes the band of all rows: three
// points give no percentiles.
inline constexpr int kMinBandRows = 5;
std::vector<ErrorBand> error_bands(const std::vector<ValidationOutcome>& outcomes);
// The table, one row per outcome, then the summary and the error bands.
std::string validation_table(const std::vector<ValidationOutcome>& outcomes);

}  // namespace cann::plan
