// SiLU and SwiGLU, vectorized through fast_exp. With s = sigmoid(g):
//   silu(g) = g s,   silu'(g) = s (1 + g (1 - s)).
// For g below -87 fast_exp(-g) saturates, so s is 1e-38 instead of the true smaller value;
// silu(g) is then below 1e-36 in magnitude either way.
#include "kernels/cpu/swiglu.h"

#include "kernels/cpu/vec_math.h"

namespace cann::kernels {
namespace {
constexpr long kParallelMin = 1 << 15;

inline float sigmoid(float g) {
  return 1.0f / (1.0f + fast_exp(-g));
}
}  // namespace

void silu_forward(float* y, const float* x, size_t n) {
  const long len = static_cast<long>(n);
#pragma omp parallel for simd schedule(static) if (len > kParallelMin)
  for (long i = 0; i < len; ++i) y[i] = x[i] * sigmoid(x[i]);
}

void silu_backward(float* dx, const float* x, const float* dy, size_t n) {
  const long len = static_cast<long>(n);
#pragma omp parallel for simd schedule(static) if (len > kParallelMin)
  for (long i = 0; i < len; ++i) {
    const float s = sigmoid(x[i]);
    dx[i] = dy[i] * s * (1.0f + x[i] * (1.0f - s));
  }
}

void swiglu_forward(float* y, const float* gate_up, int N, int F) {
  const bool parallel = static_cast<long>(N) * F > kParallelMin;
#pragma omp parallel for schedule(static) if (parallel)
  for (int n = 0; n < N; ++n) {
    const float* g = gate_up + static_cast<size_t>(n) * 2 * F;
    const float* u = g + F;
    float* yr = y + static_cast<size_t>(n) * F;
#pragma omp simd
    for (int f = 0; f < F; ++f) yr[f] = g[f] * sigmoid(g[f]) * u[f];
  }
}

void swiglu_backward(float* dgate_up, const float* dy, const float* gate_up, int N, int F) {
  const bool parallel = static_cast<long>(N) * F > kParallelMin;
#pragma omp parallel for schedule(static) if (parallel)
  for (int n = 0; n < N; ++n) {
    const float* g = gate_up + static_cast<size_t>(n) * 2 * F;
    const float* u = g + F;
    const float* d = dy + static_cast<size_t>(n) * F;
    float* dg = dgate_up + static_cast<size_t>(n) * 2 * F;
    float* du = dg + F;
#pragma omp simd
    for (int f = 0; f < F; ++f) {
      const float s = sigmoid(g[f]);
      du[f] = d[f] * g[f] * s;
      dg[f] = d[f] * u[f] * s * (1.0f + g[f] * (1.0f - s));
    }
  }
}

}  // namespace cann::kernels
