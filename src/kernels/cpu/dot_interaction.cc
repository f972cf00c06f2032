// Pairwise dot interaction; see dot_interaction.h. Examples are independent: parallel over b,
// each example's N(N-1)/2 dots of length C as plain vectorized loops (N is the feature count,
// a few dozen, so a GEMM per example would cost more in calls than it saves).
#include "kernels/cpu/dot_interaction.h"

#include <cstdint>
#include <cstring>

namespace cann::kernels {

void dot_interaction_forward(float* z, const float* x, int B, int N, int C) {
  const int W = dot_interaction_width(N, C);
#pragma omp parallel for schedule(static)
  for (int b = 0; b < B; ++b) {
    const float* xb = x + static_cast<int64_t>(b) * N * C;
    float* zb = z + static_cast<int64_t>(b) * W;
    std::memcpy(zb, xb, sizeof(float) * C);
    int p = C;
    for (int i = 1; i < N; ++i)
      for (int j = 0; j < i; ++j) {
        const float* xi = xb + i * C;
        const float* xj = xb + j * C;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int c = 0; c < C; ++c) dot += xi[c] * xj[c];
        zb[p++] = dot;
      }
  }
}

void dot_interaction_backward(float* dx, const float* dz, const float* x, int B, int N, int C) {
  const int W = dot_interaction_width(N, C);
#pragma omp parallel for schedule(static)
  for (int b = 0; b < B; ++b) {
    const float* xb = x + static_cast<int64_t>(b) * N * C;
    const float* dzb = dz + static_cast<int64_t>(b) * W;
    float* dxb = dx + static_cast<int64_t>(b) * N * C;
    std::memcpy(dxb, dzb, sizeof(float) * C);
    std::memset(dxb + C, 0, sizeof(float) * (N - 1) * C);
    int p = C;
    for (int i = 1; i < N; ++i)
      for (int j = 0; j < i; ++j) {
        const float g = dzb[p++];
        const float* xi = xb + i * C;
        const float* xj = xb + j * C;
        float* dxi = dxb + i * C;
        float* dxj = dxb + j * C;
#pragma omp simd
        for (int c = 0; c < C; ++c) {
          dxi[c] += g * xj[c];
          dxj[c] += g * xi[c];
        }
      }
  }
}

}  // namespace cann::kernels
