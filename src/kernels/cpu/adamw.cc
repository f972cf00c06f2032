// Fused AdamW. One read of p, g, m, v and one write of p, m, v per element: the update is
// memory-bound, so fusing the four passes of an unfused implementation is the whole speedup.
#include "kernels/cpu/adamw.h"

#include <cmath>

namespace cann::kernels {

void adamw_update(float* params, float* m, float* v, const float* grads, size_t n,
                  const AdamWHyper& h) {
  const float bc1 = 1.0f - std::pow(h.beta1, static_cast<float>(h.step));
  const float bc2 = 1.0f - std::pow(h.beta2, static_cast<float>(h.step));
  const float step_size = h.lr / bc1;
  const float inv_sqrt_bc2 = 1.0f / std::sqrt(bc2);
  const float decay = 1.0f - h.lr * h.weight_decay;
  const long len = static_cast<long>(n);
#pragma omp parallel for simd schedule(static) if (len > (1 << 15))
  for (long i = 0; i < len; ++i) {
    const float g = grads[i] * h.grad_scale;
    const float mi = h.beta1 * m[i] + (1.0f - h.beta1) * g;
    const float vi = h.beta2 * v[i] + (1.0f - h.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    // p <- p - lr*wd*p - lr * mhat / (sqrt(vhat) + eps), with mhat = m/bc1, vhat = v/bc2
    params[i] = params[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + h.eps);
  }
}

void adam_apply(float* params, const float* m, const float* v, size_t n, float step_size, float eps,
                float decay) {
  const long len = static_cast<long>(n);
#pragma omp parallel for simd schedule(static) if (len > (1 << 15))
  for (long i = 0; i < len; ++i)
    params[i] = params[i] * decay - step_size * m[i] / (std::sqrt(v[i]) + eps);
}

}  // namespace cann::kernels
