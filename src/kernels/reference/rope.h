// Naive reference for kernels/cpu/rope: the angle and its cos/sin computed at each use, no
// table, and the pairs found by their column indices one at a time.
#pragma once

#include <cmath>
#include <vector>

#include "kernels/cpu/rope.h"

namespace cann::ref {

// Rotates x (N, row_stride) in place by +angle (sign 1) or by -angle (sign -1: the transpose,
// which is the backward). inv_freq has rotary_dim/2 entries.
template <typename F>
void rope_rotate(F* x, const int* pos, const std::vector<F>& inv_freq, F attention_factor,
                 const kernels::RopeShape& s, int sign) {
  const int half = static_cast<int>(inv_freq.size());
  for (int n = 0; n < s.N; ++n)
    for (int h = 0; h < s.heads; ++h)
      for (int i = 0; i < half; ++i) {
        const int ia = s.layout == kernels::RopeLayout::kHalves ? i : 2 * i;
        const int ib = s.layout == kernels::RopeLayout::kHalves ? i + half : 2 * i + 1;
        F* row = x + n * s.row_stride + h * s.head_size + s.rot_offset;
        const F angle = F(pos[n]) * inv_freq[i];
        const F c = attention_factor * std::cos(angle);
        const F sn = F(sign) * attention_factor * std::sin(angle);
        const F a = row[ia], b = row[ib];
        row[ia] = a * c - b * sn;
        row[ib] = b * c + a * sn;
      }
}

}  // namespace cann::ref
