// GELU over a flat range, vectorized through fast_tanh.
#include "kernels/cpu/gelu.h"

#include "kernels/cpu/vec_math.h"

namespace cann::kernels {
namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
constexpr long kParallelMin = 1 << 15;
}  // namespace

void gelu_forward(float* y, const float* x, size_t n) {
  const long len = static_cast<long>(n);
#pragma omp parallel for simd schedule(static) if (len > kParallelMin)
  for (long i = 0; i < len; ++i) {
    const float v = x[i];
    const float t = fast_tanh(kSqrt2OverPi * (v + kCubic * v * v * v));
    y[i] = 0.5f * v * (1.0f + t);
  }
}

void gelu_backward(float* dx, const float* x, const float* dy, size_t n) {
  const long len = static_cast<long>(n);
#pragma omp parallel for simd schedule(static) if (len > kParallelMin)
  for (long i = 0; i < len; ++i) {
    const float v = x[i];
    const float t = fast_tanh(kSqrt2OverPi * (v + kCubic * v * v * v));
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  }
}

}  // namespace cann::kernels
