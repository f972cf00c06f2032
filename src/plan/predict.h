// predict: one strategy in, the planner's full forecast out: step time, throughput, MFU,
// memory per device, communication and bubble shares, goodput under failures, energy and
// cost, with a per-stage breakdown. Blocks (layer_cost.h) are laid onto pipeline stages
// (partition.h), the schedule is timed (pipeline.h), then the step-level work is added: the
// data-parallel gradient reduction by ZeRO stage, overlapped with the backward pass so only
// its tail is exposed, and the optimizer step.
//
// Precision convention: bf16 weights (2 bytes per parameter), fp32 gradients (4: Megatron-LM
// accumulates and reduces gradients in fp32 whenever it trains in bf16, and so did Llama 3,
// Dubey et al. 2024, section 3.3.2), fp32 master weights and Adam moments (4 + 4 + 4): 18 bytes
// per parameter (Rajbhandari et al. 2020, ZeRO, section 3.1, count 16 with fp16 gradients).
// ZeRO-1 shards the 12 optimizer bytes over the data-parallel group (times cp), ZeRO-2 the
// gradients too, ZeRO-3 the weights too. Expert parameters shard over their own, ep times
// smaller, data-parallel group. Checkpoints hold the 12 optimizer bytes.
//
// Under fp8 (DeepSeek-V3's recipe) the AdamW moments are bf16: 2 + 4 + 4 + 2 + 2 = 14 bytes.
//
// On an fp32 device (cluster.h) the figures are cann-train's engine's own allocation
// (engine_memory.h): 4-byte weights and gradients, 8 bytes of AdamW moments, ZeRO-1's gradient
// shard and staging, the engine's activation arena, and nothing reserved.
#pragma once

#include <algorithm>

#include <vector>

#include "core/status.h"
#include "model/spec.h"
#include "plan/cluster.h"
#include "plan/engine_memory.h"
#include "plan/goodput.h"
#include "plan/layer_cost.h"
#include "plan/model_shape.h"
#include "plan/pipeline.h"
#include "plan/strategy.h"

