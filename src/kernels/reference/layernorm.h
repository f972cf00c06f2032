// Naive reference for kernels/cpu/layernorm.
#pragma once

#include <cmath>

namespace cann::ref {

template <typename F>
void layernorm_forward(F* y, F* mean, F* rstd, const F* x, const F* w, const F* b, int N, int C,
                       F eps = F(1e-5)) {
  for (int n = 0; n < N; ++n) {
    F m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x[n * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (x[n * C + c] - m) * (x[n * C + c] - m);
    v /= C;
    const F s = F(1) / std::sqrt(v + eps);
    for (int c = 0; c < C; ++c) y[n * C + c] = (x[n * C + c] - m) * s * w[c] + b[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

template <typename F>
void layernorm_backward(F* dx, F* dw, F* db, const F* dy, const F* x, const F* w, const F* mean,
                        const F* rstd, int N, int C) {
  for (int n = 0; n < N; ++n) {
    F a = 0, bsum = 0;
    for (int c = 0; c < C; ++c) {
      const F norm = (x[n * C + c] - mean[n]) * rstd[n];
      a += dy[n * C + c] * w[c];
      bsum += dy[n * C + c] * w[c] * norm;
    }
    a /= C;
    bsum /= C;
    for (int c = 0; c < C; ++c) {
      const F norm = (x[n * C + c] - mean[n]) * rstd[n];
      dw[c] += dy[n * C + c] * norm;
      db[c] += dy[n * C + c];
      dx[n * C + c] = (dy[n * C + c] * w[c] - a - norm * bsum) * rstd[n];
    }
  }
}

}  // namespace cann::ref
