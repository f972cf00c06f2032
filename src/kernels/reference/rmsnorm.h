// Naive reference for kernels/cpu/rmsnorm.
#pragma once

#include <cmath>

namespace cann::ref {

template <typename F>
void rmsnorm_forward(F* y, F* rstd, const F* x, const F* w, int N, int C, F eps) {
  for (int n = 0; n < N; ++n) {
    F ss = 0;
    for (int c = 0; c < C; ++c) ss += x[n * C + c] * x[n * C + c];
    const F r = F(1) / std::sqrt(ss / C + eps);
    for (int c = 0; c < C; ++c) y[n * C + c] = x[n * C + c] * r * w[c];
    rstd[n] = r;
  }
}

template <typename F>
void rmsnorm_backward(F* dx, F* dw, const F* dy, const F* x, const F* w, const F* rstd, int N,
                      int C) {
  for (int n = 0; n < N; ++n) {
    F a = 0;
    for (int c = 0; c < C; ++c) a += dy[n * C + c] * w[c] * x[n * C + c] * rstd[n];
    a /= C;
    for (int c = 0; c < C; ++c) {
      const F norm = x[n * C + c] * rstd[n];
      dw[c] += dy[n * C + c] * norm;
      dx[n * C + c] = (dy[n * C + c] * w[c] - norm * a) * rstd[n];
    }
  }
}

}  // namespace cann::ref
