// GPipe, 1F1B and interleaved 1F1B op lists (see the header).
#include "parallel/pipeline_schedule.h"

#include <algorithm>

#include "core/check.h"

namespace cann::parallel {
namespace {

// Megatron-LM's interleaved order (schedules.py, forward_backward_pipelining_with_interleaving),
// as plan/pipeline.cc simulates it; slots still unassigned.
std::vector<PipelineOp> interleaved_order(int stage, int S, int M, int V) {
  const int total = M * V;
  auto fwd = [&](int k) {
    const int group = k / (S * V), in_group = k % (S * V);
    return PipelineOp{true, group * S + in_group % S, in_group / S, 0};
  };
  auto bwd = [&](int k) {
    PipelineOp o = fwd(k);
    o.forward = false;
    o.chunk = V - 1 - o.chunk;
    return o;
  };
  const int warmup = std::min((S - 1 - stage) * 2 + (V - 1) * S, total);
  std::vector<PipelineOp> ops;
  ops.reserve(2 * total);
  for (int k = 0; k < warmup; ++k) ops.push_back(fwd(k));
  for (int k = 0; k < total - warmup; ++k) {
    ops.push_back(fwd(warmup + k));
    ops.push_back(bwd(k));
  }
  for (int k = total - warmup; k < total; ++k) ops.push_back(bwd(k));
  return ops;
}

// Gives each forward the lowest slot free at that point and its backward the same one;
// returns the number of slots used.
int assign_slots(std::vector<PipelineOp>& ops, int V, int M) {
  std::vector<int> slot_of(static_cast<size_t>(V) * M, -1);
  std::vector<bool> busy;
  for (PipelineOp& op : ops) {
    int& s = slot_of[static_cast<size_t>(op.chunk) * M + op.micro];
    if (op.forward) {
      s = static_cast<int>(std::find(busy.begin(), busy.end(), false) - busy.begin());
      if (s == static_cast<int>(busy.size())) busy.push_back(false);
      busy[s] = true;
    } else {
      CANN_CHECK(s >= 0) << "backward of micro-batch " << op.micro << " before its forward";
      busy[s] = false;
    }
    op.slot = s;
  }
  return std::max<int>(1, static_cast<int>(busy.size()));
}

}  // namespace

StatusOr<PipelineSchedule> parse_pipeline_schedule(const std::string& name) {
  if (name == "gpipe") return PipelineSchedule::kGPipe;
  if (name == "1f1b") return PipelineSchedule::k1F1B;
  if (name == "interleaved") return PipelineSchedule::kInterleaved;
  return InvalidArgument("--pipeline-schedule '" + name + "': expected gpipe, 1f1b or interleaved");
}

const char* pipeline_schedule_name(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::kGPipe:
      return "gpipe";
    case PipelineSchedule::k1F1B:
      return "1f1b";
    case PipelineSchedule::kInterleaved:
      return "interleaved";
  }
  return "?";
}

std::vector<PipelineOp> pipeline_ops(PipelineSchedule s, int stage, int stages, int M, int V) {
  std::vector<PipelineOp> ops;
  if (s == PipelineSchedule::kInterleaved) {
    CANN_CHECK(V >= 1 && M % stages == 0)
        << "interleaved schedule: " << M << " micro-batches over " << stages << " stages";
    ops = interleaved_order(stage, stages, M, V);
    assign_slots(ops, V, M);
    return ops;
  }
  CANN_CHECK(V == 1) << pipeline_schedule_name(s) << " runs one model chunk per stage";
  const int slots = pipeline_slots(s, stage, stages, M);
  auto op = [&](bool forward, int micro) { return PipelineOp{forward, micro, 0, micro % slots}; };
  if (s == PipelineSchedule::kGPipe) {
    for (int i = 0; i < M; ++i) ops.push_back(op(true, i));
    for (int i = 0; i < M; ++i) ops.push_back(op(false, i));
    return ops;
  }
  const int warmup = std::min(stages - 1 - stage, M);
  int f = 0, b = 0;
  for (; f < warmup; ++f) ops.push_back(op(true, f));
  while (f < M) {
    ops.push_back(op(true, f++));
    ops.push_back(op(false, b++));
  }
  while (b < M) ops.push_back(op(false, b++));
  return ops;
}

int pipeline_slots(PipelineSchedule s, int stage, int stages, int M, int V) {
  if (s == PipelineSchedule::kGPipe) return std::max(M, 1);
  if (s == PipelineSchedule::k1F1B) return std::max(1, std::min(stages - stage, M));
  std::vector<PipelineOp> ops = interleaved_order(stage, stages, M, V);
  return assign_slots(ops, V, M);
}

}  // namespace cann::parallel
