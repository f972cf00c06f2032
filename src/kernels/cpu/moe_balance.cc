// Balance losses. Both are tiny next to the experts' GEMMs (O(N*E)), so they favour plain
// loops; sums over tokens are taken in double so the result does not depend on N's size.
#include "kernels/cpu/moe_balance.h"

#include <algorithm>
#include <vector>

namespace cann::kernels {
namespace {

// counts (E) of the assignments in expert_index rows [n0, n1).
std::vector<double> choice_counts(const int* expert_index, int n0, int n1, int E, int K) {
  std::vector<double> count(E, 0.0);
  for (size_t a = static_cast<size_t>(n0) * K; a < static_cast<size_t>(n1) * K; ++a)
    count[expert_index[a]] += 1.0;
  return count;
}

}  // namespace

float moe_seq_balance_loss(const float* scores, const int* expert_index, int B, int T, int E,
                           int K) {
  double total = 0.0;
  std::vector<double> P(E);
  for (int b = 0; b < B; ++b) {
    const std::vector<double> count = choice_counts(expert_index, b * T, (b + 1) * T, E, K);
    std::fill(P.begin(), P.end(), 0.0);
    for (int t = 0; t < T; ++t) {
      const float* s = scores + (static_cast<size_t>(b) * T + t) * E;
      double sum = 0.0;
      for (int e = 0; e < E; ++e) sum += s[e];
      for (int e = 0; e < E; ++e) P[e] += s[e] / sum;
    }
    double L = 0.0;
    for (int e = 0; e < E; ++e) L += (double(E) / (double(K) * T) * count[e]) * (P[e] / T);
    total += L;
  }
  return static_cast<float>(total / B);
}

void moe_seq_balance_loss_backward(float* dscores, const float* scores, const int* expert_index,
                                   int B, int T, int E, int K, float coef) {
  // dL/ds'_te = f_e / (T B); through s' = s / S: dL/ds_tj = (g_j - sum_e g_e s'_te) / S.
  std::vector<double> g(E);
  for (int b = 0; b < B; ++b) {
    const std::vector<double> count = choice_counts(expert_index, b * T, (b + 1) * T, E, K);
    for (int e = 0; e < E; ++e)
      g[e] = coef * (double(E) / (double(K) * T) * count[e]) / (double(T) * B);
    for (int t = 0; t < T; ++t) {
      const size_t row = (static_cast<size_t>(b) * T + t) * E;
      const float* s = scores + row;
      double sum = 0.0, gs = 0.0;
      for (int e = 0; e < E; ++e) sum += s[e];
      for (int e = 0; e < E; ++e) gs += g[e] * s[e] / sum;
      for (int e = 0; e < E; ++e) dscores[row + e] = static_cast<float>((g[e] - gs) / sum);
    }
  }
}

float moe_switch_balance_loss(const float* probs, const int* expert_index, int N, int E, int K) {
  const std::vector<double> count = choice_counts(expert_index, 0, N, E, K);
  std::vector<double> P(E, 0.0);
  for (int n = 0; n < N; ++n)
    for (int e = 0; e < E; ++e) P[e] += probs[static_cast<size_t>(n) * E + e];
  double L = 0.0;
  for (int e = 0; e < E; ++e) L += (count[e] / N) * (P[e] / N);
  return static_cast<float>(L * E);
}

void moe_switch_balance_loss_backward(float* dprobs, const int* expert_index, int N, int E, int K,
                                      float coef) {
  const std::vector<double> count = choice_counts(expert_index, 0, N, E, K);
  std::vector<float> row(E);
  for (int e = 0; e < E; ++e) row[e] = static_cast<float>(coef * E * count[e] / (double(N) * N));
  for (int n = 0; n < N; ++n)
    std::copy(row.begin(), row.end(), dprobs + static_cast<size_t>(n) * E);
}

}  // namespace cann::kernels
