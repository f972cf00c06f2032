// Naive reference for kernels/cpu/adamw, written the way the paper states the update.
#pragma once

#include <cmath>
#include <cstddef>

namespace cann::ref {

template <typename F>
void adamw_update(F* p, F* m, F* v, const F* g_in, size_t n, F lr, F beta1, F beta2, F eps, F wd,
                  int step, F grad_scale) {
  for (size_t i = 0; i < n; ++i) {
    const F g = g_in[i] * grad_scale;
    m[i] = beta1 * m[i] + (1 - beta1) * g;
    v[i] = beta2 * v[i] + (1 - beta2) * g * g;
    const F mhat = m[i] / (1 - std::pow(beta1, step));
    const F vhat = v[i] / (1 - std::pow(beta2, step));
    p[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * p[i]);
  }
}

}  // namespace cann::ref