namespace cann::plan {

// kFast: bisection partition and the closed-form pipeline (the search's inner loop).
// kExact: dynamic-programming partition and the event simulation (what reports show).
enum class Fidelity { kFast, kExact };

// Runtime context, communicator buffers and allocator fragmentation that a framework keeps on
// every device beyond the tensors counted here (about 2 GiB on PyTorch + NCCL/HCCL jobs).
inline constexpr double kReservedBytes = 2.0 * 1073741824.0;
// What the planner reserves on a device: its spec's runtime_reserve_GB where given (a
// calibrated CPU device: what a worker process holds before it allocates any training state),
// else by precision: kReservedBytes for bf16 and fp8 devices, none for fp32, whose figures are
// then cann-train's own buffers alone.
double reserved_bytes(const DeviceSpec& d);
// Compute time added per second of compute that overlaps a collective (DeviceSpec's
// overlap_slowdown where given): on bf16 and fp8 devices kOverlapSlowdown, the mean slowdown of
// GPT and Llama training kernels while a collective ran beside them, measured on A100, H100,
// MI250 and MI210 (Lee et al. 2025, "Characterizing Compute-Communication Overlap in
// GPU-Accelerated Distributed Deep Learning", abstract: 18.9% on average, 40.0% at most); on
// fp32 (CPU) devices none, not measured.
inline constexpr double kOverlapSlowdown = 0.189;
double overlap_slowdown(const DeviceSpec& d);
// Data-parallel gradient bucket: Megatron-LM's default of 40M parameters, fp32 gradients.
inline constexpr double kGradBucketParams = 40e6;
inline constexpr double kGradBucketBytes = kGradBucketParams * 4;
// Megatron-Core grows the bucket with the data-parallel size, max(40M, 1M x dp) parameters, so
// that each collective stays bandwidth-bound however many ranks its ring has
// (megatron/core/distributed/distributed_data_parallel_config.py, bucket_size).
inline constexpr double kGradBucketParamsPerRank = 1e6;
inline double grad_bucket_bytes(int dp) {
  return 4 * std::max(kGradBucketParams, kGradBucketParamsPerRank * dp);
}

// Bytes a device keeps per parameter it holds, by precision (see above).
struct StateBytes {
  double weights = 0, grads = 0, optimizer = 0;
};
// With `bf16_optimizer`: gradients reduced and kept in bf16, the optimizer's master copy and
// both AdamW moments in bf16 (PlanInput::bf16_optimizer_state).
StateBytes state_bytes(Precision p, bool bf16_optimizer = false);
// Whether the output head's weight is the token embedding's (so a pipeline keeps a copy on
// its last stage and sums the two gradients).
bool tied_across_stages(const model::ModelSpec& m);

struct PlanInput {
  model::ModelSpec model;
  ModelShape shape;
  ClusterSpec cluster;
  double memory_limit_bytes = 0;  // min(device capacity, --max-memory-per-device)
  int seq_len = 0;                // tokens per sequence; 0: the model's seq_length
  EngineBuckets engine_buckets;   // fp32 devices: the engine's gradient buckets
  // ZeRO-3 gathers and reduces each parameter tensor with a collective of its own, as
  // DeepSpeed's stage 3 did in 2021 (Narayanan et al. 2021 compare against it), instead of a
  // layer at a time (PyTorch FSDP, Megatron-Core): many more collectives, each paying its
  // latency (comm_model.h).
  bool zero3_per_tensor = false;
  // The optimizer keeps its state in bf16: gradients reduced and kept in bf16 (2 bytes), the
  // master copy and both AdamW moments in bf16 (6), as Apex's DistributedFusedAdam does with
  // dtype and grad_sync_dtype bf16 (NeMo's Nemotron-4 340B recipe). bf16 and fp8 devices only.
  bool bf16_optimizer_state = false;
};

StatusOr<PlanInput> make_plan_input(const model::ModelSpec& m, const ClusterSpec& c,
                                    double max_memory_bytes);

struct StageReport {
  std::vector<std::pair<int, int>> layers;  // [first, last] per chunk, inclusive
  bool embedding = false, head = false;
  double fwd_s = 0, bwd_s = 0;            // per micro-batch, all chunks; bwd includes recomputation
  double fwd_comm_s = 0, bwd_comm_s = 0;  // the exposed collectives inside fwd_s and bwd_s
  double weights_bytes = 0, grads_bytes = 0, optimizer_bytes = 0;
  double activation_bytes = 0, transient_bytes = 0, total_bytes = 0;
  double reserved_bytes = 0;    // in total_bytes
  double grad_shard_bytes = 0;  // fp32, ZeRO-1: the reduce-scattered gradients, in grads_bytes
  double scratch_bytes = 0;     // fp32: the engine's backward scratch, in transient_bytes
  // fp32 on huge pages: what whole 2 MiB pages add to the engine's mapped buffers, resident
  // beside total_bytes (which counts the bytes the engine asks for, as its own accounting does)
  double page_slack_bytes = 0;
  double dp_comm_s = 0, optimizer_s = 0;
};

// Where the bottleneck device's step goes, in seconds; the parts add up to the step time.
struct TimeBreakdown {
  double gemm_s = 0, stream_s = 0, recompute_s = 0;
  double tp_comm_s = 0, ep_comm_s = 0, cp_comm_s = 0, p2p_s = 0, dp_comm_s = 0;
  double bubble_s = 0, optimizer_s = 0;
  double comm_s() const { return tp_comm_s + ep_comm_s + cp_comm_s + p2p_s + dp_comm_s; }
};

struct Prediction {
  Strategy strategy;
  double step_time_s = 0;
  // The interval the step time likely falls in, from the validation residuals of layouts of
  // this kind (error_band.h).
  double step_time_s_low = 0, step_time_s_high = 0;
  double tokens_per_s = 0;
  double model_tflops_per_device = 0;  // model FLOPs only: no recomputation, no padding
  double mfu = 0;
  double hfu = 0;  // hardware FLOPs (recomputation and capacity padding included)
  double memory_peak_bytes = 0;
  double memory_limit_bytes = 0;
  bool fits = false;
  double comm_ratio = 0;
  double bubble_ratio = 0;
  double scaling_efficiency = 0;
  double tei = 0;
  Goodput goodput;
  double energy_kwh_per_step = 0;
  double cost_usd_per_day = 0;
  int bottleneck_stage = 0;
  TimeBreakdown time;
  std::vector<StageReport> stages;
  PipelineResult pipeline;  // events only when recorded
  double p2p_message_s = 0;
};

// Validates the strategy against model and cluster first.
StatusOr<Prediction> predict(const PlanInput& in, const Strategy& s, Fidelity f,
                             bool record_events = false);

// The two phases of a prediction, for the search, which reuses each phase's result across
// the choices that do not change it. No validation.
//
// Phase 1: layers onto stages, chunk costs, pipeline timing. Depends on the block costs (tp,
// cp, ep, sp, mbs, recompute), pp, vpp and the micro-batch count, not on ZeRO.
struct StageLayout {
  std::vector<int> bounds;  // virtual-stage boundaries over the layers
  PipelineResult pipeline;
  double p2p_message_s = 0;
  std::vector<StageReport> stages;  // layers, fwd_s, bwd_s filled
  std::vector<double> params, expert_params, extra_bytes, max_layer_params;
  std::vector<PassCost> work, recompute;  // one micro-batch, per device
  double scratch_bytes = 0;               // BlockCosts::scratch_bytes, on every device
};
StageLayout layout_stages(const PlanInput& in, const Strategy& s, const BlockCosts& blocks,
                          Fidelity f, bool record_events = false);
// What the pipeline partition balances, per layer: its forward, backward and recomputation
// time, with the embedding's added to the first layer and the head's (and the multi-token
// prediction module's) to the last. The
// planner's stage layout and the engine's pipeline stages (engine_stage_bounds) both cut
// these, so they split a model the same way.
std::vector<double> stage_layer_costs(const model::ModelSpec& m, const BlockCosts& blocks);
// Phase 2: data-parallel traffic, optimizer, memory, goodput and the headline numbers.
Prediction finish_prediction(const PlanInput& in, const Strategy& s, const StageLayout& layout,
                             Fidelity f);
// Peak memory only (phase 2's memory part), for pruning.
double memory_peak(const PlanInput& in, const Strategy& s, const StageLayout& layout);

}  // namespace cann::plan
