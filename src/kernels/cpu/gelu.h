// GELU in its tanh form (Hendrycks & Gimpel 2016), as GPT-2 and BERT use it:
// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#pragma once

#include <cstddef>

namespace cann::kernels {

// x, y are (n).
void gelu_forward(float* y, const float* x, size_t n);
// dx (n) is overwritten with dy * gelu'(x).
void gelu_backward(float* dx, const float* x, const float* dy, size_t n);

}  // namespace cann::kernels
