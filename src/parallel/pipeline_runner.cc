// One stage's step under GPipe, 1F1B or interleaved 1F1B.
#include "parallel/pipeline_runner.h"

#include <algorithm>
#include <cstring>

namespace cann::parallel {
namespace {

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
      act_group_(world),
      grad_group_(world),
      act_prev_(prev),
      act_next_(next),
      grad_prev_(prev),
      grad_next_(next),
      schedule_(schedule),
      stage_(stage),
      stages_(stages),
      act_sends_(model.num_slots()) {}

PipelineRunner::PipelineRunner(model::Model& model, comm::Group& world, comm::Group& pipe,
                               const std::vector<int>& stage_ranks, int stage)
    : model_(model),
      act_group_(world),
      grad_group_(pipe),
      schedule_(PipelineSchedule::kInterleaved),
      stage_(stage),
      stages_(static_cast<int>(stage_ranks.size())),
      act_sends_(model.num_slots()) {
  // Around the ring: the first stage's chunk c+1 follows the last stage's chunk c.
  const int S = stages_;
  act_prev_ = stage_ranks[(stage + S - 1) % S];
  act_next_ = stage_ranks[(stage + 1) % S];
  grad_prev_ = (stage + S - 1) % S;
  grad_next_ = (stage + 1) % S;
}

uint32_t PipelineRunner::act_tag(int boundary, int micro) const {
  return static_cast<uint32_t>(2 * (boundary * micro_batches_ + micro));
}
uint32_t PipelineRunner::grad_tag(int boundary, int micro) const {
  return act_tag(boundary, micro) + 1;
}

Status PipelineRunner::wait_all() {
  Status first = OkStatus();
  auto keep = [&](Status s) {
    if (first.ok()) first = s;
  };
  for (auto& w : act_sends_) keep(wait(w));
  for (GradSend& g : grad_sends_) keep(wait(g.work));
  keep(wait(prefetch_));
  have_prefetch_ = false;
  return first;
}

Status PipelineRunner::receive_input(const PipelineOp& op, size_t io) {
  // The slot's previous output must be on its way before the slot is overwritten.
  CANN_RETURN_IF_ERROR(wait(act_sends_[op.slot]));
  model_.use_slot(op.slot, op.chunk);
  if (model_.has_embedding()) return OkStatus();
  if (have_prefetch_ && prefetched_ == op) {
    have_prefetch_ = false;
    return wait(prefetch_);
  }
  return act_group_
      .recv(model_.stage_input(), io, comm::DataType::kFloat32, act_prev_,
            act_tag(virtual_stage(op.chunk) - 1, op.micro))
      ->wait();
}

// Receives are served in the order they are posted, so this is posted only after the current
// op's own input has arrived: ahead of it, it would wait for a message the previous stage
// sends only after the one the current op needs.
Status PipelineRunner::prefetch(const std::vector<PipelineOp>& ops, size_t k, size_t io) {
  if (have_prefetch_ || k + 1 >= ops.size() || !ops[k + 1].forward ||
      ops[k + 1].slot == ops[k].slot)
    return OkStatus();
  const PipelineOp& next = ops[k + 1];
  CANN_RETURN_IF_ERROR(wait(act_sends_[next.slot]));
  model_.use_slot(next.slot, next.chunk);
  if (model_.has_embedding()) return OkStatus();
  prefetch_ = act_group_.recv(model_.stage_input(), io, comm::DataType::kFloat32, act_prev_,
                              act_tag(virtual_stage(next.chunk) - 1, next.micro));
  prefetched_ = next;
  have_prefetch_ = true;
  return OkStatus();
}

Status PipelineRunner::forward(const PipelineOp& op, int B, int T, const int* inputs,
                               const int* targets, model::ForwardStats* sum) {
  const size_t io = model_.stage_io_floats(B, T);
  const int vs = virtual_stage(op.chunk);
  model_.use_slot(op.slot, op.chunk);
  const model::ForwardStats st = model_.forward(inputs, targets, B, T);
  CANN_RETURN_IF_ERROR(model_.tp_status());
  if (model_.has_head()) {
    sum->loss += st.loss;
    sum->lm_loss += st.lm_loss;
    sum->aux_loss += st.aux_loss;
    sum->scored += st.scored;
  } else {
    // The auxiliary loss of this chunk's MoE layers: the stages' losses add up to the step's.
    sum->loss += model_.spec().router_aux_loss_coef * st.aux_loss;
    sum->aux_loss += st.aux_loss;
    act_sends_[op.slot] = act_group_.send(model_.stage_output(), io, comm::DataType::kFloat32,
                                          act_next_, act_tag(vs, op.micro));
  }
  return OkStatus();
}

// The input gradient leaves from a buffer of its own: d_resid_ is the next backward's, and
// waiting here for the previous stage to take it would tie this stage's progress to that
// stage's op order.
Status PipelineRunner::send_input_grad(const PipelineOp& op, size_t io) {
  GradSend* free = nullptr;
  for (GradSend& g : grad_sends_)
    if (!g.work || g.work->is_completed()) {
      free = &g;
      break;
    }
  if (free == nullptr) free = &grad_sends_.emplace_back();
  CANN_RETURN_IF_ERROR(wait(free->work));
  free->data.resize(io);
  std::memcpy(free->data.data(), model_.stage_input_grad(), io * sizeof(float));
  free->work = grad_group_.send(free->data.data(), io, comm::DataType::kFloat32, grad_prev_,
                                grad_tag(virtual_stage(op.chunk) - 1, op.micro));
  return OkStatus();
}

Status PipelineRunner::backward(const PipelineOp& op, int B, int T, float grad_scale,
                                const std::function<void(int)>& layer_done) {
  const size_t io = model_.stage_io_floats(B, T);
  model_.use_slot(op.slot, op.chunk);
  if (!model_.has_head())
    CANN_RETURN_IF_ERROR(grad_group_
                             .recv(model_.stage_output_grad(), io, comm::DataType::kFloat32,
                                   grad_next_, grad_tag(virtual_stage(op.chunk), op.micro))
                             ->wait());
  model_.backward(grad_scale, layer_done);
  CANN_RETURN_IF_ERROR(model_.tp_status());
  if (!model_.has_embedding()) CANN_RETURN_IF_ERROR(send_input_grad(op, io));
  return OkStatus();
}

StatusOr<model::ForwardStats> PipelineRunner::step(int M, int B, int T, float grad_scale,
                                                   const BatchFn& batch,
                                                   const GradReduction& reduction,
                                                   const ForwardDone& forward_done) {
  model::ForwardStats sum;
  micro_batches_ = M;
  const std::vector<PipelineOp> ops =
      pipeline_ops(schedule_, stage_, stages_, M, model_.num_chunks());
  const size_t io = model_.stage_io_floats(B, T);
  // Each micro-batch's tokens and targets, copied when first needed: with several chunks a
  // micro-batch's later forwards run after the next micro-batch was fetched.
  const size_t n = static_cast<size_t>(B) * T;
  batch_inputs_.resize(static_cast<size_t>(M) * n);
  batch_targets_.resize(static_cast<size_t>(M) * n);
  std::vector<char> fetched(M, 0), has_targets(M, 0);
  bool reducing = false;
  for (size_t k = 0; k < ops.size(); ++k) {
    const PipelineOp& op = ops[k];
    if (op.forward) {
      int* in = batch_inputs_.data() + op.micro * n;
      int* tg = batch_targets_.data() + op.micro * n;
      if (!fetched[op.micro]) {
        const int* inputs = nullptr;
        const int* targets = nullptr;
        batch(op.micro, &inputs, &targets);
        std::copy(inputs, inputs + n, in);
        if (targets != nullptr) std::copy(targets, targets + n, tg);
        fetched[op.micro] = 1;
        has_targets[op.micro] = targets != nullptr;
      }
      CANN_RETURN_IF_ERROR(receive_input(op, io));
      CANN_RETURN_IF_ERROR(prefetch(ops, k, io));
      CANN_RETURN_IF_ERROR(forward(op, B, T, in, has_targets[op.micro] ? tg : nullptr, &sum));
      if (forward_done) forward_done();
      continue;
    }
    // Receive the next forward's input ahead when it goes to another slot than this op's.
    CANN_RETURN_IF_ERROR(prefetch(ops, k, io));
    const bool last = op.micro == M - 1 && reduction.begin;
    if (last && !reducing) {
      reduction.begin();
      reducing = true;
    }
    CANN_RETURN_IF_ERROR(
        backward(op, B, T, grad_scale, last ? reduction.layer_done : std::function<void(int)>{}));
  }
  Status reduced = reducing ? reduction.finish() : OkStatus();
  Status sent = wait_all();
  CANN_RETURN_IF_ERROR(reduced);
  CANN_RETURN_IF_ERROR(sent);
  return sum;
}

StatusOr<model::ForwardStats> PipelineRunner::forward_only(const int* inputs, const int* targets,
                                                           int B, int T) {
  model::ForwardStats sum;
  micro_batches_ = 1;
  // One micro-batch through each chunk in turn, all in slot 0.
  const size_t io = model_.stage_io_floats(B, T);
  for (int c = 0; c < model_.num_chunks(); ++c) {
    const PipelineOp op{true, 0, c, 0};
    CANN_RETURN_IF_ERROR(receive_input(op, io));
    CANN_RETURN_IF_ERROR(forward(op, B, T, inputs, targets, &sum));
  }
  CANN_RETURN_IF_ERROR(wait_all());
  return sum;
}

}  // namespace cann::parallel
