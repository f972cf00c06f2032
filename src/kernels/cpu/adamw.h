// AdamW (Loshchilov & Hutter 2019): Adam with weight decay decoupled from the gradient, fused
// into one pass over parameters, gradients and both moments.
#pragma once

#include <cstddef>

namespace cann::kernels {

struct AdamWHyper {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;  // applied as p -= lr * wd * p, independent of the gradient
  int step;            // 1-based: the bias corrections use beta^step
  float grad_scale;    // multiplies every gradient first (gradient clipping, loss scaling)
};

// params, m, v, grads are (n); params, m and v are updated in place.
void adamw_update(float* params, float* m, float* v, const float* grads, size_t n,
                  const AdamWHyper& h);

// Adam's step on moments it does not change (1-bit Adam and top-k past their warmup: the
// momentum arrives averaged, the variance is frozen and bias-corrected already):
//   params = params * decay - step_size * m / (sqrt(v) + eps), with step_size = lr / bc1.
void adam_apply(float* params, const float* m, const float* v, size_t n, float step_size, float eps,
                float decay);

}  // namespace cann::kernels
