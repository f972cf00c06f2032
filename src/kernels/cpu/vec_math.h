// Elementwise math written so that GCC vectorizes the loops that call it (AVX2/AVX-512): no
// calls into libm, no branches. Used by GELU, softmax and cross-entropy.
#pragma once

#include <cstdint>
#include <cstring>

namespace cann::kernels {

// exp(x) for float, relative error below 2e-7 over the range that matters to softmax
// (x <= 0 after max subtraction) and to tanh. Cody-Waite range reduction x = n*ln2 + r with
// |r| <= ln2/2, then a degree-6 polynomial for e^r, then 2^n by building the exponent bits.
// Inputs below -87.3 flush to 0 (softmax of masked entries); above 88.7 saturate.
inline float fast_exp(float x) {
  x = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  // Round to nearest even by adding and subtracting 1.5 * 2^23 (exact for |v| < 2^22, here
  // |v| <= 128): what roundevenf gives, but GCC vectorizes this and not the builtin.
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693145751953125f;   // ln2 split in a high part exact in float
  r = r - n * 1.428606765330187045e-06f;  // and the low remainder
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  // x == -87.3 gives n = -126, the smallest normal exponent, so `bits` never underflows.
  return x <= -87.3f ? 0.0f : p * scale;
}

// tanh(u) = 1 - 2 / (exp(2u) + 1); saturates cleanly to +-1 through fast_exp's clamp.
inline float fast_tanh(float u) {
  return 1.0f - 2.0f / (fast_exp(2.0f * u) + 1.0f);
}

}  // namespace cann::kernels
