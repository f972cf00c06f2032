// The models the engine-memory tests hold the planner's arena and parameter buffer to, byte
// for byte (plan_engine_memory_test.cc, plan_engine_memory_moe_test.cc), and the spec helpers
// they share.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/spec.h"
#include "plan/strategy.h"

namespace cann::plan::engine_test {

inline model::ModelSpec spec_from(const std::string& yaml) {
  auto s = model::parse_model_spec(yaml, "test.yaml");
  EXPECT_TRUE(s.ok()) << s.status().message();
  return *s;
}

inline model::ModelSpec shipped(const std::string& name) {
  auto s = model::load_model_spec(name);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return *s;
}

// Shipped tiny models and hand-made ones whose sizes are not multiples of 16, so the arena's
// rounding and the parameter table's padding both show: grouped-query attention, bert, MoE on
// every second layer with top-2 routing, and a dense DeepSeek (multi-head latent attention with
// its low-rank query, SwiGLU MLPs); then every shipped family's tiny config and the families'
// MoE layers: Qwen2-MoE's gated shared expert beside dropless experts after a dense first
// layer, Mixtral's SwiGLU experts under capacity routing, DeepSeek-V3's sigmoid scores with
// group-limited noaux_tc selection (its bias), two shared experts, the sequence-wise loss and
// no low-rank query, DeepSeek-V2's group-limited greedy top-k under capacity routing, and
// Qwen3-MoE's QK-norm with a head_dim apart from hidden/heads and a dense middle layer,
// and a dense Qwen3 (QK-norm alone, for the layouts MoE cannot take).
inline std::vector<model::ModelSpec> models() {
  return {shipped("gpt_tiny"),
          shipped("moe_bert_tiny"),
          spec_from("architecture: gpt\nhidden_size: 36\nnum_hidden_layers: 3\n"
                    "num_attention_heads: 6\nnum_key_value_heads: 2\nintermediate_size: 50\n"
                    "vocab_size: 77\nseq_length: 40\n"),
          spec_from("architecture: bert\nhidden_size: 24\nnum_hidden_layers: 2\n"
                    "num_attention_heads: 3\nvocab_size: 61\nseq_length: 33\n"),
          spec_from("architecture: gpt\nhidden_size: 20\nnum_hidden_layers: 4\n"
                    "num_attention_heads: 4\nvocab_size: 45\nseq_length: 24\n"
                    "num_local_experts: 3\nnum_experts_per_tok: 2\nmoe_layer_freq: 2\n"
                    "moe_intermediate_size: 28\ncapacity_factor: 1.1\n"),
          spec_from("model_type: deepseek_v3\nhidden_size: 20\nnum_hidden_layers: 2\n"
                    "num_attention_heads: 2\nq_lora_rank: 9\nkv_lora_rank: 7\n"
                    "qk_nope_head_dim: 3\nqk_rope_head_dim: 4\nv_head_dim: 5\n"
                    "intermediate_size: 22\nvocab_size: 45\nmax_position_embeddings: 24\n"
                    "seq_length: 24\nn_routed_experts: 0\nfirst_k_dense_replace: 2\n"
                    "num_nextn_predict_layers: 0\n"),
          shipped("llama_tiny"),
          shipped("qwen3_moe_tiny"),
          shipped("deepseek_tiny"),
          spec_from("model_type: qwen2_moe\nhidden_size: 24\nnum_hidden_layers: 3\n"
                    "num_attention_heads: 4\nnum_key_value_heads: 2\nintermediate_size: 26\n"
                    "moe_intermediate_size: 11\nshared_expert_intermediate_size: 14\n"
                    "num_experts: 5\nnum_experts_per_tok: 2\nmlp_only_layers: [0]\n"
                    "output_router_logits: true\nvocab_size: 45\n"
                    "max_position_embeddings: 24\nseq_length: 24\n"),
          spec_from("model_type: mixtral\nhidden_size: 24\nnum_hidden_layers: 2\n"
                    "num_attention_heads: 4\nnum_key_value_heads: 2\nintermediate_size: 18\n"
                    "num_local_experts: 3\nnum_experts_per_tok: 2\ncapacity_factor: 1.1\n"
                    "output_router_logits: true\nvocab_size: 45\n"
                    "max_position_embeddings: 24\nseq_length: 24\n"),
          spec_from("model_type: deepseek_v3\nhidden_size: 20\nnum_hidden_layers: 3\n"
                    "num_attention_heads: 2\nq_lora_rank: null\nkv_lora_rank: 7\n"
                    "qk_nope_head_dim: 3\nqk_rope_head_dim: 4\nv_head_dim: 5\n"
                    "intermediate_size: 22\nmoe_intermediate_size: 9\nn_routed_experts: 6\n"
                    "n_shared_experts: 2\nnum_experts_per_tok: 2\nn_group: 3\ntopk_group: 2\n"
                    "topk_method: noaux_tc\nscoring_func: sigmoid\nnorm_topk_prob: true\n"
                    "routed_scaling_factor: 2.5\nseq_aux: true\nfirst_k_dense_replace: 1\n"
                    "num_nextn_predict_layers: 0\nvocab_size: 45\n"
                    "max_position_embeddings: 24\nseq_length: 24\n"),
          spec_from("model_type: deepseek_v2\nhidden_size: 20\nnum_hidden_layers: 2\n"
                    "num_attention_heads: 2\nq_lora_rank: 9\nkv_lora_rank: 7\n"
                    "qk_nope_head_dim: 3\nqk_rope_head_dim: 4\nv_head_dim: 5\n"
                    "intermediate_size: 22\nmoe_intermediate_size: 11\nn_routed_experts: 4\n"
                    "n_shared_experts: 2\nnum_experts_per_tok: 2\nn_group: 2\ntopk_group: 1\n"
                    "topk_method: group_limited_greedy\ncapacity_factor: 1.3\n"
                    "first_k_dense_replace: 0\nvocab_size: 45\n"
                    "max_position_embeddings: 24\nseq_length: 24\n"),
          spec_from("model_type: qwen3_moe\nhidden_size: 20\nnum_hidden_layers: 3\n"
                    "num_attention_heads: 4\nnum_key_value_heads: 2\nhead_dim: 10\n"
                    "intermediate_size: 30\nmoe_intermediate_size: 13\nnum_experts: 4\n"
                    "num_experts_per_tok: 3\nmlp_only_layers: [1]\nnorm_topk_prob: true\n"
                    "vocab_size: 45\nmax_position_embeddings: 24\nseq_length: 24\n"),
          spec_from("model_type: qwen3\nhidden_size: 20\nnum_hidden_layers: 2\n"
                    "num_attention_heads: 4\nnum_key_value_heads: 2\nhead_dim: 6\n"
                    "intermediate_size: 14\nvocab_size: 45\nmax_position_embeddings: 24\n"
                    "seq_length: 24\n")};
}

inline Strategy data_parallel(int dp, int zero) {
  Strategy s;
  s.dp = dp;
  s.zero = zero;
  s.gbs = 0;  // one micro-batch per step
  return s;
}

// The MoE ones of models().
inline std::vector<model::ModelSpec> moe_models() {
  std::vector<model::ModelSpec> out;
  for (model::ModelSpec& m : models())
    if (m.is_moe()) out.push_back(std::move(m));
  return out;
}

}  // namespace cann::plan::engine_test
