// Plan files: what `search --out` and `simulate --out` write and `run --plan` trains. A plan
// names the model and cluster it was made for, the strategy, the planner's predictions and
// the launch line; after a run it also holds the measured figures beside the predicted ones,
// so a team can keep validated plans (recipes) under version control and compare two with
// `cann-train plan diff`.
//
// The file is YAML:
//
//   format: 1
//   model: llama_tiny                   # the --model argument the plan was made with
//   model_name: llama_tiny
//   model_fingerprint: 8c1e5b0d37a9f412 # of the model's canonical spec (spec_json.h)
//   model_params: 2214016
//   cluster: local                      # the --cluster argument
//   nodes: 1
//   devices_per_node: 2
//   global_batch: 8
//   seq_len: 64
//   strategy: dp=2,tp=1,...
//   predicted: {step_time_s: ..., step_time_s_low: ..., step_time_s_high: ...,
//               tokens_per_s: ..., mfu: ..., memory_peak_gb: ..., comm_ratio: ...,
//               estimated_speedup: ...}        # search --out with a baseline only
//   baseline: dp=64,...,zero=1,...       # what estimated_speedup is stated against
//   launch: cann-train run --plan FILE
//   measured: {...}                     # only once a run has trained it
#pragma once

#include <map>
#include <optional>
#include <string>

#include "core/status.h"
#include "model/spec.h"
#include "plan/predict.h"
#include "plan/strategy.h"

namespace cann::plan {

// What a run measured of a plan, written by the run's leader at its end.
struct PlanMeasured {
  int world = 0;                 // processes that trained it
  int steps = 0;                 // optimizer steps timed (the run's, warm-up included)
  double step_time_s = 0;        // median, the first two steps left out when there are more
  double tokens_per_s = 0;       // global batch x sequence / step_time_s
  double memory_peak_gb = 0;     // the leader's peak resident memory
  double loss_first = 0, loss_last = 0;
  double val_loss = -1;          // -1: never evaluated
  std::string finished_at;       // UTC, ISO 8601
  // The leader's efficiency figures by the predicted ones' names (tei, mfu,
  // scaling_efficiency, comm_ratio, goodput); absent in plans measured before they were kept.
  std::map<std::string, double> efficiency;
};

struct PlanFile {
  std::string model;             // as given to the planner: a shipped name or a path
  std::string model_name;
  std::string model_fingerprint;
  double model_params = 0;
  std::string cluster;           // as given: a preset, a calibrated name or a path
  int nodes = 0, devices_per_node = 0;
  int global_batch = 0;
  int seq_len = 0;
  // Plans of the CPU engine (an fp32 cluster): the GEMM precision planned, "fp32" or "bf16"
  // (`run --precision`); empty for accelerator clusters and plans written before the key.
  std::string precision;
  Strategy strategy;
  // Predicted figures by name: step_time_s, step_time_s_low, step_time_s_high, tokens_per_s,
  // mfu, memory_peak_gb, comm_ratio; estimated_speedup when a search had a baseline.
  std::map<std::string, double> predicted;
  std::string baseline;  // the baseline's strategy string, beside estimated_speedup
  std::string launch;
  std::optional<PlanMeasured> measured;

  int devices() const { return nodes * devices_per_node; }
};

// The fingerprint of a model: FNV-1a over its canonical spec with the name, the source and the
// training sequence length left out (the plan keeps that as seq_len),
// so the same architecture read from two files matches and any change of shape does not.
std::string model_fingerprint(const model::ModelSpec& spec);

// A plan of prediction `p` for `in`; `model_arg` and `cluster_arg` as the user gave them.
PlanFile make_plan_file(const PlanInput& in, const Prediction& p, const std::string& model_arg,
                        const std::string& cluster_arg, const std::string& path);

std::string plan_file_text(const PlanFile& plan);
// Writes atomically (a failed write leaves the old file).
Status write_plan_file(const std::string& path, const PlanFile& plan);
// One-line errors naming the file and the key: not found, not YAML, a missing or malformed key,
// a format this build does not read.
StatusOr<PlanFile> read_plan_file(const std::string& path);

// Side by side: every field that differs, numbers with B/A. `a_name`/`b_name` head the columns.
std::string plan_diff(const PlanFile& a, const PlanFile& b, const std::string& a_name,
                      const std::string& b_name);

}  // namespace cann::plan
