// Naive reference for kernels/cpu/attention: full (T,T) scores, mask applied by -inf, softmax,
// weighted sum; the backward follows the textbook chain rule with no blocking. Value heads of
// VS and the score scale as kernels::AttentionShape says. `att` here is the full (B,NH,T,T)
// probabilities; attention_lse gives the (B,NH,T) log-sum-exp the fused kernel keeps instead.
#pragma once

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/attention.h"

namespace cann::ref {

template <typename F>
void attention_forward(F* out, F* att, const F* qkv, const kernels::AttentionShape& s) {
  const int T = s.T, HS = s.HS, VS = s.vs(), C = s.C(), QKV = s.QKV(), g = s.NH / s.KVH;
  const int QC = s.NH * HS;  // where the k heads start
  const F scale = s.scale != 0.0f ? F(s.scale) : F(1) / std::sqrt(F(HS));
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h) {
      const int kh = h / g;
      F* a = att + (static_cast<size_t>(b) * s.NH + h) * T * T;
      for (int i = 0; i < T; ++i) {
        F mx = -std::numeric_limits<F>::infinity();
        for (int j = 0; j < T; ++j) {
          F dot = 0;
          for (int d = 0; d < HS; ++d)
            dot += qkv[(b * T + i) * QKV + h * HS + d] * qkv[(b * T + j) * QKV + QC + kh * HS + d];
          a[i * T + j] = (s.causal && j > i) ? -std::numeric_limits<F>::infinity() : dot * scale;
          if (a[i * T + j] > mx) mx = a[i * T + j];
        }
        F sum = 0;
        for (int j = 0; j < T; ++j) {
          a[i * T + j] = std::exp(a[i * T + j] - mx);
          sum += a[i * T + j];
        }
        for (int j = 0; j < T; ++j) a[i * T + j] /= sum;
        for (int d = 0; d < VS; ++d) {
          F acc = 0;
          for (int j = 0; j < T; ++j)
            acc += a[i * T + j] * qkv[(b * T + j) * QKV + QC + s.KVH * HS + kh * VS + d];
          out[(b * T + i) * C + h * VS + d] = acc;
        }
      }
    }
}

template <typename F>
void attention_backward(F* dqkv, const F* dout, const F* qkv, const F* att,
                        const kernels::AttentionShape& s) {
  const int T = s.T, HS = s.HS, VS = s.vs(), C = s.C(), QKV = s.QKV(), g = s.NH / s.KVH;
  const int QC = s.NH * HS;
  const F scale = s.scale != 0.0f ? F(s.scale) : F(1) / std::sqrt(F(HS));
  for (size_t i = 0; i < static_cast<size_t>(s.B) * T * QKV; ++i) dqkv[i] = 0;
  std::vector<F> da(T), ds(T);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h) {
      const int kh = h / g;
      const F* a = att + (static_cast<size_t>(b) * s.NH + h) * T * T;
      for (int i = 0; i < T; ++i) {
        const F* dor = dout + (b * T + i) * C + h * VS;
        for (int j = 0; j < T; ++j) {
          F acc = 0;
          for (int d = 0; d < VS; ++d) {
            const size_t vj = (b * T + j) * QKV + QC + s.KVH * HS + kh * VS + d;
            acc += dor[d] * qkv[vj];
            dqkv[vj] += a[i * T + j] * dor[d];
          }
          da[j] = acc;
        }
        F dot = 0;
        for (int j = 0; j < T; ++j) dot += a[i * T + j] * da[j];
        for (int j = 0; j < T; ++j) ds[j] = a[i * T + j] * (da[j] - dot) * scale;
        for (int j = 0; j < T; ++j)
          for (int d = 0; d < HS; ++d) {
            const size_t qi = (b * T + i) * QKV + h * HS + d;
            const size_t kj = (b * T + j) * QKV + QC + kh * HS + d;
            dqkv[qi] += ds[j] * qkv[kj];
            dqkv[kj] += ds[j] * qkv[qi];
          }
      }
    }
}

// lse[b,h,i] = log sum_j exp(score_ij) over the keys query i sees, from the probabilities and
// the scores: log-sum-exp = score_ij - log p_ij for any visible j (here the largest p).
template <typename F>
void attention_lse(F* lse, const F* att, const F* qkv, const kernels::AttentionShape& s) {
  const int T = s.T, HS = s.HS, QKV = s.QKV(), g = s.NH / s.KVH, QC = s.NH * HS;
  const F scale = s.scale != 0.0f ? F(s.scale) : F(1) / std::sqrt(F(HS));
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int i = 0; i < T; ++i) {
        const F* a = att + ((static_cast<size_t>(b) * s.NH + h) * T + i) * T;
        int j = 0;
        for (int k = 1; k < T; ++k)
          if (a[k] > a[j]) j = k;
        F dot = 0;
        for (int d = 0; d < HS; ++d)
          dot += qkv[(b * T + i) * QKV + h * HS + d] *
                 qkv[(b * T + j) * QKV + QC + (h / g) * HS + d];
        lse[(static_cast<size_t>(b) * s.NH + h) * T + i] = dot * scale - std::log(a[j]);
      }
}

}  // namespace cann::ref
