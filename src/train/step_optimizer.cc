// The single-process optimizer (see step_optimizer.h).
#include "train/step_optimizer.h"

#include <algorithm>

namespace cann::train {

LocalOptimizer::LocalOptimizer(model::Model& model, const optim::AdamWConfig& adam)
    : model_(model), adam_(model.table(), adam) {}

Status LocalOptimizer::backward(float grad_scale, bool, parallel::StepComm*) {
  model_.backward(grad_scale);
  return OkStatus();
}

StatusOr<double> LocalOptimizer::step(float lr) {
  return optim::step_model(adam_, model_, &into_, lr);
}

void LocalOptimizer::place_state(const optim::UpdateTarget& to) {
  optim::place_model_state(adam_, model_, &into_, to);
}

Status LocalOptimizer::with_grad_range(size_t begin, size_t,
                                       const std::function<Status(float*)>& fn) {
  return fn(model_.grads() + begin);
}

Status LocalOptimizer::gather_grads(float* out) {
  std::copy(model_.grads(), model_.grads() + model_.num_floats(), out);
  return OkStatus();
}

StatusOr<OptimizerSnapshot> LocalOptimizer::snapshot() {
  OptimizerSnapshot s;
  s.m = adam_.m();
  s.v = adam_.v();
  s.step = adam_.step_count();
  return s;
}

Status LocalOptimizer::restore(const ckpt::LoadedCheckpoint& ck, ResumeState* state) {
  int opt_step = 0;
  CANN_RETURN_IF_ERROR(
      restore_training_checkpoint(ck, model_, adam_.m(), adam_.v(), &opt_step, state));
  adam_.set_step_count(opt_step);
  return OkStatus();
}

size_t LocalOptimizer::parameter_bytes() const {
  return model_.num_floats() * sizeof(float);
}

}  // namespace cann::train
