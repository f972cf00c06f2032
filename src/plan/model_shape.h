// ModelShape: the parameter counts and model FLOPs the planner needs, per building block,
// derived from a ModelSpec. For language models the counts are those of the tensors
// build_param_table lays out, which are the Hugging Face implementation's for today's
// families (the tests check the sums); vit, which the trainer does not build, is counted here:
// patch embedding (a c*p*p -> h projection with bias), class token, position table, encoder
// layers, final layernorm and a classifier head (Dosovitskiy et al. 2021, section 3.1).
#pragma once

#include "model/spec.h"

namespace cann::plan {

struct ModelShape {
  // One encoder/decoder layer, split the way tensor parallelism treats it.
  double attention_params = 0;      // attention projections (QKV/MLA) and output, with biases
  double dense_mlp_params = 0;      // a dense layer's MLP
  double expert_params = 0;         // one routed expert
  double shared_expert_params = 0;  // the shared experts of one MoE layer (and their gate)
  double router_params = 0;         // E x h
  double norm_params = 0;           // a layer's norms (and QK / latent norms)
  // Outside the layers.
  double embedding_params = 0;  // token (or patch) embedding + position table (+ class token)
  double head_params = 0;       // a separate output head or classifier; 0 when tied
  double final_norm_params = 0;
  double vocab_or_classes = 0;  // output width of the head GEMM
  bool tied_head = true;        // the head reuses the token embedding

  double total_params = 0;  // the model proper (Hugging Face's count for its families)
  // DeepSeek-V3's multi-token prediction modules (DeepSeek-AI 2024, section 2.2), trained with
  // the model and priced on its last pipeline stage; not in total_params. Each: a block of the
  // model's last kind, a 2h -> h projection and three RMSNorms; embedding and head shared.
  double mtp_params = 0;
  double active_params_per_token = 0;  // matmul parameters a token passes through
  // Model FLOPs per token in the PaLM convention (Chowdhery et al. 2022, appendix B):
  // 6 * matmul parameters a token passes through + the attention scores and values
  // (model/flops.h), plus the multi-token prediction modules. Counts no recomputation and no
  // capacity-factor padding; for vit the patch projection counts and the classifier is spread
  // over the image's tokens.
  double flops_per_token = 0;
};

ModelShape model_shape(const model::ModelSpec& m);

// Parameters one device holds of layer `layer` under tensor parallelism tp and expert
// parallelism ep, from the layer's own parameter table: the non-expert part and this rank's
// routed experts. The planner's one copy of what a layer weighs.
struct LayerParams {
  double params = 0;
  double expert_params = 0;
};
LayerParams layer_params(const model::ModelSpec& m, int layer, int tp, int ep);

}  // namespace cann::plan
