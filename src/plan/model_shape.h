// ModelShape: the parameter counts and model FLOPs the planner needs, per building block,
// derived from a ModelSpec. For gpt and bert the counts equal what build_param_table lays out
// (the tests check the sums match); vit, which the trainer does not build, is counted here:
// patch embedding (a c*p*p -> h projection with bias), class token, position table, encoder
// layers, final layernorm and a classifier head (Dosovitskiy et al. 2021, section 3.1).
#pragma once

#include "model/spec.h"

namespace cann::plan {

struct ModelShape {
  // One encoder/decoder layer, split the way tensor parallelism treats it.
  double attention_params = 0;  // QKV + output projection, weights and biases
  double dense_mlp_params = 0;  // fc + proj, weights and biases
  double expert_params = 0;     // one expert's fc + proj
  double router_params = 0;     // E x h
  double norm_params = 0;       // two layernorms (weight and bias)
  // Outside the layers.
  double embedding_params = 0;  // token (or patch) embedding + position table (+ class token)
  double head_params = 0;       // a separate classifier (vit); 0 when tied to the embedding
  double final_norm_params = 0;
  double vocab_or_classes = 0;  // output width of the head GEMM
  bool tied_head = true;        // gpt/bert reuse the token embedding as the head

  double total_params = 0;
  double active_params_per_token = 0;  // matmul parameters a token passes through
  // Model FLOPs per token in the PaLM convention (Chowdhery et al. 2022, appendix B):
  // 6 * matmul parameters a token passes through + 12 * layers * hidden * seq_len. Counts no
  // recomputation and no capacity-factor padding; for vit the patch projection counts and the
  // classifier is spread over the image's tokens.
  double flops_per_token = 0;
};

ModelShape model_shape(const model::ModelSpec& m);

}  // namespace cann::plan
