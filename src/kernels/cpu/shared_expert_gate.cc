// Qwen2-MoE's shared-expert gate, forward and backward (see shared_expert_gate.h). The rows are
// independent and computed in parallel; the weight gradient sums the rows in order, so the
// result does not depend on the thread count.
#include "kernels/cpu/shared_expert_gate.h"

#include <cmath>
#include <cstddef>
#include <vector>

namespace cann::kernels {
namespace {

constexpr long kParallelMinRows = 64;

float dot(const float* a, const float* b, int C) {
  float s = 0.0f;
  for (int c = 0; c < C; ++c) s += a[c] * b[c];
  return s;
}

}  // namespace

void shared_expert_gate_forward(float* out, float* gate, const float* y, const float* x,
                                const float* g, int N, int C) {
#pragma omp parallel for schedule(static) if (N > kParallelMinRows)
  for (long n = 0; n < N; ++n) {
    const size_t row = static_cast<size_t>(n) * C;
    const float s = 1.0f / (1.0f + std::exp(-dot(x + row, g, C)));
    gate[n] = s;
    for (int c = 0; c < C; ++c) out[row + c] += s * y[row + c];
  }
}

void shared_expert_gate_backward(float* dy, float* dg, float* dx_add, const float* dout,
                                 const float* y, const float* x, const float* g, const float* gate,
                                 int N, int C) {
  std::vector<float> dz(static_cast<size_t>(N));
#pragma omp parallel for schedule(static) if (N > kParallelMinRows)
  for (long n = 0; n < N; ++n) {
    const size_t row = static_cast<size_t>(n) * C;
    const float s = gate[n];
    dz[n] = s * (1.0f - s) * dot(dout + row, y + row, C);
    for (int c = 0; c < C; ++c) {
      dy[row + c] = s * dout[row + c];
      dx_add[row + c] += dz[n] * g[c];
    }
  }
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) dg[c] += dz[n] * x[static_cast<size_t>(n) * C + c];
}

}  // namespace cann::kernels
