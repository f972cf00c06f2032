// RMSNorm. Rows are independent in the forward pass. The backward's dw is a sum over rows:
// each thread sums its fixed row range (row_ranges.h) into its own slice of scratch and the
// slices are added in thread order, so the result does not depend on scheduling.
//
// Backward, with n = x * r the normalized row and r = rstd:
//   dn = dy * w;   dx = r * (dn - n * mean(dn * n));   dw += dy * n.
// The middle term is the gradient through r: dr/dx_c = -r^3 x_c / C = -r^2 n_c / C.
#include "kernels/cpu/rmsnorm.h"

#include <omp.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/row_ranges.h"

namespace cann::kernels {

void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int N, int C,
                     float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* xr = x + static_cast<size_t>(n) * C;
    float* yr = y + static_cast<size_t>(n) * C;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; ++c) ss += xr[c] * xr[c];
    const float r = 1.0f / std::sqrt(ss / C + eps);
#pragma omp simd
    for (int c = 0; c < C; ++c) yr[c] = xr[c] * r * w[c];
    rstd[n] = r;
  }
}

void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                      const float* rstd, int N, int C) {
  std::vector<float> partial(static_cast<size_t>(omp_get_max_threads()) * C, 0.0f);
  const int team = parallel_row_ranges(N, [&](int tid, int n0, int n1) {
    float* pdw = partial.data() + static_cast<size_t>(tid) * C;
    for (int n = n0; n < n1; ++n) {
      const float* xr = x + static_cast<size_t>(n) * C;
      const float* dyr = dy + static_cast<size_t>(n) * C;
      float* dxr = dx + static_cast<size_t>(n) * C;
      const float r = rstd[n];
      float dn_n = 0.0f;
#pragma omp simd reduction(+ : dn_n)
      for (int c = 0; c < C; ++c) dn_n += dyr[c] * w[c] * xr[c] * r;
      dn_n /= C;
#pragma omp simd
      for (int c = 0; c < C; ++c) {
        const float norm = xr[c] * r;
        pdw[c] += dyr[c] * norm;
        dxr[c] = (dyr[c] * w[c] - norm * dn_n) * r;
      }
    }
  });
  for (int t = 0; t < team; ++t) {
    const float* pdw = partial.data() + static_cast<size_t>(t) * C;
    for (int c = 0; c < C; ++c) dw[c] += pdw[c];
  }
}

}  // namespace cann::kernels
