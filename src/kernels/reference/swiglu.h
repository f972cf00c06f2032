// Naive reference for kernels/cpu/swiglu, using the library exp.
#pragma once

#include <cmath>
#include <cstddef>

namespace cann::ref {

template <typename F>
F silu(F g) {
  return g / (F(1) + std::exp(-g));
}

template <typename F>
F silu_grad(F g) {
  const F s = F(1) / (F(1) + std::exp(-g));
  return s * (F(1) + g * (F(1) - s));
}

template <typename F>
void silu_forward(F* y, const F* x, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = silu(x[i]);
}

template <typename F>
void silu_backward(F* dx, const F* x, const F* dy, size_t n) {
  for (size_t i = 0; i < n; ++i) dx[i] = dy[i] * silu_grad(x[i]);
}

// gate_up (N,2F) rows [gate | up]; y (N,F).
template <typename F>
void swiglu_forward(F* y, const F* gate_up, int N, int Fd) {
  for (int n = 0; n < N; ++n)
    for (int f = 0; f < Fd; ++f)
      y[n * Fd + f] = silu(gate_up[n * 2 * Fd + f]) * gate_up[n * 2 * Fd + Fd + f];
}

template <typename F>
void swiglu_backward(F* dgate_up, const F* dy, const F* gate_up, int N, int Fd) {
  for (int n = 0; n < N; ++n)
    for (int f = 0; f < Fd; ++f) {
      const F g = gate_up[n * 2 * Fd + f], u = gate_up[n * 2 * Fd + Fd + f];
      dgate_up[n * 2 * Fd + f] = dy[n * Fd + f] * u * silu_grad(g);
      dgate_up[n * 2 * Fd + Fd + f] = dy[n * Fd + f] * silu(g);
    }
}

}  // namespace cann::ref
