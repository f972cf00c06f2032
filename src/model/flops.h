// Model FLOPs per token, in the convention of PaLM (Chowdhery et al. 2022, appendix B):
// 6 * (matmul parameters a token passes through) + the attention scores and values, counting
// forward and backward, full (unmasked) attention, and no recomputation. For MoE layers only
// the num_experts_per_tok routed experts a token visits count (plus the router and shared
// experts). This is the figure behind "achieved GFLOP/s" and MFU everywhere in cann-train.
// DeepSeek-V3's multi-token prediction modules are not part of it (plan/model_shape.h adds
// them for the planner).
#pragma once

#include "model/spec.h"

namespace cann::model {

// Matmul parameters of one layer's attention block (QKV and output, or MLA's projections).
double attention_matmul_params(const ModelSpec& s);
// Of one dense MLP; of the MoE block per token (K routed experts, router, shared experts).
double dense_mlp_matmul_params(const ModelSpec& s);
double moe_matmul_params_per_token(const ModelSpec& s);
// Matmul parameters one token passes through: every layer's attention, its MLP or K experts
// plus the router and shared experts, and the output head (tied or not, it is a V x C
// matmul). Embedding lookups and norms are not matmuls and do not count.
double active_matmul_params(const ModelSpec& s);
// Attention scores and values of one layer, per token, forward and backward.
double attention_flops_per_token(const ModelSpec& s, int layer, int seq_len);
double train_flops_per_token(const ModelSpec& s, int seq_len);

}  // namespace cann::model
