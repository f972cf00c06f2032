// The residual connection out = x + branch(x).
#pragma once

#include <cstddef>

namespace cann::kernels {

// out, a, b are (n): out = a + b. out may alias a.
void residual_forward(float* out, const float* a, const float* b, size_t n);
// On entry dresid holds d(out); on exit it holds d(x) = d(out) + dbranch, where dbranch is the
// gradient that flowed back through the branch into x. The gradient flowing into the branch
// output is d(out) itself, so the forward's two inputs need no copies of it.
void residual_backward(float* dresid, const float* dbranch, size_t n);

}  // namespace cann::kernels
