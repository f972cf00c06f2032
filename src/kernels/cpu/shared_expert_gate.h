// Qwen2-MoE's gate on the shared expert (transformers, models/qwen2_moe/modeling_qwen2_moe.py,
// Qwen2MoeSparseMoeBlock.forward): each token's shared-expert output is scaled by
// sigmoid(x . g), one scalar per token from the MoE layer's input x and a (1,C) weight g, and
// added to the routed experts' output.
#pragma once

namespace cann::kernels {

// x, y, out are (N,C); g is (C); gate (N) gets sigmoid(x_n . g) (saved for backward).
// out += gate[n] * y[n] for each row n: out holds the routed output on entry.
void shared_expert_gate_forward(float* out, float* gate, const float* y, const float* x,
                                const float* g, int N, int C);
// dout, y, x are (N,C); gate is the forward's. dy (N,C) is overwritten with gate[n] * dout[n]
// (the gradient into the shared expert); dg (C) accumulates sum_n dz_n x_n and dx_add (N,C)
// gets dz_n * g added to each row (the gate's share of the input gradient, on top of the other
// paths'), where dz_n = gate_n (1 - gate_n) (dout_n . y_n) is the gradient of x_n . g.
void shared_expert_gate_backward(float* dy, float* dg, float* dx_add, const float* dout,
                                 const float* y, const float* x, const float* g, const float* gate,
                                 int N, int C);

}  // namespace cann::kernels
