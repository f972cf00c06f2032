// Layer normalization over the channel dimension (Ba et al. 2016), eps = 1e-5 as in GPT-2.
#pragma once

namespace cann::kernels {

constexpr float kLayerNormEps = 1e-5f;

// x is (N,C); w, b are (C); y is (N,C); mean and rstd (N) are saved for backward.
void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* w,
                       const float* b, int N, int C);
// dx (N,C) is overwritten; dw, db (C) accumulate.
void layernorm_backward(float* dx, float* dw, float* db, const float* dy, const float* x,
                        const float* w, const float* mean, const float* rstd, int N, int C);

}  // namespace cann::kernels
