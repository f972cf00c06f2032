// Router variants. Each token's choice is independent of the others', so tokens run in
// parallel, each thread with its own scratch for the choice scores and candidate lists.
// Rankings use std::partial_sort with an explicit (value desc, index asc) order, so the
// result is the same on every run and thread count.
#include "kernels/cpu/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/cpu/vec_math.h"

namespace cann::kernels {
namespace {

// Hugging Face's deepseek routers add this to the sum of the chosen weights before dividing;
// with softmax or sigmoid scores the sum is far larger, so it changes nothing in float.
constexpr float kNormEps = 1e-20f;

// Scratch of one thread for one token.
struct RouteScratch {
  std::vector<float> choice;       // (E) c = s + bias
  std::vector<float> group_score;  // (n_group)
  std::vector<int> groups;         // group ids, ranked
  std::vector<int> candidates;     // expert ids of the kept groups, ranked
};

void scores_of(float* s, const float* l, int E, RouterScore kind) {
  if (kind == RouterScore::kSigmoid) {
    for (int e = 0; e < E; ++e) s[e] = 1.0f / (1.0f + fast_exp(-l[e]));
    return;
  }
  float mx = l[0];
  for (int e = 1; e < E; ++e) mx = std::max(mx, l[e]);
  float sum = 0.0f;
  for (int e = 0; e < E; ++e) sum += (s[e] = fast_exp(l[e] - mx));
  const float inv = 1.0f / sum;
  for (int e = 0; e < E; ++e) s[e] *= inv;
}

// The k best of ids by value, ties to the lower id, best first.
void rank_top(std::vector<int>& ids, const float* value, int k) {
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [value](int a, int b) {
    return value[a] > value[b] || (value[a] == value[b] && a < b);
  });
}

void choose(int* idx, const float* s, const float* bias, const RouterConfig& c, RouteScratch& w) {
  const int E = c.E, G = c.n_group, per = E / G;
  float* ch = w.choice.data();
  for (int e = 0; e < E; ++e) ch[e] = bias ? s[e] + bias[e] : s[e];
  w.candidates.clear();
  if (G <= 1) {
    w.candidates.resize(E);
    std::iota(w.candidates.begin(), w.candidates.end(), 0);
  } else {
    for (int g = 0; g < G; ++g) {
      const float* cg = ch + g * per;
      float best = cg[0], second = 0.0f;
      bool has_second = false;
      for (int j = 1; j < per; ++j) {
        if (cg[j] > best) {
          second = best;
          best = cg[j];
        } else if (!has_second || cg[j] > second) {
          second = cg[j];
        }
        has_second = true;
      }
      w.group_score[g] =
          (c.group_ranking == GroupRanking::kTopTwoSum && has_second) ? best + second : best;
    }
    w.groups.resize(G);
    std::iota(w.groups.begin(), w.groups.end(), 0);
    rank_top(w.groups, w.group_score.data(), c.topk_group);
    for (int r = 0; r < c.topk_group; ++r)
      for (int j = 0; j < per; ++j) w.candidates.push_back(w.groups[r] * per + j);
  }
  rank_top(w.candidates, ch, c.K);
  std::copy(w.candidates.begin(), w.candidates.begin() + c.K, idx);
}

}  // namespace

Status check_router_config(const RouterConfig& c) {
  auto refuse = [&c](const std::string& what, const std::string& hint) {
    return InvalidArgument("MoE router (" + std::to_string(c.E) + " experts, top " +
                           std::to_string(c.K) + ", " + std::to_string(c.n_group) +
                           " groups, top " + std::to_string(c.topk_group) + " groups): " + what +
                           "; hint: " + hint);
  };
  if (c.E < 1 || c.K < 1 || c.K > c.E)
    return refuse("experts per token must be in [1, experts]",
                  "check num_experts_per_tok against n_routed_experts / num_experts");
  if (c.n_group < 1 || c.E % c.n_group != 0)
    return refuse("n_group must divide the experts",
                  "set n_group to a divisor of n_routed_experts, or 1 for no groups");
  if (c.topk_group < 1 || c.topk_group > c.n_group)
    return refuse("topk_group must be in [1, n_group]", "lower topk_group");
  if (c.n_group > 1 && static_cast<long>(c.topk_group) * (c.E / c.n_group) < c.K)
    return refuse("the kept groups hold fewer experts than are chosen",
                  "raise topk_group or lower num_experts_per_tok");
  return OkStatus();
}

