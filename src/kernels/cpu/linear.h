// Fully connected layer y = x w^T + b, the GEMMs that carry most of a transformer's FLOPs.
#pragma once

namespace cann::kernels {

// x is (N,C); w is (OC,C); b is (OC) or null; y is (N,OC).
void linear_forward(float* y, const float* x, const float* w, const float* b, int N, int C, int OC);
// dy is (N,OC). dx (N,C) is overwritten (skipped when null); dw (OC,C) and db (OC) accumulate
// (skipped when null).
void linear_backward(float* dx, float* dw, float* db, const float* dy, const float* x,
                     const float* w, int N, int C, int OC);

}  // namespace cann::kernels
