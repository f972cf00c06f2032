// Rope rotation over rows of heads. The backward is the same loop with sin negated (the
// transpose of a rotation by theta is the rotation by -theta, and the attention factor scales
// both alike). Rows are independent, so the loop over rows runs in parallel.
#include "kernels/cpu/rope.h"

#include <cmath>

#include "core/check.h"

namespace cann::kernels {

RopeTable rope_table(const RopeFrequencies& f, int max_positions) {
  RopeTable t;
  t.max_positions = max_positions;
  t.half = static_cast<int>(f.inv_freq.size());
  const size_t n = static_cast<size_t>(max_positions) * t.half;
  t.cos.resize(n);
  t.sin.resize(n);
  const double scale = f.attention_factor;
  for (int p = 0; p < max_positions; ++p)
    for (int i = 0; i < t.half; ++i) {
      const double angle = static_cast<double>(p) * static_cast<double>(f.inv_freq[i]);
      t.cos[static_cast<size_t>(p) * t.half + i] = static_cast<float>(scale * std::cos(angle));
      t.sin[static_cast<size_t>(p) * t.half + i] = static_cast<float>(scale * std::sin(angle));
    }
  return t;
}

namespace {

// sign = +1 rotates forward, -1 applies the transpose.
void rotate(float* x, const int* pos, const RopeTable& t, const RopeShape& s, float sign) {
  const int half = t.half;
  CANN_CHECK(s.rot_offset >= 0 && s.rot_offset + 2 * half <= s.head_size)
      << "rotary columns [" << s.rot_offset << ", " << s.rot_offset + 2 * half
      << ") do not fit a head of " << s.head_size;
  CANN_CHECK(s.heads * s.head_size <= s.row_stride) << "heads overrun the row";
  // In the halves layout pair i is (i, i + half); interleaved, (2i, 2i + 1).
  const int second = s.layout == RopeLayout::kHalves ? half : 1;
  const int step = s.layout == RopeLayout::kHalves ? 1 : 2;
#pragma omp parallel for schedule(static) if (static_cast <long>(s.N) * s.heads * half > 4096)
  for (int n = 0; n < s.N; ++n) {
    const int p = pos[n];
    CANN_CHECK(p >= 0 && p < t.max_positions)
        << "position " << p << " outside the rope table of " << t.max_positions;
    const float* c = t.cos.data() + static_cast<size_t>(p) * half;
    const float* sn = t.sin.data() + static_cast<size_t>(p) * half;
    for (int h = 0; h < s.heads; ++h) {
      float* a = x + static_cast<size_t>(n) * s.row_stride + h * s.head_size + s.rot_offset;
      float* b = a + second;
#pragma omp simd
      for (int i = 0; i < half; ++i) {
        const float ai = a[i * step], bi = b[i * step], si = sign * sn[i];
        a[i * step] = ai * c[i] - bi * si;
        b[i * step] = bi * c[i] + ai * si;
      }
    }
  }
}

}  // namespace

void rope_forward(float* x, const int* pos, const RopeTable& t, const RopeShape& s) {
  rotate(x, pos, t, s, 1.0f);
}

void rope_backward(float* dx, const int* pos, const RopeTable& t, const RopeShape& s) {
  rotate(dx, pos, t, s, -1.0f);
}

}  // namespace cann::kernels
