// PipelineRunner: runs one stage's share of a training step under a pipeline schedule. The
// stage's Model holds one activation slot per micro-batch in flight; activations go to the
// next stage and their gradients come back through asynchronous send/recv on the world group
// (tags 2i for micro-batch i's activations, 2i+1 for its gradient), so a stage computes while
// its last output is still on the wire. A send's buffer is waited for only before it is
// written again; the input of the next forward is received ahead while the current op runs
// whenever the two use different slots.
//
// Thread: one (the training thread).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "comm/group.h"
#include "model/model.h"
#include "parallel/pipeline_schedule.h"

namespace cann::parallel {

class PipelineRunner {
 public:
  // prev / next: world ranks of the neighbouring stages (-1 at the ends). The model's stage
  // must have pipeline_slots(schedule, ...) activation slots.
  PipelineRunner(model::Model& model, comm::Group& world, int prev, int next,
                 PipelineSchedule schedule, int stage, int stages);

  // Micro-batch i's tokens and targets (B x T each); called on every stage.
  using BatchFn = std::function<void(int micro, const int** inputs, const int** targets)>;
  // Runs micro-batch M-1's backward instead of model.backward(grad_scale) (the data-parallel
  // reducer's overlapped form); empty: plain backward.
  using LastBackwardFn = std::function<Status(float grad_scale)>;

  // One step of M micro-batches of B x T: gradients accumulate (scaled by grad_scale) in the
  // model. Returns the sum over micro-batches of this stage's share of the stats: the last
  // stage's language-model loss, and every stage's MoE auxiliary loss (in loss too, scaled by
  // router_aux_loss_coef), so the stats summed over the stages are the step's.
  StatusOr<model::ForwardStats> step(int micro_batches, int B, int T, float grad_scale,
                                     const BatchFn& batch, const LastBackwardFn& last_backward);
  // Forward only, one micro-batch (evaluation); stats shared out as in step().
  StatusOr<model::ForwardStats> forward_only(const int* inputs, const int* targets, int B, int T);

 private:
  Status forward(int micro, int B, int T, const int* inputs, const int* targets,
                 model::ForwardStats* sum);
  Status wait_all();

  model::Model& model_;
  comm::Group& world_;
  int prev_, next_;
  PipelineSchedule schedule_;
  int stage_, stages_;
  std::vector<std::shared_ptr<comm::Work>> act_sends_;  // per slot
  std::shared_ptr<comm::Work> grad_send_;
  std::shared_ptr<comm::Work> prefetch_;  // receive of the next forward's input
  int prefetch_micro_ = -1;
};

}  // namespace cann::parallel
