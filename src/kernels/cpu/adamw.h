// AdamW (Loshchilov & Hutter 2019): Adam with weight decay decoupled from the gradient, fused
// into one pass over parameters, gradients and both moments.
#pragma once

#include <cstddef>

namespace cann {
struct WordSumParts;
}

namespace cann::kernels {

struct AdamWHyper {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;  // applied as p -= lr * wd * p, independent of the gradient
  int step;            // 1-based: the bias corrections use beta^step
  float grad_scale;    // multiplies every gradient first (gradient clipping, loss scaling)
};

// params, m, v, grads are (n); params, m and v are updated in place.
void adamw_update(float* params, float* m, float* v, const float* grads, size_t n,
                  const AdamWHyper& h);
// The same update read from (params, m, v) and written to (params_out, m_out, v_out), bit for
// bit adamw_update's, on the calling thread (the caller splits the work): the outputs either
// are their inputs (in place) or overlap no input. Over whole 64-byte blocks (n a multiple of
// 16, every pointer 64-byte aligned); it adds each output block, in order, to the word sums
// (core/word_sum.h) sums[0] (params), sums[1] (m) and sums[2] (v), from the registers that
// store it: the sums cost no second read. (Stores that bypass the cache were tried: slower in
// training, where the next step reads the state back from cache.)
void adamw_update_summed(const float* params, const float* m, const float* v, const float* grads,
                         float* params_out, float* m_out, float* v_out, size_t n,
                         const AdamWHyper& h, WordSumParts* sums);

// Adam's step on moments it does not change (1-bit Adam and top-k past their warmup: the
// momentum arrives averaged, the variance is frozen and bias-corrected already):
//   params = params * decay - step_size * m / (sqrt(v) + eps), with step_size = lr / bc1.
void adam_apply(float* params, const float* m, const float* v, size_t n, float step_size, float eps,
                float decay);

}  // namespace cann::kernels
