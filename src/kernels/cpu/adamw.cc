// Fused AdamW. One read of p, g, m, v and one write of p, m, v per element: the update is
// memory-bound, so fusing the four passes of an unfused implementation is the whole speedup.
#include "kernels/cpu/adamw.h"

#include <cmath>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "core/word_sum.h"

namespace cann::kernels {

void adamw_update(float* params, float* m, float* v, const float* grads, size_t n,
                  const AdamWHyper& h) {
  const float bc1 = 1.0f - std::pow(h.beta1, static_cast<float>(h.step));
  const float bc2 = 1.0f - std::pow(h.beta2, static_cast<float>(h.step));
  const float step_size = h.lr / bc1;
  const float inv_sqrt_bc2 = 1.0f / std::sqrt(bc2);
  const float decay = 1.0f - h.lr * h.weight_decay;
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

namespace {

// The loop of adamw_update with outputs that overlap no input: declared so, it vectorizes.
void adamw_update_apart(const float* __restrict params, const float* __restrict m,
                        const float* __restrict v, const float* __restrict grads,
                        float* __restrict params_out, float* __restrict m_out,
                        float* __restrict v_out, long len, const AdamWHyper& h) {
  const float bc1 = 1.0f - std::pow(h.beta1, static_cast<float>(h.step));
  const float bc2 = 1.0f - std::pow(h.beta2, static_cast<float>(h.step));
  const float step_size = h.lr / bc1;
  const float inv_sqrt_bc2 = 1.0f / std::sqrt(bc2);
  const float decay = 1.0f - h.lr * h.weight_decay;
  const float beta1 = h.beta1, beta2 = h.beta2, eps = h.eps, scale = h.grad_scale;
#pragma omp simd
  for (long i = 0; i < len; ++i) {
    const float g = grads[i] * scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m_out[i] = mi;
    v_out[i] = vi;
    params_out[i] = params[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

}  // namespace

void adamw_update_to(const float* params, const float* m, const float* v, const float* grads,
                     float* params_out, float* m_out, float* v_out, size_t n, const AdamWHyper& h) {
  if (params_out == params) {
    // In place (the three outputs are their inputs, as the contract says).
    adamw_update(params_out, m_out, v_out, grads, n, h);
    return;
  }
  adamw_update_apart(params, m, v, grads, params_out, m_out, v_out, static_cast<long>(n), h);
}

void adamw_update_summed(const float* params, const float* m, const float* v, const float* grads,
                         float* params_out, float* m_out, float* v_out, size_t n,
                         const AdamWHyper& h, WordSumParts* sums) {
  const float bc1 = 1.0f - std::pow(h.beta1, static_cast<float>(h.step));
  const float bc2 = 1.0f - std::pow(h.beta2, static_cast<float>(h.step));
  const float step_size = h.lr / bc1;
  const float inv_sqrt_bc2 = 1.0f / std::sqrt(bc2);
  const float decay = 1.0f - h.lr * h.weight_decay;
#if defined(__AVX512F__)
  // The word sums' lanes as word_sum_add keeps them: 64-bit lane l of the low vector sums word
  // 2l of each block, of the high vector word 2l + 1. Twelve accumulators, held in registers
  // (an array of them was kept on the stack, and the update ran three times slower).
  const __m512i low = _mm512_set1_epi64(0xffffffffLL);
  auto load = [](const WordSumParts& s, __m512i* alo, __m512i* ahi, __m512i* blo, __m512i* bhi) {
    alignas(64) uint64_t lanes[4][8];
    for (int l = 0; l < 8; ++l) {
      lanes[0][l] = s.a[2 * l];
      lanes[1][l] = s.a[2 * l + 1];
      lanes[2][l] = s.b[2 * l];
      lanes[3][l] = s.b[2 * l + 1];
    }
    *alo = _mm512_load_si512(lanes[0]);
    *ahi = _mm512_load_si512(lanes[1]);
    *blo = _mm512_load_si512(lanes[2]);
    *bhi = _mm512_load_si512(lanes[3]);
  };
  auto store = [](WordSumParts* s, __m512i alo, __m512i ahi, __m512i blo, __m512i bhi) {
    alignas(64) uint64_t lanes[4][8];
    _mm512_store_si512(lanes[0], alo);
    _mm512_store_si512(lanes[1], ahi);
    _mm512_store_si512(lanes[2], blo);
    _mm512_store_si512(lanes[3], bhi);
    for (int l = 0; l < 8; ++l) {
      s->a[2 * l] = lanes[0][l];
      s->a[2 * l + 1] = lanes[1][l];
      s->b[2 * l] = lanes[2][l];
      s->b[2 * l + 1] = lanes[3][l];
    }
  };
  __m512i pal, pah, pbl, pbh, mal, mah, mbl, mbh, val, vah, vbl, vbh;
  load(sums[0], &pal, &pah, &pbl, &pbh);
  load(sums[1], &mal, &mah, &mbl, &mbh);
  load(sums[2], &val, &vah, &vbl, &vbh);
#define CANN_WORD_SUM_ADD(x, al, ah, bl, bh)              \
  do {                                                    \
    const __m512i w_ = _mm512_castps_si512(x);            \
    al = _mm512_add_epi64(al, _mm512_and_si512(w_, low)); \
    ah = _mm512_add_epi64(ah, _mm512_srli_epi64(w_, 32)); \
    bl = _mm512_add_epi64(bl, al);                        \
    bh = _mm512_add_epi64(bh, ah);                        \
  } while (0)
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
    CANN_WORD_SUM_ADD(P, pal, pah, pbl, pbh);
    CANN_WORD_SUM_ADD(M, mal, mah, mbl, mbh);
    CANN_WORD_SUM_ADD(V, val, vah, vbl, vbh);
  }
#undef CANN_WORD_SUM_ADD
  store(&sums[0], pal, pah, pbl, pbh);
  store(&sums[1], mal, mah, mbl, mbh);
  store(&sums[2], val, vah, vbl, vbh);
  for (int k = 0; k < 3; ++k) sums[k].bytes += n * sizeof(float);
#else
  (void)bc1;
  (void)step_size;
  (void)inv_sqrt_bc2;
  (void)decay;
  adamw_update_to(params, m, v, grads, params_out, m_out, v_out, n, h);
  word_sum_add(&sums[0], params_out, n * sizeof(float));
  word_sum_add(&sums[1], m_out, n * sizeof(float));
  word_sum_add(&sums[2], v_out, n * sizeof(float));
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
