// Pipeline schedules: the order in which one stage runs the forward and backward passes of a
// step's micro-batches.
//
//   GPipe (Huang et al. 2019): every forward, then every backward. Simple; a stage keeps all M
//     micro-batches' activations.
//   1F1B (Narayanan et al. 2019, PipeDream-Flush): stage s of S runs min(S-1-s, M) warm-up
//     forwards, then alternates one forward and one backward, then drains the remaining
//     backwards. The bubble is the same as GPipe's, (S-1)/(M+S-1) of the step, but a stage
//     keeps at most S-s micro-batches in flight.
//   Interleaved 1F1B (Narayanan et al. 2021, section 2.2; Megatron-LM's schedule): the layers
//     are cut into S*V chunks and stage s holds chunks s, s+S, ..., s+(V-1)S (its "model
//     chunks" 0..V-1). Forward number k of a stage runs its chunk (k mod SV) / S on micro-batch
//     (k / SV) * S + k mod S, so micro-batches pass each chunk in groups of S; backward number
//     k is the same with the chunks reversed. Warm-up is (S-1-s)*2 + (V-1)*S forwards. Each
//     op is 1/V of a stage's work, so the bubble shrinks to (S-1)/(V*M+S-1), at the price of
//     V times the point-to-point messages. M must be a multiple of S.
//
// Example, S = 2, M = 4: stage 0 runs F0 F1 B0 F2 B1 F3 B2 B3; stage 1 runs F0 B0 F1 B1 F2 B2
// F3 B3. Backwards run in micro-batch order in every schedule (per chunk), so the last
// backward of each chunk is micro-batch M-1's (where the data-parallel reduction overlaps).
// The interleaved example (S = 2, V = 2, M = 4) is written out in docs/model-parallel.md.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace cann::parallel {

enum class PipelineSchedule { kGPipe, k1F1B, kInterleaved };

// gpipe | 1f1b | interleaved
StatusOr<PipelineSchedule> parse_pipeline_schedule(const std::string& name);
const char* pipeline_schedule_name(PipelineSchedule s);

// One op of a stage: the forward or backward of micro-batch `micro` through the stage's model
// chunk `chunk` (0 without interleaving), keeping its activations in slot `slot` from the
// forward to the backward. Ops are equal when they do the same work, whatever their slot.
struct PipelineOp {
  bool forward = true;
  int micro = 0;
  int chunk = 0;
  int slot = 0;
  bool operator==(const PipelineOp& o) const {
    return forward == o.forward && micro == o.micro && chunk == o.chunk;
  }
};

// chunks: V, model chunks per stage (1 except for kInterleaved, which needs M % stages == 0).
std::vector<PipelineOp> pipeline_ops(PipelineSchedule s, int stage, int stages, int micro_batches,
                                     int chunks = 1);
// Activation sets (one chunk's worth each) the stage needs: the most (micro-batch, chunk)
// pairs it holds at once. GPipe and 1F1B put micro-batch i in slot i % slots; the interleaved
// schedule hands each forward the lowest free slot.
int pipeline_slots(PipelineSchedule s, int stage, int stages, int micro_batches, int chunks = 1);

}  // namespace cann::parallel
