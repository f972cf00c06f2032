// Pipeline schedules: the order in which one stage runs the forward and backward passes of a
// step's micro-batches.
//
//   GPipe (Huang et al. 2019): every forward, then every backward. Simple; a stage keeps all M
//     micro-batches' activations.
//   1F1B (Narayanan et al. 2019, PipeDream-Flush): stage s of S runs min(S-1-s, M) warm-up
//     forwards, then alternates one forward and one backward, then drains the remaining
//     backwards. The bubble is the same as GPipe's, (S-1)/(M+S-1) of the step, but a stage
//     keeps at most S-s micro-batches in flight.
//
// Example, S = 2, M = 4: stage 0 runs F0 F1 B0 F2 B1 F3 B2 B3; stage 1 runs F0 B0 F1 B1 F2 B2
// F3 B3. Backwards run in micro-batch order in both schedules, so the last op of every stage
// is the backward of micro-batch M-1 (where the data-parallel reduction overlaps).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace cann::parallel {

enum class PipelineSchedule { kGPipe, k1F1B };

StatusOr<PipelineSchedule> parse_pipeline_schedule(const std::string& name);  // gpipe | 1f1b
const char* pipeline_schedule_name(PipelineSchedule s);

struct PipelineOp {
  bool forward = true;
  int micro = 0;
  bool operator==(const PipelineOp&) const = default;
};

std::vector<PipelineOp> pipeline_ops(PipelineSchedule s, int stage, int stages, int micro_batches);
// Activation sets the stage needs: micro-batch i uses slot i % slots.
int pipeline_slots(PipelineSchedule s, int stage, int stages, int micro_batches);

}  // namespace cann::parallel
