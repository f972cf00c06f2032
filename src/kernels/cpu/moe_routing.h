// Router variants of today's mixture-of-experts families, over (N,E) router logits: scores by
// softmax or sigmoid, group-limited top-k, an optional per-expert selection bias, combine
// weights normalized over the chosen experts and scaled; their backward to the logits; and
// DeepSeek-V3's auxiliary-loss-free bias update. The balance losses are in moe_balance.h.
// (kernels/cpu/moe keeps the GPT-2-style softmax router, which also hands out capacity
// slots; these functions stop at expert ids and combine weights, and the layer that uses them
// assigns slots, with a capacity or dropless.)
//
// Per token: s = softmax(l) or sigmoid(l); c = s + bias (the bias chooses, never weighs);
// with groups, rank the n_group groups of E/n_group consecutive experts by their best c
// (kMaxScore) or the sum of their two best c (kTopTwoSum; a one-expert group counts its one)
// and keep topk_group of them; take the K largest c among the kept experts; their weights are
// s (not c), divided by their sum (+1e-20) when normalizing, times routed_scaling_factor.
//
// The families, from their config.json (transformers modeling files; DeepSeek-V3
// inference/model.py, Gate.forward):
//   Mixtral (MixtralSparseMoeBlock): softmax, always normalized (norm_topk_prob true), scale 1.
//   Qwen2-MoE, Qwen3-MoE (Qwen*MoeSparseMoeBlock): softmax, norm_topk_prob from the config
//     (Qwen3 true), scale 1.
//   DeepSeek-V2 (MoEGate, topk_method group_limited_greedy): softmax, kMaxScore groups; it
//     normalizes when K > 1 and norm_topk_prob, and applies routed_scaling_factor only when it
//     does not normalize: pass scale 1 in the first case. topk_method greedy: n_group 1.
//   DeepSeek-V3 (noaux_tc): sigmoid, bias = e_score_correction_bias, kTopTwoSum groups,
//     norm_topk_prob true, scale routed_scaling_factor (2.5).
//
// Ties. torch.topk does not promise an order among equal values, so Hugging Face leaves ties
// to the device. Here every ranking (groups and experts) breaks ties towards the lower index,
// and expert_index lists a token's experts by descending c. Exact ties need equal floats:
// sigmoid saturating to 1.0, or experts masked to the same value.
//
// Masked groups. DeepSeek's own code excludes experts of dropped groups (-inf); HF's
// deepseek_v3 (and DeepSeek-V2's modeling_deepseek.py) set their scores to 0.0 instead, which
// could pick a dropped expert over a kept one whose biased score is negative. Here dropped
// experts are never chosen (DeepSeek's rule); the two agree whenever K kept experts have c > 0.
#pragma once

#include "core/status.h"

namespace cann::kernels {

enum class RouterScore { kSoftmax, kSigmoid };
enum class GroupRanking { kMaxScore, kTopTwoSum };

struct RouterConfig {
  int E = 0;  // routed experts
  int K = 0;  // experts per token
  RouterScore score = RouterScore::kSoftmax;
  bool norm_topk_prob = false;
  float routed_scaling_factor = 1.0f;
  int n_group = 1;  // 1: no group limit
  int topk_group = 1;
  GroupRanking group_ranking = GroupRanking::kMaxScore;
};

// InvalidArgument (with a hint) unless 1 <= K <= E, n_group divides E, 1 <= topk_group <=
// n_group and the kept groups hold at least K experts.
Status check_router_config(const RouterConfig& c);

// logits (N,E); bias (E) or null. scores (N,E) gets s (saved for backward and the balance
// losses); expert_index (N,K) the chosen experts, best first; weight (N,K) their combine
// weights.
void moe_route_forward(float* scores, int* expert_index, float* weight, const float* logits,
                       const float* bias, const RouterConfig& c, int N);
// dlogits (N,E) is overwritten with the gradient through the combine weights (dweight is
// (N,K)), for the routing made in the forward, plus dscores (N,E; null for none): gradient
// reaching the scores directly, from a balance loss. dscores may be dlogits itself.
void moe_route_backward(float* dlogits, const float* dweight, const float* dscores,
                        const float* scores, const int* expert_index, const RouterConfig& c, int N);

// load (E) accumulates the number of assignments to each expert in expert_index (N,K).
void moe_count_expert_load(float* load, const int* expert_index, int N, int K);
// Auxiliary-loss-free balancing (DeepSeek-AI 2024, DeepSeek-V3 report, section 2.1.2): after
// each step, bias_e += rate * sign(mean(load) - load_e): an overloaded expert's bias falls by
// rate, an underloaded one's rises, an expert exactly at the mean keeps its bias. load (E) is
// the step's assignment count over all micro-batches and data-parallel ranks (the caller sums
// them); the report uses rate 0.001.
void moe_update_expert_bias(float* bias, const float* load, int E, float rate);

}  // namespace cann::kernels
