// TrainConfig: everything `cann-train run` takes, with the defaults of the demo run.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "core/status.h"
#include "kernels/cpu/gemm.h"
#include "monitor/alerts.h"
#include "monitor/server.h"
#include "plan/buckets.h"
#include "plan/engine_support.h"
#include "plan/strategy.h"

namespace cann::plan {
struct ClusterSpec;
}

namespace cann::train {

// --expert-rebalance every=K[,cooldown=C][,replicas=R]: MoE experts placed over the
// expert-parallel ranks by their measured load, hot ones maybe replicated
// (train/expert_rebalance.h).
struct ExpertRebalance {
  int every = 0;     // decide every K steps; 0: never
  int cooldown = 1;  // decisions after a move that keep the placement
  int replicas = 0;  // experts per layer that may get a copy on every expert-parallel rank
  // Prices a move against what it saves: the calibrated spec of this machine's processes.
  std::shared_ptr<const plan::ClusterSpec> cluster;
};
// "every=K[,cooldown=C][,replicas=R]" -> the settings (cluster unset); errors name the bad item.
StatusOr<ExpertRebalance> parse_expert_rebalance(const std::string& text);

struct TrainConfig {
  std::string model = "gpt_tiny";  // shipped name or path to a YAML/config.json
  std::string data = "fortunes";   // "fortunes", a text file, a directory, or llm.c shards
  int steps = 1000;
  int batch_size = 16;  // global batch: sequences per optimizer step
  int seq_len = 0;      // 0: the model's seq_length
  float lr = 2e-3f;
  int warmup = -1;  // -1: 5% of the steps, at most 200
  float min_lr_ratio = 0.1f;
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;
  // noaux_tc MoE models: the expert bias update speed; < 0: the model spec's (0.001 unless set).
  double expert_bias_update_speed = -1.0;
  uint64_t seed = 1337;
  int threads = 0;       // 0: every core
  int eval_every = 100;  // 0: only at the end
  int eval_batches = 8;
  std::string log_json;  // JSONL step log path; empty: none
  std::string checkpoint_dir;
  int checkpoint_every = 0;  // 0: only at the end (when checkpoint_dir is set)
  int keep_checkpoints = 3;
  double checkpoint_bandwidth_mb = 0.0;  // MB/s cap on the background write; 0: none
  bool resume = false;
  int exit_interval = 0;    // stop (after checkpointing) at the first step that is a multiple
  int sample_tokens = 256;  // gpt: bytes generated at the end; 0: none
  bool quiet = false;       // no progress lines (summary and errors only)
  // The parallel layout, parsed once from --strategy. Omitted keys as parse_strategy leaves
  // them: dp 0 (every process not in tp x pp x cp), mbs 0 (no accumulation, or one sequence
  // per pipeline micro-batch), gbs 0 (--batch-size).
  plan::Strategy strategy = {.dp = 0, .mbs = 0};
  int grad_accum = 0;          // micro-steps per optimizer step; 0: from the strategy's mbs, or 1
  plan::Compression compress;  // --compress
  int onebit_warmup = -1;      // full-gradient steps before compressing; -1: 15% of the run
  bool onebit_warmup_bf16 = true;  // --onebit-warmup-precision: those steps' all-reduce in bf16
  double bucket_mb = plan::kBucketMiB;  // bucket size after the first (1 MiB) one; 0: automatic
  int compute_nice = 0;                 // nice value of compute threads in multi-process runs
  // The GEMMs' input precision (--precision); accumulation, weights, gradients and optimizer
  // state stay fp32 either way.
  kernels::GemmPrecision precision = kernels::GemmPrecision::kFp32;
  // pp > 1: auto (1f1b, or interleaved with vpp > 1) | gpipe | 1f1b | interleaved
  std::string pipeline_schedule = "auto";
  // Monitoring: who serves the dashboard is decided by Trainer::start_monitoring.
  bool monitor = true;
  monitor::ServerConfig monitor_server = [] {
    monitor::ServerConfig c;
    c.try_next_ports = true;  // the default port is a preference; an explicit one is not
    return c;
  }();
  monitor::AlertConfig alerts;
  // What the efficiency figures need that a run cannot measure (efficiency_meter.h): the
  // devices' peak, power and price, from the plan's cluster (run --plan) or a calibrated spec of
  // this machine; and the plan's predictions to show beside the measured figures.
  struct DeviceFigures {
    double peak_tflops = 0;  // 0: unknown
    double watts = 0;
    double hourly_usd = 0;
    std::string source;  // "cluster 8_h100 of plan p.yaml", for the start-up line
  } devices;
  std::map<std::string, double> predicted;
  std::string tensorboard_dir;  // rank 0 writes TensorBoard scalars here; empty: none
  // Debugging (docs/monitoring.md).
  std::string profile;                  // "wait=W,warmup=U,active=A"; empty: no profiling
  std::string profile_dir = "profile";  // trace-rank<R>.json and the merged trace.json
  bool grad_norms = false;              // per-layer gradient norms in the step log
  bool halt_on_nan = false;             // stop with a dump at the first non-finite gradient
  int link_probe_every = 0;             // measure every pair's bandwidth every K steps; 0: never
  ExpertRebalance expert_rebalance;     // --expert-rebalance
  std::string dump_grads;               // safetensors file of one step's gradient; empty: none
  int dump_grads_step = 1;              // the step whose gradient --dump-grads writes
  // Hugging Face weights (hf_weights.h): a model directory to start from; one to write the
  // trained model to at the end. Empty: none.
  std::string init_from;
  std::string export_hf;

  int resolved_warmup() const {
    if (warmup >= 0) return warmup;
    const int w = steps / 20;
    return w < 200 ? w : 200;
  }
};

}  // namespace cann::train
