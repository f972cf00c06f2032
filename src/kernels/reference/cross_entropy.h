// Naive reference for kernels/cpu/cross_entropy: explicit softmax, then -log p[target].
#pragma once

#include <cmath>
#include <vector>

namespace cann::ref {

template <typename F>
void softmax_rows(F* p, const F* logits, int N, int V) {
  for (int n = 0; n < N; ++n) {
    F mx = logits[n * V];
    for (int v = 1; v < V; ++v) mx = std::max(mx, logits[n * V + v]);
    F sum = 0;
    for (int v = 0; v < V; ++v) sum += (p[n * V + v] = std::exp(logits[n * V + v] - mx));
    for (int v = 0; v < V; ++v) p[n * V + v] /= sum;
  }
}

template <typename F>
void softmax_crossentropy_forward(F* losses, const F* logits, const int* targets, int N, int V) {
  std::vector<F> p(static_cast<size_t>(N) * V);
  softmax_rows(p.data(), logits, N, V);
  for (int n = 0; n < N; ++n) losses[n] = targets[n] < 0 ? F(0) : -std::log(p[n * V + targets[n]]);
}

template <typename F>
void softmax_crossentropy_backward(F* dlogits, const F* logits, const int* targets, F grad_scale,
                                   int N, int V) {
  std::vector<F> p(static_cast<size_t>(N) * V);
  softmax_rows(p.data(), logits, N, V);
  for (int n = 0; n < N; ++n)
    for (int v = 0; v < V; ++v)
      dlogits[n * V + v] =
          targets[n] < 0 ? F(0) : (p[n * V + v] - (v == targets[n] ? F(1) : F(0))) * grad_scale;
}

}  // namespace cann::ref
