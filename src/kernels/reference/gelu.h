// Naive reference for kernels/cpu/gelu (tanh form), using the library tanh.
#pragma once

#include <cmath>
#include <cstddef>

namespace cann::ref {

template <typename F>
void gelu_forward(F* y, const F* x, size_t n) {
  const F k = std::sqrt(F(2) / F(M_PI));
  for (size_t i = 0; i < n; ++i)
    y[i] = F(0.5) * x[i] * (F(1) + std::tanh(k * (x[i] + F(0.044715) * x[i] * x[i] * x[i])));
}

template <typename F>
void gelu_backward(F* dx, const F* x, const F* dy, size_t n) {
  const F k = std::sqrt(F(2) / F(M_PI));
  for (size_t i = 0; i < n; ++i) {
    const F v = x[i];
    const F t = std::tanh(k * (v + F(0.044715) * v * v * v));
    const F du = k * (F(1) + F(3) * F(0.044715) * v * v);
    dx[i] = dy[i] * (F(0.5) * (F(1) + t) + F(0.5) * v * (F(1) - t * t) * du);
  }
}

}  // namespace cann::ref
