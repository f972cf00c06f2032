// AdamW driver: global norm, clip coefficient, then the fused kernel per tensor (the per-tensor
// split exists only to switch weight decay on and off).
#include "optim/adamw.h"

#include <cmath>

#include "kernels/cpu/adamw.h"
#include "kernels/cpu/grad_norm.h"

namespace cann::optim {

AdamW::AdamW(const model::ParamTable& table, AdamWConfig config)
    : table_(table), config_(config), m_(table.total_floats()), v_(table.total_floats()) {}

double AdamW::step(float* params, const float* grads, float lr) {
  const double norm = std::sqrt(kernels::sum_of_squares(grads, table_.total_floats()));
  ++step_;
  kernels::AdamWHyper h{};
  h.lr = lr;
  h.beta1 = config_.beta1;
  h.beta2 = config_.beta2;
  h.eps = config_.eps;
  h.step = step_;
  h.grad_scale = kernels::clip_coefficient(norm, config_.grad_clip);
  for (const model::TensorInfo& t : table_.tensors()) {
    h.weight_decay = t.weight_decay ? config_.weight_decay : 0.0f;
    kernels::adamw_update(params + t.offset, m_.data() + t.offset, v_.data() + t.offset,
                          grads + t.offset, t.numel, h);
  }
  return norm;
}

}  // namespace cann::optim
