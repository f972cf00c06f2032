// Linear layer over gemm() (oneDNN's sgemm, or its bf16 matmul under --precision bf16).
// The bias is broadcast into y first so one GEMM with
// beta = 1 finishes the job; the bias gradient is a column sum of dy, split over columns so
// each thread owns its outputs and the sum order is fixed (bit-identical reruns).
#include "kernels/cpu/linear.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/gemm.h"

namespace cann::kernels {

void linear_forward(float* y, const float* x, const float* w, const float* b, int N, int C,
                    int OC) {
  float beta = 0.0f;
  if (b != nullptr) {
#pragma omp parallel for schedule(static) if (N * OC > 65536)
    for (int n = 0; n < N; ++n) std::memcpy(y + static_cast<size_t>(n) * OC, b, OC * sizeof(float));
    beta = 1.0f;
  }
  // y(N,OC) = x(N,C) * w(OC,C)^T + beta*y
  gemm(false, true, N, OC, C, x, C, w, C, beta, y, OC);
}

void linear_backward(float* dx, float* dw, float* db, const float* dy, const float* x,
                     const float* w, int N, int C, int OC) {
  if (dx != nullptr) {
    // dx(N,C) = dy(N,OC) * w(OC,C)
    gemm(false, false, N, C, OC, dy, OC, w, C, 0.0f, dx, C);
  }
  if (dw != nullptr) {
    // dw(OC,C) += dy(N,OC)^T * x(N,C)
    gemm(true, false, OC, C, N, dy, OC, x, C, 1.0f, dw, C);
  }
  if (db != nullptr) {
    // Column blocks of 64 keep each thread's partial sums in registers/L1 while it streams dy.
    constexpr int kBlock = 64;
    const int blocks = (OC + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (static_cast <long>(N) * OC > 65536)
    for (int blk = 0; blk < blocks; ++blk) {
      const int o0 = blk * kBlock;
      const int o1 = std::min(OC, o0 + kBlock);
      float acc[kBlock] = {};
      for (int n = 0; n < N; ++n) {
        const float* row = dy + static_cast<size_t>(n) * OC;
#pragma omp simd
        for (int o = o0; o < o1; ++o) acc[o - o0] += row[o];
      }
      for (int o = o0; o < o1; ++o) db[o] += acc[o - o0];
    }
  }
}

}  // namespace cann::kernels
