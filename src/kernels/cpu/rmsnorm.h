// Root-mean-square layer normalization (Zhang & Sennrich 2019), as Llama, Qwen, Mixtral and
// DeepSeek use it: y = x / sqrt(mean(x^2) + eps) * w, no mean subtraction and no bias
// (transformers, models/llama/modeling_llama.py, LlamaRMSNorm.forward). The same kernel serves
// the block norms over rows of C, Qwen3's per-head QK-norm over rows of head_dim (N*NH rows),
// and DeepSeek's q_a/kv_a latent norms over rows of the LoRA rank.
#pragma once

namespace cann::kernels {

// x is (N,C); w is (C); y is (N,C); rstd (N) gets 1/sqrt(mean(x^2) + eps) for backward.
// eps is the config's rms_norm_eps (1e-6 for Llama 3, Qwen and DeepSeek; 1e-5 for Mixtral).
void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int N, int C,
                     float eps);
// dx (N,C) is overwritten; dw (C) accumulates.
void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                      const float* rstd, int N, int C);

}  // namespace cann::kernels
