// Mixture-of-experts routing: softmax gating, top-k, expert capacity with token dropping, the
// auxiliary load-balancing loss, and the dispatch/combine moves between tokens and expert
// buffers.
//
// Conventions (GShard, Lepikhin et al. 2020; Switch Transformer, Fedus et al. 2021):
// - probs = softmax(router logits) over all E experts; a token goes to its K most probable
//   experts and its gate for each is that probability (not renormalized over the K).
// - capacity = ceil(capacity_factor * N * K / E) tokens per expert. Slots are handed out to
//   every token's first choice (in token order), then every token's second choice, and so on;
//   an assignment finding its expert full is dropped (slot -1): that token's MoE output lacks
//   that expert's term and, when all K are dropped, only the residual carries it forward.
// - aux = E * sum_e f_e * P_e, where f_e is the share of all N*K assignments (before dropping)
//   that chose e, and P_e the mean router probability of e. It is 1 when routing is uniform.
//   The gradient flows through P_e only (f_e counts discrete choices).
#pragma once

namespace cann::kernels {

struct MoeShape {
  int N;         // tokens
  int E;         // experts
  int K;         // experts per token
  int capacity;  // slots per expert
};

int moe_capacity(int N, int E, int K, double capacity_factor);

// logits, probs are (N,E); expert_index, slot are (N,K) ints; gate is (N,K); expert_count (E)
// gets the kept tokens per expert; load_fraction (E) gets f_e. Returns aux (unscaled).
float moe_router_forward(float* probs, int* expert_index, float* gate, int* slot, int* expert_count,
                         float* load_fraction, const float* logits, const MoeShape& s);
// dlogits (N,E) is overwritten with the gradient from dgate (N,K) through the kept gates plus
// aux_grad * d(aux)/d(logits); aux_grad is the loss weight of aux (coefficient times upstream).
void moe_router_backward(float* dlogits, const float* dgate, const float* probs,
                         const int* expert_index, const int* slot, const float* load_fraction,
                         float aux_grad, const MoeShape& s);

// x is (N,C); xe is (E,capacity,C): xe[e][slot] = x[token] for every kept assignment.
// Slots beyond expert_count are left untouched.
void moe_dispatch(float* xe, const float* x, const int* expert_index, const int* slot,
                  const MoeShape& s, int C);
// dx (N,C) is overwritten: dx[token] = sum over its kept assignments of dxe[e][slot].
void moe_dispatch_backward(float* dx, const float* dxe, const int* expert_index, const int* slot,
                           const MoeShape& s, int C);
// out (N,C) is overwritten: out[token] = sum over kept assignments of gate * ye[e][slot].
void moe_combine(float* out, const float* ye, const float* gate, const int* expert_index,
                 const int* slot, const MoeShape& s, int C);
// dye[e][slot] = gate * dout[token] for kept slots (overwrite); dgate (N,K) is overwritten
// with <dout[token], ye[e][slot]>, 0 for dropped assignments.
void moe_combine_backward(float* dye, float* dgate, const float* dout, const float* ye,
                          const float* gate, const int* expert_index, const int* slot,
                          const MoeShape& s, int C);

}  // namespace cann::kernels
