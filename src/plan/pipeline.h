// Pipeline schedules: 1F1B (PipeDream-Flush, Narayanan et al. 2021) and interleaved 1F1B
// (vpp model chunks per device, Narayanan et al. 2021, section 2.2), over stages whose costs
// differ. Two ways to get a schedule's length:
//
//  - simulate_pipeline: an event simulation of Megatron-LM's exact op order on every device
//    (warm-up forwards, steady one-forward-one-backward, cool-down backwards), with a blocking
//    send of p2p_s after every forward that feeds another device and every backward that
//    returns a gradient. Exact for the model, O(devices * chunks * micro-batches). It also
//    tracks the activations each device holds, so the memory peak of in-flight micro-batches
//    is measured, not assumed, and can record every slice for a Chrome trace.
//  - estimate_pipeline: the closed form the search uses. With interleaving,
//        T = (m - 1) * max_i S_i + max_i S_i + (sum_i S_i - max_i S_i) / v
//    where S_i is device i's time per micro-batch (all its chunks, sends included); with equal
//    stages this is (m + (p-1)/v) * S, whose idle share (p-1)/(v*m + p-1) is the bubble of
//    Narayanan et al. (2021), section 2.2. Without interleaving, the longest of the per-stage
//    critical paths (derivation in pipeline.cc), which is exact when one stage is the
//    bottleneck and (m + p - 1) * S with equal stages.
//
// Worked example: p = 4 equal stages, F = 1, B = 2, m = 8, no p2p: T = (8 + 3) * 3 = 33,
// bubble = 3/11 = 27%; with vpp = 2 (chunks of F = 0.5, B = 1): T = (8 + 3/2) * 3 = 28.5,
// bubble = 3/19 = 16%.
#pragma once

#include <vector>

namespace cann::plan {

struct ChunkCost {
  double fwd_s = 0;             // forward of one micro-batch through this chunk's layers
  double bwd_s = 0;             // backward, including any recomputation
  double activation_bytes = 0;  // stored from its forward until its backward
};

struct PipelineInput {
  int pp = 1;
  int vpp = 1;
  int micro_batches = 1;
  // chunks[i][c]: device i's chunk c, which is virtual stage c * pp + i.
  std::vector<std::vector<ChunkCost>> chunks;
  double p2p_s = 0;  // one activation or gradient message between adjacent stages
};

enum class PipeOp { kForward, kBackward, kSendForward, kSendBackward };

struct PipelineEvent {
  int device = 0;
  int chunk = 0;
  int micro_batch = 0;
  PipeOp op = PipeOp::kForward;
  double start_s = 0;
  double end_s = 0;
};

struct PipelineResult {
  double makespan_s = 0;
  double bubble_ratio = 0;                    // idle share of devices x makespan
  std::vector<double> device_end_s;           // when each device finished its last op
  std::vector<double> busy_s;                 // compute per device
  std::vector<double> p2p_s;                  // blocked in sends, per device
  std::vector<double> peak_activation_bytes;  // in-flight activations, per device
  std::vector<PipelineEvent> events;          // only when recorded
};

PipelineResult simulate_pipeline(const PipelineInput& in, bool record_events);
PipelineResult estimate_pipeline(const PipelineInput& in);

}  // namespace cann::plan
