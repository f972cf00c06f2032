// GPipe and 1F1B op lists (see the header).
#include "parallel/pipeline_schedule.h"

#include <algorithm>

namespace cann::parallel {

StatusOr<PipelineSchedule> parse_pipeline_schedule(const std::string& name) {
  if (name == "gpipe") return PipelineSchedule::kGPipe;
  if (name == "1f1b") return PipelineSchedule::k1F1B;
  return InvalidArgument("--pipeline-schedule '" + name + "': expected gpipe or 1f1b");
}

const char* pipeline_schedule_name(PipelineSchedule s) {
  return s == PipelineSchedule::kGPipe ? "gpipe" : "1f1b";
}

std::vector<PipelineOp> pipeline_ops(PipelineSchedule s, int stage, int stages, int M) {
  std::vector<PipelineOp> ops;
  if (s == PipelineSchedule::kGPipe) {
    for (int i = 0; i < M; ++i) ops.push_back({true, i});
    for (int i = 0; i < M; ++i) ops.push_back({false, i});
    return ops;
  }
  const int warmup = std::min(stages - 1 - stage, M);
  int f = 0, b = 0;
  for (; f < warmup; ++f) ops.push_back({true, f});
  while (f < M) {
    ops.push_back({true, f++});
    ops.push_back({false, b++});
  }
  while (b < M) ops.push_back({false, b++});
  return ops;
}

int pipeline_slots(PipelineSchedule s, int stage, int stages, int M) {
  if (s == PipelineSchedule::kGPipe) return std::max(M, 1);
  return std::max(1, std::min(stages - stage, M));
}

}  // namespace cann::parallel
