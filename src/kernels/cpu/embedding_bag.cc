// Embedding bag pooling over gathered rows; see embedding_bag.h. Bags are independent in the
// forward pass (parallel over b); in the backward pass two bags may share a row, so the
// accumulation into drows runs over bags in order on one thread per column block instead.
#include "kernels/cpu/embedding_bag.h"

#include <algorithm>
#include <cstring>

namespace cann::kernels {
namespace {

float bag_scale(int64_t n, BagPooling pooling) {
  return pooling == BagPooling::kMean && n > 0 ? 1.0f / static_cast<float>(n) : 1.0f;
}

}  // namespace

void embedding_bag_forward(float* out, int ldo, const float* rows, const int64_t* offsets,
                           const int32_t* row_index, int B, int C, BagPooling pooling) {
  const int64_t base = offsets[0];
#pragma omp parallel for schedule(static)
  for (int b = 0; b < B; ++b) {
    float* o = out + static_cast<int64_t>(b) * ldo;
    std::memset(o, 0, sizeof(float) * C);
    const int64_t begin = offsets[b] - base, end = offsets[b + 1] - base;
    for (int64_t k = begin; k < end; ++k) {
      const float* r = rows + static_cast<int64_t>(row_index[k]) * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] += r[c];
    }
    const float s = bag_scale(end - begin, pooling);
    if (s != 1.0f)
      for (int c = 0; c < C; ++c) o[c] *= s;
  }
}

void embedding_bag_backward(float* drows, const float* dout, int ldo, const int64_t* offsets,
                            const int32_t* row_index, int B, int C, BagPooling pooling) {
  const int64_t base = offsets[0];
  // Column blocks of 16 floats (one cache line) split the work without two threads ever
  // writing the same element: each thread owns its columns of every row.
  const int blocks = (C + 15) / 16;
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(B) * C > 32768)
  for (int blk = 0; blk < blocks; ++blk) {
    const int c0 = blk * 16, c1 = std::min(C, c0 + 16);
    for (int b = 0; b < B; ++b) {
      const int64_t begin = offsets[b] - base, end = offsets[b + 1] - base;
      const float s = bag_scale(end - begin, pooling);
      const float* d = dout + static_cast<int64_t>(b) * ldo;
      for (int64_t k = begin; k < end; ++k) {
        float* g = drows + static_cast<int64_t>(row_index[k]) * C;
        for (int c = c0; c < c1; ++c) g[c] += s * d[c];
      }
    }
  }
}

}  // namespace cann::kernels
