// PipelineRunner: runs one stage's share of a training step under a pipeline schedule. The
// stage's Model holds one activation slot per (micro-batch, chunk) in flight; activations go
// to the next stage and their gradients come back through asynchronous send/recv, so a stage
// computes while its last output is still on the wire. A message between virtual stages b and
// b+1 (virtual stage of chunk c on stage s: c*S + s) for micro-batch i has tag 2(b*M + i) for
// the activation and 2(b*M + i) + 1 for its gradient: unique per (micro-batch, chunk,
// direction) within a step.
//
// An activation is sent from its slot, which is only written again after the slot's backward,
// so that send is long done by then. A gradient is copied into a send buffer of its own, so
// no backward waits for the previous stage to take the last one. The input of the next
// forward is received ahead while the current op runs whenever the two use different slots.
//
// Interleaved 1F1B sends both directions to the same neighbours around a ring (the last
// stage's chunk c feeds the first stage's chunk c+1). Its gradients travel over their own
// group (the pipeline group) so that each direction is one ordered stream per pair of ranks:
// on a backend whose sends wait for the matching receive (Gloo), activations queued behind a
// gradient the peer receives later could otherwise deadlock.
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
  // GPipe or 1F1B. prev / next: world ranks of the neighbouring stages (-1 at the ends). The
  // model's stage must have pipeline_slots(schedule, ...) activation slots.
  PipelineRunner(model::Model& model, comm::Group& world, int prev, int next,
                 PipelineSchedule schedule, int stage, int stages);
  // Interleaved 1F1B over the model's chunks: stage_ranks[i] is stage i's world rank; `pipe`
  // is the pipeline group (its rank i is stage i) and carries the gradients. The model must
  // have pipeline_slots(kInterleaved, stage, stages, M, chunks) slots for the M of step().
  PipelineRunner(model::Model& model, comm::Group& world, comm::Group& pipe,
                 const std::vector<int>& stage_ranks, int stage);

  // Micro-batch i's tokens and targets (B x T each); called on every stage, once per
  // micro-batch (before its first chunk's forward).
  using BatchFn = std::function<void(int micro, const int** inputs, const int** targets)>;
  // The data-parallel reduction overlapped with the step's last backwards: begin() before the
  // first backward of micro-batch M-1 (one per chunk, higher chunks first, so layers finish in
  // descending order), layer_done(l) from those backwards, finish() after the step's last op.
  // Empty: plain backwards.
  struct GradReduction {
    std::function<void()> begin;
    std::function<void(int layer)> layer_done;
    std::function<Status()> finish;
  };

  // Called after each forward of the step, with the model on that forward's slot and chunk:
  // what the forward left in the model (the MoE layers' expert counts) can be read there,
  // before a later forward reuses the slot.
  using ForwardDone = std::function<void()>;

  // One step of M micro-batches of B x T: gradients accumulate (scaled by grad_scale) in the
  // model. Returns the sum over micro-batches of this stage's share of the stats: the last
  // stage's language-model loss, and every stage's MoE auxiliary loss (in loss too, scaled by
  // router_aux_loss_coef), so the stats summed over the stages are the step's.
  StatusOr<model::ForwardStats> step(int micro_batches, int B, int T, float grad_scale,
                                     const BatchFn& batch, const GradReduction& reduction = {},
                                     const ForwardDone& forward_done = {});
  // Forward only, one micro-batch (evaluation); stats shared out as in step().
  StatusOr<model::ForwardStats> forward_only(const int* inputs, const int* targets, int B, int T);

  PipelineSchedule schedule() const { return schedule_; }

 private:
  // The virtual stage of this stage's chunk c: c * stages + stage.
  int virtual_stage(int chunk) const { return chunk * stages_ + stage_; }
  uint32_t act_tag(int boundary, int micro) const;
  uint32_t grad_tag(int boundary, int micro) const;
  // A forward's input: waits for the slot's last send, then receives (or takes the prefetch).
  Status receive_input(const PipelineOp& op, size_t io);
  // Posts the receive of ops[k+1]'s input while ops[k] runs, when that forward uses another slot.
  Status prefetch(const std::vector<PipelineOp>& ops, size_t k, size_t io);
  // The forward of op, whose input is in place; sends its output on.
  Status forward(const PipelineOp& op, int B, int T, const int* inputs, const int* targets,
                 model::ForwardStats* sum);
  Status backward(const PipelineOp& op, int B, int T, float grad_scale,
                  const std::function<void(int)>& layer_done);
  Status send_input_grad(const PipelineOp& op, size_t io);
  Status wait_all();

  struct GradSend {
    std::vector<float> data;
    std::shared_ptr<comm::Work> work;
  };

  model::Model& model_;
  comm::Group& act_group_;
  comm::Group& grad_group_;
  int act_prev_, act_next_;    // ranks in act_group_
  int grad_prev_, grad_next_;  // ranks in grad_group_
  PipelineSchedule schedule_;
  int stage_, stages_;
  int micro_batches_ = 1;                               // of the current step (tags)
  std::vector<std::shared_ptr<comm::Work>> act_sends_;  // per slot
  std::vector<GradSend> grad_sends_;
  std::vector<int> batch_inputs_, batch_targets_;  // M x (B*T): the step's micro-batches
  std::shared_ptr<comm::Work> prefetch_;           // receive of the next forward's input
  PipelineOp prefetched_{};
  bool have_prefetch_ = false;
};

}  // namespace cann::parallel
