// Residual add forward and backward over flat ranges.
#include "kernels/cpu/residual.h"

namespace cann::kernels {
namespace {
constexpr long kParallelMin = 1 << 16;
}

void residual_forward(float* out, const float* a, const float* b, size_t n) {
  const long len = static_cast<long>(n);
#pragma omp parallel for simd schedule(static) if (len > kParallelMin)
  for (long i = 0; i < len; ++i) out[i] = a[i] + b[i];
}

void residual_backward(float* dresid, const float* dbranch, size_t n) {
  const long len = static_cast<long>(n);
#pragma omp parallel for simd schedule(static) if (len > kParallelMin)
  for (long i = 0; i < len; ++i) dresid[i] += dbranch[i];
}

}  // namespace cann::kernels