void moe_route_forward(float* scores, int* expert_index, float* weight, const float* logits,
                       const float* bias, const RouterConfig& c, int N) {
  const Status valid = check_router_config(c);
  CANN_CHECK(valid.ok()) << valid.message();
  const int E = c.E, K = c.K;
#pragma omp parallel
  {
    RouteScratch w;
    w.choice.resize(E);
    w.group_score.resize(c.n_group);
    w.candidates.reserve(E);
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      float* s = scores + static_cast<size_t>(n) * E;
      int* idx = expert_index + static_cast<size_t>(n) * K;
      float* wt = weight + static_cast<size_t>(n) * K;
      scores_of(s, logits + static_cast<size_t>(n) * E, E, c.score);
      choose(idx, s, bias, c, w);
      float sum = 0.0f;
      for (int k = 0; k < K; ++k) sum += (wt[k] = s[idx[k]]);
      const float mul =
          c.norm_topk_prob ? c.routed_scaling_factor / (sum + kNormEps) : c.routed_scaling_factor;
      for (int k = 0; k < K; ++k) wt[k] *= mul;
    }
  }
}

void moe_route_backward(float* dlogits, const float* dweight, const float* dscores,
                        const float* scores, const int* expert_index, const RouterConfig& c,
                        int N) {
  const int E = c.E, K = c.K;
  const float scale = c.routed_scaling_factor;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* s = scores + static_cast<size_t>(n) * E;
    const int* idx = expert_index + static_cast<size_t>(n) * K;
    const float* dw = dweight + static_cast<size_t>(n) * K;
    float* ds = dlogits + static_cast<size_t>(n) * E;  // ds first, turned into dl in place
    if (dscores && dscores != dlogits) {
      std::copy(dscores + static_cast<size_t>(n) * E, dscores + static_cast<size_t>(n + 1) * E, ds);
    } else if (!dscores) {
      std::fill(ds, ds + E, 0.0f);
    }
    if (c.norm_topk_prob) {
      // w_k = scale s_k / D, D = sum_j s_j + eps: dw_k/ds_j = scale (delta_kj / D - s_k / D^2).
      float D = kNormEps, dot = 0.0f;
      for (int k = 0; k < K; ++k) {
        D += s[idx[k]];
        dot += dw[k] * s[idx[k]];
      }
      for (int k = 0; k < K; ++k) ds[idx[k]] += scale * (dw[k] - dot / D) / D;
    } else {
      for (int k = 0; k < K; ++k) ds[idx[k]] += scale * dw[k];
    }
    if (c.score == RouterScore::kSigmoid) {
      for (int e = 0; e < E; ++e) ds[e] *= s[e] * (1.0f - s[e]);
    } else {
      // softmax: dl_e = s_e (ds_e - sum_j s_j ds_j)
      float sd = 0.0f;
      for (int e = 0; e < E; ++e) sd += s[e] * ds[e];
      for (int e = 0; e < E; ++e) ds[e] = s[e] * (ds[e] - sd);
    }
  }
}

void moe_count_expert_load(float* load, const int* expert_index, int N, int K) {
  for (size_t a = 0; a < static_cast<size_t>(N) * K; ++a) load[expert_index[a]] += 1.0f;
}

void moe_update_expert_bias(float* bias, const float* load, int E, float rate) {
  double mean = 0.0;
  for (int e = 0; e < E; ++e) mean += load[e];
  mean /= E;
  for (int e = 0; e < E; ++e) {
    const double gap = mean - load[e];
    bias[e] += gap > 0 ? rate : (gap < 0 ? -rate : 0.0f);
  }
}

}  // namespace cann::kernels
