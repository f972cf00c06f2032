// The options `search` and `simulate` share for what they plan on: the cluster's size, the
// memory a device may use, the training sequence and the attention kernel
// (plan::PlanOverrides), so both commands spell and check them alike.
#pragma once

#include <CLI/CLI.hpp>

#include "cli/validators.h"
#include "plan/plan_input.h"

namespace cann::cli {

inline void add_plan_input_options(CLI::App* cmd, plan::PlanOverrides* o) {
  cmd->add_option("--nodes", o->nodes, "Use this many nodes of the cluster (default: its own)")
      ->check(kPositive);
  cmd->add_option("--max-memory-per-device", o->max_memory,
                  "Memory a device may use, e.g. 32GB (default: its capacity)");
  cmd->add_option("--seq-len", o->seq_len,
                  "Tokens per training sequence (default: the model's seq_length)")
      ->check(kPositive);
  cmd->add_option("--attention", o->attention,
                  "Attention kernel: fused (FlashAttention: the device's default fused kernel; "
                  "default on bf16 clusters), materialized (scores in memory; default on fp32 "
                  "ones), or a fused kernel measured on the device (flash2, cudnn)");
  cmd->add_option("--precision", o->precision,
                  "Training precision on an accelerator cluster: bf16 (default) or fp8 "
                  "(DeepSeek-V3's recipe; needs a device with an fp8 peak); on the CPU engine's "
                  "calibrated cluster, bf16 plans `run --precision bf16` (its measured bf16 "
                  "GEMM rate)");
}

}  // namespace cann::cli
