// Attention per (batch, head) through strided sgemm calls straight on the qkv buffer (no
// gathering of heads), with the softmax fused between the two GEMMs.
//
// Causal attention computes only what the mask keeps: rows are taken in blocks of kRowBlock,
// and block [i0,i1) multiplies against keys [0,i1) only. At T = 256 that is 4 blocks and
// (1+2+3+4)/16 = 62.5% of the full QK^T and AV work. Heads run in parallel across threads and
// each sgemm inside runs single-threaded (OpenBLAS on OpenMP does that inside a parallel region).
#include "kernels/cpu/attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/vec_math.h"

namespace cann::kernels {
namespace {

constexpr int kRowBlock = 64;

// Softmax of rows [i0,i1) of a (T,T) score block in place; row i keeps columns [0, limit(i)).
void softmax_rows(float* a, int T, int i0, int i1, bool causal) {
  for (int i = i0; i < i1; ++i) {
    float* row = a + static_cast<size_t>(i) * T;
    const int len = causal ? i + 1 : T;
    float mx = row[0];
    for (int j = 1; j < len; ++j) mx = std::max(mx, row[j]);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < len; ++j) {
      const float e = fast_exp(row[j] - mx);
      row[j] = e;
      sum += e;
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int j = 0; j < len; ++j) row[j] *= inv;
    if (len < T) std::memset(row + len, 0, sizeof(float) * (T - len));
  }
}

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, const AttentionShape& s) {
  const int T = s.T, HS = s.HS, C = s.C(), QKV = s.QKV();
  const int group = s.NH / s.KVH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const int block = s.causal ? kRowBlock : T;
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < s.B * s.NH; ++bh) {
    const int b = bh / s.NH, h = bh % s.NH, kh = h / group;
    const float* base = qkv + static_cast<size_t>(b) * T * QKV;
    const float* q = base + h * HS;
    const float* k = base + C + kh * HS;
    const float* v = base + C + s.KVH * HS + kh * HS;
    float* a = att + static_cast<size_t>(bh) * T * T;
    float* o = out == nullptr ? nullptr : out + static_cast<size_t>(b) * T * C + h * HS;
    for (int i0 = 0; i0 < T; i0 += block) {
      const int i1 = std::min(T, i0 + block);
      const int keys = s.causal ? i1 : T;
      // a[i0:i1, 0:keys] = scale * q[i0:i1] k[0:keys]^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i1 - i0, keys, HS, scale,
                  q + static_cast<size_t>(i0) * QKV, QKV, k, QKV, 0.0f,
                  a + static_cast<size_t>(i0) * T, T);
      softmax_rows(a, T, i0, i1, s.causal);
      if (o == nullptr) continue;  // attention_probs_forward
      // o[i0:i1] = a[i0:i1, 0:keys] v[0:keys]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i1 - i0, HS, keys, 1.0f,
                  a + static_cast<size_t>(i0) * T, T, v, QKV, 0.0f, o + static_cast<size_t>(i0) * C,
                  C);
    }
  }
}

// The probabilities alone: attention_forward itself with the AV product skipped, which is what
// keeps them bitwise equal to the ones a forward saved.
void attention_probs_forward(float* att, const float* qkv, const AttentionShape& s) {
  attention_forward(nullptr, att, qkv, s);
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                        const AttentionShape& s) {
  const int T = s.T, HS = s.HS, C = s.C(), QKV = s.QKV();
  const int group = s.NH / s.KVH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const int block = s.causal ? kRowBlock : T;
  // One task per (batch, kv head): the query heads sharing a kv head add into the same dk, dv.
#pragma omp parallel
  {
    std::vector<float> datt(static_cast<size_t>(T) * T);
#pragma omp for schedule(static)
    for (int bk = 0; bk < s.B * s.KVH; ++bk) {
      const int b = bk / s.KVH, kh = bk % s.KVH;
      const float* base = qkv + static_cast<size_t>(b) * T * QKV;
      float* dbase = dqkv + static_cast<size_t>(b) * T * QKV;
      const float* k = base + C + kh * HS;
      const float* v = base + C + s.KVH * HS + kh * HS;
      float* dk = dbase + C + kh * HS;
      float* dv = dbase + C + s.KVH * HS + kh * HS;
      for (int t = 0; t < T; ++t) {
        std::memset(dk + static_cast<size_t>(t) * QKV, 0, sizeof(float) * HS);
        std::memset(dv + static_cast<size_t>(t) * QKV, 0, sizeof(float) * HS);
      }
      for (int h = kh * group; h < (kh + 1) * group; ++h) {
        const float* q = base + h * HS;
        float* dq = dbase + h * HS;
        const float* a = att + (static_cast<size_t>(b) * s.NH + h) * T * T;
        const float* dout_h = dout + static_cast<size_t>(b) * T * C + h * HS;
        for (int i0 = 0; i0 < T; i0 += block) {
          const int i1 = std::min(T, i0 + block);
          const int rows = i1 - i0;
          const int keys = s.causal ? i1 : T;
          const float* a_blk = a + static_cast<size_t>(i0) * T;
          float* da_blk = datt.data() + static_cast<size_t>(i0) * T;
          const float* do_blk = dout_h + static_cast<size_t>(i0) * C;
          // datt = dout v^T
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, HS, 1.0f, do_blk, C, v,
                      QKV, 0.0f, da_blk, T);
          // dv[0:keys] += a^T dout
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, keys, HS, rows, 1.0f, a_blk, T,
                      do_blk, C, 1.0f, dv, QKV);
          // softmax backward: ds = a * (datt - sum_j a*datt), times the score scale
          for (int i = 0; i < rows; ++i) {
            const float* ar = a_blk + static_cast<size_t>(i) * T;
            float* dr = da_blk + static_cast<size_t>(i) * T;
            const int len = s.causal ? i0 + i + 1 : T;
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int j = 0; j < len; ++j) dot += ar[j] * dr[j];
#pragma omp simd
            for (int j = 0; j < len; ++j) dr[j] = ar[j] * (dr[j] - dot) * scale;
            for (int j = len; j < keys; ++j) dr[j] = 0.0f;
          }
          // dq[i0:i1] = ds k[0:keys]   (overwrite: each query head has its own dq)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, HS, keys, 1.0f, da_blk, T, k,
                      QKV, 0.0f, dq + static_cast<size_t>(i0) * QKV, QKV);
          // dk[0:keys] += ds^T q[i0:i1]
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, keys, HS, rows, 1.0f, da_blk, T,
                      q + static_cast<size_t>(i0) * QKV, QKV, 1.0f, dk, QKV);
        }
      }
    }
  }
}

}  // namespace cann::kernels
