// Naive reference for kernels/cpu/click_loss, in the textbook form (log of the sigmoid).
#pragma once

#include <cmath>

namespace cann::ref {

template <typename F>
F bce_with_logits_forward(const F* logits, const F* labels, int B) {
  F sum = 0;
  for (int b = 0; b < B; ++b) {
    const F s = F(1) / (F(1) + std::exp(-logits[b]));
    sum -= labels[b] * std::log(s) + (F(1) - labels[b]) * std::log(F(1) - s);
  }
  return sum / F(B);
}

template <typename F>
void bce_with_logits_backward(F* dlogits, const F* logits, const F* labels, int B, F dloss) {
  for (int b = 0; b < B; ++b)
    dlogits[b] = dloss * (F(1) / (F(1) + std::exp(-logits[b])) - labels[b]) / F(B);
}

// scores[b][j] = <u_b, v_j> / t; loss = mean_b -log softmax(scores[b])[b].
template <typename F>
F in_batch_softmax_forward(const F* u, const F* v, int B, int NV, int C, F t) {
  F loss = 0;
  for (int b = 0; b < B; ++b) {
    F sum = 0, pos = 0;
    for (int j = 0; j < NV; ++j) {
      F s = 0;
      for (int c = 0; c < C; ++c) s += u[b * C + c] * v[j * C + c];
      s /= t;
      sum += std::exp(s);
      if (j == b) pos = s;
    }
    loss += std::log(sum) - pos;
  }
  return loss / F(B);
}

// du (B,C) overwritten, dv (NV,C) accumulates.
template <typename F>
void in_batch_softmax_backward(F* du, F* dv, const F* u, const F* v, int B, int NV, int C, F t,
                               F dloss) {
  for (int i = 0; i < B * C; ++i) du[i] = 0;
  for (int b = 0; b < B; ++b) {
    F sum = 0;
    for (int j = 0; j < NV; ++j) {
      F s = 0;
      for (int c = 0; c < C; ++c) s += u[b * C + c] * v[j * C + c];
      sum += std::exp(s / t);
    }
    for (int j = 0; j < NV; ++j) {
      F s = 0;
      for (int c = 0; c < C; ++c) s += u[b * C + c] * v[j * C + c];
      const F g = dloss * (std::exp(s / t) / sum - (j == b ? F(1) : F(0))) / (F(B) * t);
      for (int c = 0; c < C; ++c) {
        du[b * C + c] += g * v[j * C + c];
        dv[j * C + c] += g * u[b * C + c];
      }
    }
  }
}

template <typename F>
void relu_forward(F* y, const F* x, long n) {
  for (long i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : F(0);
}

template <typename F>
void relu_backward(F* dx, const F* dy, const F* y, long n) {
  for (long i = 0; i < n; ++i) dx[i] = y[i] > 0 ? dy[i] : F(0);
}

}  // namespace cann::ref
