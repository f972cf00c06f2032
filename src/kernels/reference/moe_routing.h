// Naive reference for kernels/cpu/moe_routing and kernels/cpu/moe_balance. The choice is made
// by a full stable sort of every expert (groups first, then experts), independently of the
// kernel's partial sorts; the differentiable parts (combine weights, balance losses) are plain
// functions of the logits or scores for a fixed choice, in F, for finite differences.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/cpu/moe_routing.h"

namespace cann::ref {

template <typename F>
void router_scores(F* s, const F* l, int E, kernels::RouterScore kind) {
  if (kind == kernels::RouterScore::kSigmoid) {
    for (int e = 0; e < E; ++e) s[e] = F(1) / (F(1) + std::exp(-l[e]));
    return;
  }
  const F mx = *std::max_element(l, l + E);
  F sum = 0;
  for (int e = 0; e < E; ++e) sum += (s[e] = std::exp(l[e] - mx));
  for (int e = 0; e < E; ++e) s[e] /= sum;
}

// expert_index (N,K): the choice, best first, ties to the lower index.
template <typename F>
void moe_route_choose(int* expert_index, const F* logits, const F* bias,
                      const kernels::RouterConfig& c, int N) {
  const int E = c.E, per = E / c.n_group;
  std::vector<F> s(E), ch(E);
  for (int n = 0; n < N; ++n) {
    router_scores(s.data(), logits + n * E, E, c.score);
    for (int e = 0; e < E; ++e) ch[e] = s[e] + (bias ? bias[e] : F(0));
    std::vector<bool> allowed(E, true);
    if (c.n_group > 1) {
      std::vector<F> gscore(c.n_group);
      for (int g = 0; g < c.n_group; ++g) {
        std::vector<F> v(ch.begin() + g * per, ch.begin() + (g + 1) * per);
        std::sort(v.begin(), v.end(), std::greater<F>());
        const bool two = c.group_ranking == kernels::GroupRanking::kTopTwoSum && per >= 2;
        gscore[g] = two ? v[0] + v[1] : v[0];
      }
      std::vector<int> order(c.n_group);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return gscore[a] > gscore[b]; });
      std::fill(allowed.begin(), allowed.end(), false);
      for (int r = 0; r < c.topk_group; ++r)
        for (int j = 0; j < per; ++j) allowed[order[r] * per + j] = true;
    }
    std::vector<int> order;
    for (int e = 0; e < E; ++e)
      if (allowed[e]) order.push_back(e);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return ch[a] > ch[b]; });
    for (int k = 0; k < c.K; ++k) expert_index[n * c.K + k] = order[k];
  }
}

// For a fixed choice: scores (N,E) and combine weights (N,K) as functions of the logits.
template <typename F>
void moe_route_weights(F* scores, F* weight, const F* logits, const int* expert_index,
                       const kernels::RouterConfig& c, int N) {
  for (int n = 0; n < N; ++n) {
    F* s = scores + n * c.E;
    router_scores(s, logits + n * c.E, c.E, c.score);
    F sum = 0;
    for (int k = 0; k < c.K; ++k) sum += s[expert_index[n * c.K + k]];
    for (int k = 0; k < c.K; ++k) {
      const F v = s[expert_index[n * c.K + k]];
      weight[n * c.K + k] =
          F(c.routed_scaling_factor) * (c.norm_topk_prob ? v / (sum + F(1e-20)) : v);
    }
  }
}

// DeepSeek-V3 eq. 17-20, mean over the B sequences (kernels/cpu/moe_balance.h).
template <typename F>
F moe_seq_balance_loss(const F* scores, const int* expert_index, int B, int T, int E, int K) {
  F total = 0;
  for (int b = 0; b < B; ++b) {
    std::vector<F> f(E, F(0)), P(E, F(0));
    for (int t = 0; t < T; ++t) {
      const int n = b * T + t;
      for (int k = 0; k < K; ++k) f[expert_index[n * K + k]] += F(E) / (F(K) * T);
      F sum = 0;
      for (int e = 0; e < E; ++e) sum += scores[n * E + e];
      for (int e = 0; e < E; ++e) P[e] += scores[n * E + e] / sum / T;
    }
    for (int e = 0; e < E; ++e) total += f[e] * P[e];
  }
  return total / B;
}

// E * sum_e (c_e / N) * mean_n p_ne (Hugging Face's load_balancing_loss_func).
template <typename F>
F moe_switch_balance_loss(const F* probs, const int* expert_index, int N, int E, int K) {
  std::vector<F> tokens(E, F(0)), P(E, F(0));
  for (int n = 0; n < N; ++n) {
    for (int k = 0; k < K; ++k) tokens[expert_index[n * K + k]] += F(1) / N;
    for (int e = 0; e < E; ++e) P[e] += probs[n * E + e] / N;
  }
  F L = 0;
  for (int e = 0; e < E; ++e) L += tokens[e] * P[e];
  return L * E;
}

}  // namespace cann::ref
