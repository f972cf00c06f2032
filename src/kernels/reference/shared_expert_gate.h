// Naive reference for kernels/cpu/shared_expert_gate: out = routed + sigmoid(x . g) * y, row by
// row, using the library exp.
#pragma once

#include <cmath>

namespace cann::ref {

// x, y, routed, out are (N,C); g is (C).
template <typename F>
void shared_expert_gate_forward(F* out, const F* routed, const F* y, const F* x, const F* g, int N,
                                int C) {
  for (int n = 0; n < N; ++n) {
    F z = 0;
    for (int c = 0; c < C; ++c) z += x[n * C + c] * g[c];
    const F s = F(1) / (F(1) + std::exp(-z));
    for (int c = 0; c < C; ++c) out[n * C + c] = routed[n * C + c] + s * y[n * C + c];
  }
}

}  // namespace cann::ref
