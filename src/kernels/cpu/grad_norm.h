// Global gradient norm and clipping (Pascanu et al. 2013).
#pragma once

#include <cstddef>

namespace cann::kernels {

// Sum of squares of x (n), accumulated in double with a fixed reduction order (the same
// threads always sum the same ranges and partials are added in thread order), so reruns and
// resumed runs see bit-identical norms.
double sum_of_squares(const float* x, size_t n);
// The factor to multiply gradients by so that their norm is at most max_norm (1 if already
// within, or if max_norm <= 0 which disables clipping).
float clip_coefficient(double norm, float max_norm);
// Scales x (n) in place.
void scale_inplace(float* x, size_t n, float factor);

}  // namespace cann::kernels
