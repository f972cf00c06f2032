// Gradient norm with a deterministic reduction order, and clipping.
#include "kernels/cpu/grad_norm.h"

#include <omp.h>

#include <vector>

namespace cann::kernels {

double sum_of_squares(const float* x, size_t n) {
  std::vector<double> partial(omp_get_max_threads(), 0.0);
  int used = 1;
#pragma omp parallel if (n > (1u << 16))
  {
    const int tid = omp_get_thread_num();
    const int nth = omp_get_num_threads();
#pragma omp single
    used = nth;
    const size_t i0 = n * tid / nth;
    const size_t i1 = n * (tid + 1) / nth;
    double acc = 0.0;
    // Blocks of 1024 summed in float (vectorized), then added into the double accumulator.
    for (size_t b = i0; b < i1; b += 1024) {
      const size_t e = b + 1024 < i1 ? b + 1024 : i1;
      float block = 0.0f;
#pragma omp simd reduction(+ : block)
      for (size_t i = b; i < e; ++i) block += x[i] * x[i];
      acc += block;
    }
    partial[tid] = acc;
  }
  double sum = 0.0;
  for (int t = 0; t < used; ++t) sum += partial[t];
  return sum;
}

float clip_coefficient(double norm, float max_norm) {
  if (max_norm <= 0.0f || !(norm > max_norm)) return 1.0f;
  return static_cast<float>(max_norm / (norm + 1e-6));
}

void scale_inplace(float* x, size_t n, float factor) {
  const long len = static_cast<long>(n);
#pragma omp parallel for simd schedule(static) if (len > (1 << 16))
  for (long i = 0; i < len; ++i) x[i] *= factor;
}

}  // namespace cann::kernels
