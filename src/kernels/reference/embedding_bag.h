// Naive reference for kernels/cpu/embedding_bag.
#pragma once

#include <cstdint>

namespace cann::ref {

// mean: divide by the bag's size (an empty bag is zeros either way).
template <typename F>
void embedding_bag_forward(F* out, int ldo, const F* rows, const int64_t* offsets,
                           const int32_t* row_index, int B, int C, bool mean) {
  for (int b = 0; b < B; ++b) {
    const int64_t begin = offsets[b] - offsets[0], end = offsets[b + 1] - offsets[0];
    for (int c = 0; c < C; ++c) {
      F sum = 0;
      for (int64_t k = begin; k < end; ++k) sum += rows[row_index[k] * C + c];
      out[b * ldo + c] = mean && end > begin ? sum / F(end - begin) : sum;
    }
  }
}

template <typename F>
void embedding_bag_backward(F* drows, const F* dout, int ldo, const int64_t* offsets,
                            const int32_t* row_index, int B, int C, bool mean) {
  for (int b = 0; b < B; ++b) {
    const int64_t begin = offsets[b] - offsets[0], end = offsets[b + 1] - offsets[0];
    for (int64_t k = begin; k < end; ++k)
      for (int c = 0; c < C; ++c)
        drows[row_index[k] * C + c] +=
            mean ? dout[b * ldo + c] / F(end - begin) : dout[b * ldo + c];
  }
}

}  // namespace cann::ref
