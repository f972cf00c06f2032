// Naive reference for the differentiable parts of kernels/cpu/moe: the router's gates and aux
// loss as functions of the logits for a fixed routing decision (expert_index, slot), and the
// combine. Routing decisions themselves are compared exactly against the optimized kernel.
#pragma once

#include <cmath>
#include <vector>

namespace cann::ref {

// gate[n,k] = softmax(logits[n])[expert_index[n,k]]; returns aux = E * sum_e f_e * P_e with
// f_e from expert_index (all N*K assignments).
template <typename F>
F moe_gates(F* gate, const F* logits, const int* expert_index, int N, int E, int K) {
  std::vector<F> p(E), mean(E, F(0));
  std::vector<int> chosen(E, 0);
  for (int n = 0; n < N; ++n) {
    F mx = logits[n * E];
    for (int e = 1; e < E; ++e) mx = std::max(mx, logits[n * E + e]);
    F sum = 0;
    for (int e = 0; e < E; ++e) sum += (p[e] = std::exp(logits[n * E + e] - mx));
    for (int e = 0; e < E; ++e) mean[e] += p[e] / sum / N;
    for (int k = 0; k < K; ++k) {
      gate[n * K + k] = p[expert_index[n * K + k]] / sum;
      ++chosen[expert_index[n * K + k]];
    }
  }
  F aux = 0;
  for (int e = 0; e < E; ++e) aux += F(chosen[e]) / (F(N) * K) * mean[e];
  return aux * E;
}

// out[n] = sum_k (slot >= 0) gate[n,k] * ye[e][slot]
template <typename F>
void moe_combine(F* out, const F* ye, const F* gate, const int* expert_index, const int* slot,
                 int N, int K, int capacity, int C) {
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) {
      F acc = 0;
      for (int k = 0; k < K; ++k) {
        const int a = n * K + k;
        if (slot[a] >= 0) acc += gate[a] * ye[(expert_index[a] * capacity + slot[a]) * C + c];
      }
      out[n * C + c] = acc;
    }
}

}  // namespace cann::ref
