// Layer normalization. Rows are independent in the forward pass. In the backward pass the
// parameter gradients are sums over rows: each thread sums a fixed, contiguous row range into
// its own slice of scratch, and the slices are added in thread order, so results do not depend
// on scheduling.
#include "kernels/cpu/layernorm.h"

#include <omp.h>

#include <cmath>
#include <vector>

namespace cann::kernels {

void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* w,
                       const float* b, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* xr = x + static_cast<size_t>(n) * C;
    float* yr = y + static_cast<size_t>(n) * C;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; ++c) sum += xr[c];
    const float m = sum / C;
    float var = 0.0f;
#pragma omp simd reduction(+ : var)
    for (int c = 0; c < C; ++c) var += (xr[c] - m) * (xr[c] - m);
    const float s = 1.0f / std::sqrt(var / C + kLayerNormEps);
#pragma omp simd
    for (int c = 0; c < C; ++c) yr[c] = (xr[c] - m) * s * w[c] + b[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

void layernorm_backward(float* dx, float* dw, float* db, const float* dy, const float* x,
                        const float* w, const float* mean, const float* rstd, int N, int C) {
  const int threads = omp_get_max_threads();
  // Per thread: C floats of dw partials, then C of db partials.
  std::vector<float> partial(static_cast<size_t>(threads) * 2 * C, 0.0f);
  int used_threads = 1;
#pragma omp parallel
  {
    const int tid = omp_get_thread_num();
    const int nth = omp_get_num_threads();
#pragma omp single
    used_threads = nth;
    float* pdw = partial.data() + static_cast<size_t>(tid) * 2 * C;
    float* pdb = pdw + C;
    const int n0 = static_cast<int>(static_cast<long>(N) * tid / nth);
    const int n1 = static_cast<int>(static_cast<long>(N) * (tid + 1) / nth);
    for (int n = n0; n < n1; ++n) {
      const float* xr = x + static_cast<size_t>(n) * C;
      const float* dyr = dy + static_cast<size_t>(n) * C;
      float* dxr = dx + static_cast<size_t>(n) * C;
      const float m = mean[n];
      const float s = rstd[n];
      // dnorm = dy * w; dx = s * (dnorm - mean(dnorm) - norm * mean(dnorm * norm))
      float dnorm_mean = 0.0f;
      float dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
      for (int c = 0; c < C; ++c) {
        const float norm = (xr[c] - m) * s;
        const float dnorm = dyr[c] * w[c];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
      }
      dnorm_mean /= C;
      dnorm_norm_mean /= C;
#pragma omp simd
      for (int c = 0; c < C; ++c) {
        const float norm = (xr[c] - m) * s;
        const float dnorm = dyr[c] * w[c];
        pdw[c] += dyr[c] * norm;
        pdb[c] += dyr[c];
        dxr[c] = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
      }
    }
  }
  for (int t = 0; t < used_threads; ++t) {
    const float* pdw = partial.data() + static_cast<size_t>(t) * 2 * C;
    const float* pdb = pdw + C;
    for (int c = 0; c < C; ++c) {
      dw[c] += pdw[c];
      db[c] += pdb[c];
    }
  }
}

}  // namespace cann::kernels
