// AdamW driver: global norm, clip coefficient, then the fused kernel per tensor (the per-tensor
// split switches weight decay on and off and skips state that is not trained).
#include "optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/adamw.h"
#include "kernels/cpu/grad_norm.h"

namespace cann::optim {

void adamw_update_range(const model::ParamTable& table, const AdamWConfig& config, float* params,
                        float* m, float* v, const float* grads, size_t begin, size_t len, float lr,
                        int step, float grad_scale) {
  kernels::AdamWHyper h{};
  h.lr = lr;
  h.beta1 = config.beta1;
  h.beta2 = config.beta2;
  h.eps = config.eps;
  h.step = step;
  h.grad_scale = grad_scale;
  const size_t end = begin + len;
  for (const model::TensorInfo& t : table.tensors()) {
    const size_t a = std::max(begin, t.offset), b = std::min(end, t.offset + t.numel);
    if (a >= b || !t.trained) continue;
    h.weight_decay = t.weight_decay ? config.weight_decay : 0.0f;
    kernels::adamw_update(params + (a - begin), m + (a - begin), v + (a - begin), grads + (a - begin), b - a,
                          h);
  }
}

AdamW::AdamW(const model::ParamTable& table, AdamWConfig config)
    : table_(table), config_(config), m_(table.total_floats()), v_(table.total_floats()) {}

double AdamW::step(float* params, const float* grads, float lr) {
  const double norm = std::sqrt(sum_of_squares_ ? sum_of_squares_(grads)
                                                : kernels::sum_of_squares(grads, table_.total_floats()));
  ++step_;
  adamw_update_range(table_, config_, params, m_.data(), v_.data(), grads, 0, table_.total_floats(),
                     lr, step_, kernels::clip_coefficient(norm, config_.grad_clip));
  return norm;
}

}  // namespace cann::optim
