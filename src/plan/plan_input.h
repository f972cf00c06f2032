// Loading what a planner command works on: a model (shipped name or file), a cluster (preset
// name or file, optionally resized to a number of nodes) and a memory limit given as a size
// with a unit ("32GB"). Shared by `cann-train search`, `cann-train simulate` and the planner
// benchmark so all three accept and reject the same input with the same messages.
#pragma once

#include <string>

#include "core/status.h"
#include "plan/predict.h"

namespace cann::plan {

// "32GB", "32G", "32GiB", "500MB", "1.5TB", or a plain number of GB. Units are binary
// (1 GB = 2^30 bytes), as accelerator memory is sized.
StatusOr<double> parse_byte_size(const std::string& text);

// What a planner command may override: `nodes` > 0 replaces the cluster's node count;
// `max_memory` (may be empty: the device's capacity is the limit); `seq_len` > 0 the training
// sequence (the spec's seq_length; at most a learned position table); `attention` "fused" or
// "materialized" the cluster's attention kernel and `precision` "bf16" or "fp8" its training
// precision (empty: the cluster's).
struct PlanOverrides {
  int nodes = 0;
  std::string max_memory;
  int seq_len = 0;
  std::string attention;
  std::string precision;
};
StatusOr<PlanInput> load_plan_input(const std::string& model, const std::string& cluster,
                                    const PlanOverrides& o);
// Sets the cluster's training precision from a `--precision` value, "bf16" or "fp8": on the
// CPU engine's fp32 cluster bf16 means bf16 GEMMs at the measured bf16 rate (refused without
// one), fp8 is refused; an accelerator cluster trains at that precision.
Status select_training_precision(ClusterSpec* c, const std::string& precision);
StatusOr<PlanInput> load_plan_input(const std::string& model, const std::string& cluster, int nodes,
                                    const std::string& max_memory);

}  // namespace cann::plan
