// Embedding lookup and its scatter-add backward. The backward is split over channel ranges,
// not rows: two rows with the same token would otherwise race on one dwte row, and a channel
// split keeps the summation order fixed without atomics.
#include "kernels/cpu/embedding.h"

#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstddef>

namespace cann::kernels {

void embedding_forward_vocab_range(float* out, const int* tokens, const float* wte_shard,
                                   const float* wpe, int B, int T, int C, int v_begin, int v_end) {
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * T; ++bt) {
    const int tok = tokens[bt];
    const bool mine = tok >= v_begin && tok < v_end;
    const float* te = wte_shard + static_cast<size_t>(mine ? tok - v_begin : 0) * C;
    const float* pe = wpe + static_cast<size_t>(bt % T) * C;
    float* o = out + static_cast<size_t>(bt) * C;
    if (mine && wpe != nullptr) {
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] = te[c] + pe[c];
    } else if (mine) {
      std::copy(te, te + C, o);
    } else if (wpe != nullptr) {
      std::copy(pe, pe + C, o);
    } else {
      std::fill(o, o + C, 0.0f);
    }
  }
}

void embedding_backward_vocab_range(float* dwte_shard, float* dwpe, const float* dout,
                                    const int* tokens, int B, int T, int C, int v_begin,
                                    int v_end) {
#pragma omp parallel
  {
    const int tid = omp_get_thread_num();
    const int nth = omp_get_num_threads();
    const int chunks = (C + 15) / 16;
    const int c0 = std::min(C, chunks * tid / nth * 16);
    const int c1 = std::min(C, chunks * (tid + 1) / nth * 16);
    for (int bt = 0; bt < B * T; ++bt) {
      const float* d = dout + static_cast<size_t>(bt) * C;
      if (dwpe != nullptr) {
        float* pe = dwpe + static_cast<size_t>(bt % T) * C;
#pragma omp simd
        for (int c = c0; c < c1; ++c) pe[c] += d[c];
      }
      const int tok = tokens[bt];
      if (tok < v_begin || tok >= v_end) continue;
      float* te = dwte_shard + static_cast<size_t>(tok - v_begin) * C;
#pragma omp simd
      for (int c = c0; c < c1; ++c) te[c] += d[c];
    }
  }
}

// The whole vocabulary is the range [0, INT_MAX): every token is this rank's.
void embedding_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B,
                       int T, int C) {
  embedding_forward_vocab_range(out, tokens, wte, wpe, B, T, C, 0, INT_MAX);
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B,
                        int T, int C) {
  embedding_backward_vocab_range(dwte, dwpe, dout, tokens, B, T, C, 0, INT_MAX);
}

}  // namespace cann::kernels
