// One stage's step under GPipe or 1F1B.
#include "parallel/pipeline_runner.h"

namespace cann::parallel {
namespace {

uint32_t act_tag(int micro) {
  return static_cast<uint32_t>(2 * micro);
}
uint32_t grad_tag(int micro) {
  return static_cast<uint32_t>(2 * micro + 1);
}

Status wait(std::shared_ptr<comm::Work>& w) {
  if (!w) return OkStatus();
  Status s = w->wait();
  w.reset();
  return s;
}

}  // namespace

PipelineRunner::PipelineRunner(model::Model& model, comm::Group& world, int prev, int next,
                               PipelineSchedule schedule, int stage, int stages)
    : model_(model),
      world_(world),
      prev_(prev),
      next_(next),
      schedule_(schedule),
      stage_(stage),
      stages_(stages),
      act_sends_(model.num_slots()) {}

Status PipelineRunner::wait_all() {
  Status first = OkStatus();
  for (auto& w : act_sends_) {
    Status s = wait(w);
    if (first.ok()) first = s;
  }
  Status s = wait(grad_send_);
  if (first.ok()) first = s;
  s = wait(prefetch_);
  if (first.ok()) first = s;
  return first;
}

Status PipelineRunner::forward(int micro, int B, int T, const int* inputs, const int* targets,
                               model::ForwardStats* sum) {
  const int slot = micro % model_.num_slots();
  const size_t io = model_.stage_io_floats(B, T);
  // The slot's previous output must be on its way before the slot is overwritten.
  CANN_RETURN_IF_ERROR(wait(act_sends_[slot]));
  model_.use_slot(slot);
  if (!model_.has_embedding()) {
    if (prefetch_micro_ == micro) {
      CANN_RETURN_IF_ERROR(wait(prefetch_));
      prefetch_micro_ = -1;
    } else {
      CANN_RETURN_IF_ERROR(
          world_.recv(model_.stage_input(), io, comm::DataType::kFloat32, prev_, act_tag(micro))
              ->wait());
    }
  }
  const model::ForwardStats st = model_.forward(inputs, targets, B, T);
  CANN_RETURN_IF_ERROR(model_.tp_status());
  if (model_.has_head()) {
    sum->loss += st.loss;
    sum->lm_loss += st.lm_loss;
    sum->aux_loss += st.aux_loss;
    sum->scored += st.scored;
  } else {
    // The auxiliary loss of this stage's MoE layers: the stages' losses add up to the step's.
    sum->loss += model_.spec().router_aux_loss_coef * st.aux_loss;
    sum->aux_loss += st.aux_loss;
    act_sends_[slot] =
        world_.send(model_.stage_output(), io, comm::DataType::kFloat32, next_, act_tag(micro));
  }
  return OkStatus();
}

StatusOr<model::ForwardStats> PipelineRunner::step(int M, int B, int T, float grad_scale,
                                                   const BatchFn& batch,
                                                   const LastBackwardFn& last_backward) {
  model::ForwardStats sum;
  const std::vector<PipelineOp> ops = pipeline_ops(schedule_, stage_, stages_, M);
  const size_t io = model_.stage_io_floats(B, T);
  const int slots = model_.num_slots();
  for (size_t k = 0; k < ops.size(); ++k) {
    const PipelineOp& op = ops[k];
    // Receive the next forward's input ahead when it goes to another slot than this op's.
    if (!model_.has_embedding() && !prefetch_ && k + 1 < ops.size() && ops[k + 1].forward &&
        ops[k + 1].micro % slots != op.micro % slots) {
      const int next_micro = ops[k + 1].micro;
      CANN_RETURN_IF_ERROR(wait(act_sends_[next_micro % slots]));
      model_.use_slot(next_micro % slots);
      prefetch_ = world_.recv(model_.stage_input(), io, comm::DataType::kFloat32, prev_,
                              act_tag(next_micro));
      prefetch_micro_ = next_micro;
    }
    const int* inputs = nullptr;
    const int* targets = nullptr;
    if (op.forward) {
      batch(op.micro, &inputs, &targets);
      CANN_RETURN_IF_ERROR(forward(op.micro, B, T, inputs, targets, &sum));
      continue;
    }
    model_.use_slot(op.micro % slots);
    // d_resid_ is shared by the backwards: the last gradient sent from it must be gone.
    CANN_RETURN_IF_ERROR(wait(grad_send_));
    if (!model_.has_head())
      CANN_RETURN_IF_ERROR(world_
                               .recv(model_.stage_output_grad(), io, comm::DataType::kFloat32,
                                     next_, grad_tag(op.micro))
                               ->wait());
    if (op.micro == M - 1 && last_backward) {
      CANN_RETURN_IF_ERROR(last_backward(grad_scale));
    } else {
      model_.backward(grad_scale);
    }
    CANN_RETURN_IF_ERROR(model_.tp_status());
    if (!model_.has_embedding())
      grad_send_ = world_.send(model_.stage_input_grad(), io, comm::DataType::kFloat32, prev_,
                               grad_tag(op.micro));
  }
  CANN_RETURN_IF_ERROR(wait_all());
  return sum;
}

StatusOr<model::ForwardStats> PipelineRunner::forward_only(const int* inputs, const int* targets,
                                                           int B, int T) {
  model::ForwardStats sum;
  CANN_RETURN_IF_ERROR(forward(0, B, T, inputs, targets, &sum));
  CANN_RETURN_IF_ERROR(wait_all());
  return sum;
}

}  // namespace cann::parallel
