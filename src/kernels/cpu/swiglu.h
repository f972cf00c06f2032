// SiLU and the gated feed-forward SwiGLU (Shazeer 2020) of Llama, Qwen, Mixtral and DeepSeek:
// h = silu(x W_gate) * (x W_up), silu(g) = g * sigmoid(g)
// (transformers, models/llama/modeling_llama.py, LlamaMLP.forward, with hidden_act "silu").
//
// Layout: the gate and up projections come from one (N,2F) buffer, each row [gate | up].
// That is what one GEMM against the stacked weight [W_gate; W_up] (2F rows) produces, and it
// is the order Hugging Face's fused expert weights use (gate_up_proj, chunked gate first), so
// one linear_forward feeds the kernel and one linear_backward takes its gradient.
#pragma once

#include <cstddef>

namespace cann::kernels {

// x, y are (n).
void silu_forward(float* y, const float* x, size_t n);
// dx (n) is overwritten with dy * silu'(x).
void silu_backward(float* dx, const float* x, const float* dy, size_t n);

// gate_up is (N,2F), rows [gate | up]; y is (N,F): y = silu(gate) * up.
void swiglu_forward(float* y, const float* gate_up, int N, int F);
// dgate_up (N,2F) is overwritten, rows [dgate | dup]; dy is (N,F).
void swiglu_backward(float* dgate_up, const float* dy, const float* gate_up, int N, int F);

}  // namespace cann::kernels
