// Fused AdamW. One read of p, g, m, v and one write of p, m, v per element: the update is
// memory-bound, so fusing the four passes of an unfused implementation is the whole speedup.
#include "kernels/cpu/adamw.h"

#include <cmath>
#include <cstring>

#include "core/word_sum.h"
#include "core/word_sum_lanes.h"

namespace cann::kernels {

namespace {

// The step's constants, computed one way for every kernel here so that they round alike.
struct Derived {
  float step_size, inv_sqrt_bc2, decay;
};

Derived derive(const AdamWHyper& h) {
  const float bc1 = 1.0f - std::pow(h.beta1, static_cast<float>(h.step));
  const float bc2 = 1.0f - std::pow(h.beta2, static_cast<float>(h.step));
  return {h.lr / bc1, 1.0f / std::sqrt(bc2), 1.0f - h.lr * h.weight_decay};
}

}  // namespace

void adamw_update(float* params, float* m, float* v, const float* grads, size_t n,
                  const AdamWHyper& h) {
  const auto [step_size, inv_sqrt_bc2, decay] = derive(h);
  const long len = static_cast<long>(n);
#pragma omp parallel for simd schedule(static) if (len > (1 << 15))
  for (long i = 0; i < len; ++i) {
    const float g = grads[i] * h.grad_scale;
    const float mi = h.beta1 * m[i] + (1.0f - h.beta1) * g;
    const float vi = h.beta2 * v[i] + (1.0f - h.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    // p <- p - lr*wd*p - lr * mhat / (sqrt(vhat) + eps), with mhat = m/bc1, vhat = v/bc2
    params[i] = params[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + h.eps);
  }
}

void adamw_update_summed(const float* params, const float* m, const float* v, const float* grads,
                         float* params_out, float* m_out, float* v_out, size_t n,
                         const AdamWHyper& h, WordSumParts* sums) {
#if defined(__AVX512F__)
  const auto [step_size, inv_sqrt_bc2, decay] = derive(h);
  // Three sets of accumulators, held in registers (an array of them was kept on the stack,
  // and the update ran three times slower).
  WordSumLanes ps = load_lanes(sums[0]), ms = load_lanes(sums[1]), vs = load_lanes(sums[2]);
  for (size_t b = 0; b < n; b += 16) {
    // The update itself is the same expression as adamw_update's loop, so it rounds the same.
    alignas(64) float po[16], mo[16], vo[16];
#pragma omp simd
    for (int j = 0; j < 16; ++j) {
      const float g = grads[b + j] * h.grad_scale;
      const float mi = h.beta1 * m[b + j] + (1.0f - h.beta1) * g;
      const float vi = h.beta2 * v[b + j] + (1.0f - h.beta2) * g * g;
      mo[j] = mi;
      vo[j] = vi;
      po[j] = params[b + j] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + h.eps);
    }
    const __m512 P = _mm512_load_ps(po), M = _mm512_load_ps(mo), V = _mm512_load_ps(vo);
    _mm512_store_ps(params_out + b, P);
    _mm512_store_ps(m_out + b, M);
    _mm512_store_ps(v_out + b, V);
    add_lanes(&ps, _mm512_castps_si512(P));
    add_lanes(&ms, _mm512_castps_si512(M));
    add_lanes(&vs, _mm512_castps_si512(V));
  }
  store_lanes(ps, &sums[0]);
  store_lanes(ms, &sums[1]);
  store_lanes(vs, &sums[2]);
  for (int k = 0; k < 3; ++k) sums[k].bytes += n * sizeof(float);
#else
  // The outputs take the inputs, are updated in place, then read back for their sums.
  const float* in[3] = {params, m, v};
  float* out[3] = {params_out, m_out, v_out};
  for (int k = 0; k < 3; ++k)
    if (out[k] != in[k]) std::memcpy(out[k], in[k], n * sizeof(float));
  adamw_update(params_out, m_out, v_out, grads, n, h);
  for (int k = 0; k < 3; ++k) word_sum_add(&sums[k], out[k], n * sizeof(float));
#endif
}

void adam_apply(float* params, const float* m, const float* v, size_t n, float step_size, float eps,
                float decay) {
  const long len = static_cast<long>(n);
#pragma omp parallel for simd schedule(static) if (len > (1 << 15))
  for (long i = 0; i < len; ++i)
    params[i] = params[i] * decay - step_size * m[i] / (std::sqrt(v[i]) + eps);
}

}  // namespace cann::kernels
