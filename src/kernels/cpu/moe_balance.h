// Auxiliary balance losses for the routers of kernels/cpu/moe_routing, as functions of the
// saved scores (N,E) and the chosen experts (N,K). Their backward gives d(loss)/d(scores),
// which moe_route_backward takes as its dscores. The counts f are of discrete choices, so no
// gradient flows through them (as in every reference implementation).
#pragma once

namespace cann::kernels {

// DeepSeek-V3's complementary sequence-wise balance loss (DeepSeek-V3 report, eq. 17-20), for
// B sequences of T tokens (N = B*T rows, sequence-major):
//   f_e = E / (K T) * #{t : e chosen by token t}
//   P_e = 1/T * sum_t s'_te,   s'_te = s_te / sum_j s_tj   (scores normalized per token)
//   L_b = sum_e f_e P_e,  and the result is the mean of L_b over the B sequences (the batch
//   mean of DeepSeek-V2's seq_aux loss in its MoEGate.forward).
// Returned unscaled: the model adds alpha * L. L is 1 when both f and P are uniform.
float moe_seq_balance_loss(const float* scores, const int* expert_index, int B, int T, int E,
                           int K);
// dscores (N,E) is overwritten with coef * dL/dscores; coef is alpha times the upstream scale.
void moe_seq_balance_loss_backward(float* dscores, const float* scores, const int* expert_index,
                                   int B, int T, int E, int K, float coef);

// The Switch/Mixtral load-balancing loss (Fedus et al. 2021, eq. 4-6) in Hugging Face's
// normalization (transformers, models/mixtral/modeling_mixtral.py, load_balancing_loss_func;
// Qwen2-MoE and Qwen3-MoE use the same function), without padding mask:
//   L = E * sum_e (c_e / N) * (1/N sum_n p_ne),  c_e = assignments to e among the N*K.
// That is K times the aux of kernels/cpu/moe (whose f_e divides by N*K), so the engine's
// existing loss cannot stand in for it with the same router_aux_loss_coef. HF computes it once
// over the router logits of all layers concatenated (one sum over L*N rows, not a sum of
// per-layer losses): pass all layers' rows stacked to reproduce it. probs (N,E) are the
// softmax scores.
float moe_switch_balance_loss(const float* probs, const int* expert_index, int N, int E, int K);
// dprobs (N,E) is overwritten with coef * dL/dprobs = coef * E * c_e / N^2 (the same row for
// every token).
void moe_switch_balance_loss_backward(float* dprobs, const int* expert_index, int N, int E, int K,
                                      float coef);

}  // namespace cann::kernels
