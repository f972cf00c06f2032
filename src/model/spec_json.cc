// ModelSpec -> JSON: a config in the spec's own family's keys, which parse_model_spec reads
// back to the same spec (the tests check every shipped config and every family's sample).
// Checkpoints store it so a run records exactly which model it trained.
#include "model/spec_json.h"

#include "core/json_line.h"

namespace cann::model {
namespace {

bool own(Family f) {
  return f == Family::kGpt2 || f == Family::kBert || f == Family::kVit;
}
bool deepseek(Family f) {
  return f == Family::kDeepseekV2 || f == Family::kDeepseekV3;
}
bool qwen(Family f) {
  return f == Family::kQwen2 || f == Family::kQwen2Moe || f == Family::kQwen3 ||
         f == Family::kQwen3Moe;
}
bool qwen_moe(Family f) {
  return f == Family::kQwen2Moe || f == Family::kQwen3Moe;
}

std::string rope_json(const RopeSpec& r) {
  JsonLine j;
  switch (r.scaling) {
    case RopeScaling::kNone:
      j.add("rope_type", "default");
      break;
    case RopeScaling::kLinear:
      j.add("rope_type", "linear").add("factor", r.factor);
      break;
    case RopeScaling::kLlama3:
      j.add("rope_type", "llama3")
          .add("factor", r.factor)
          .add("low_freq_factor", r.low_freq_factor)
          .add("high_freq_factor", r.high_freq_factor)
          .add("original_max_position_embeddings", r.original_max_position);
      break;
    case RopeScaling::kYarn:
      j.add("rope_type", "yarn")
          .add("factor", r.factor)
          .add("beta_fast", r.beta_fast)
          .add("beta_slow", r.beta_slow)
          .add("mscale", r.mscale)
          .add("mscale_all_dim", r.mscale_all_dim)
          .add("truncate", r.truncate);
      if (r.original_max_position > 0)
        j.add("original_max_position_embeddings", r.original_max_position);
      if (r.attention_factor > 0) j.add("attention_factor", r.attention_factor);
      break;
  }
  return j.str();
}

void add_moe(const ModelSpec& s, JsonLine& j) {
  const Family f = s.family;
  j.add("num_local_experts", s.num_local_experts).add("num_experts_per_tok", s.num_experts_per_tok);
  if (f != Family::kMixtral) j.add("moe_intermediate_size", s.moe_intermediate_size);
  if (own(f)) j.add("moe_layer_freq", s.moe_layer_freq);
  if (s.routing == MoeRouting::kCapacity) {
    j.add("capacity_factor", s.capacity_factor);
  } else if (own(f)) {
    j.add("moe_routing", "dropless");
  }
  if (f == Family::kMixtral || qwen_moe(f)) {
    j.add("output_router_logits", s.router_aux_loss_coef > 0);
    if (s.router_aux_loss_coef > 0) j.add("router_aux_loss_coef", s.router_aux_loss_coef);
  } else {
    j.add("router_aux_loss_coef", s.router_aux_loss_coef);
  }
  if (qwen_moe(f) || deepseek(f)) j.add("norm_topk_prob", s.norm_topk_prob);
  if (qwen_moe(f)) {
    std::vector<int64_t> dense;
    for (int l = 0; l < s.num_hidden_layers; ++l)
      if (!s.is_moe_layer(l)) dense.push_back(l);
    j.add("decoder_sparse_step", 1).add("mlp_only_layers", dense);
  }
  if (f == Family::kQwen2Moe)
    j.add("shared_expert_intermediate_size", s.shared_expert_intermediate_size);
  if (deepseek(f)) {
    int first = 0;
    while (first < s.num_hidden_layers && !s.is_moe_layer(first)) ++first;
    j.add("first_k_dense_replace", first)
        .add("moe_layer_freq", s.moe_layer_freq)
        .add("n_shared_experts", s.num_shared_experts)
        .add("scoring_func", s.router_score == RouterScore::kSigmoid ? "sigmoid" : "softmax")
        .add("topk_method", s.topk_method == TopkMethod::kNoAuxTc        ? "noaux_tc"
                            : s.topk_method == TopkMethod::kGroupLimited ? "group_limited_greedy"
                                                                         : "greedy")
        .add("n_group", s.n_group)
        .add("topk_group", s.topk_group)
        .add("routed_scaling_factor", s.routed_scaling_factor)
        .add("seq_aux", s.aux_loss == AuxLoss::kSequence);
    // cann-train's own key, written only when it differs from the default.
    if (s.has_expert_bias() && s.expert_bias_update_speed != ModelSpec{}.expert_bias_update_speed)
      j.add("expert_bias_update_speed", s.expert_bias_update_speed);
  }
}

void add_attention(const ModelSpec& s, JsonLine& j) {
  const Family f = s.family;
  if (s.mla_enabled) {
    if (s.mla.q_lora_rank > 0) {
      j.add("q_lora_rank", s.mla.q_lora_rank);
    } else {
      j.add_raw("q_lora_rank", "null");
    }
    j.add("kv_lora_rank", s.mla.kv_lora_rank)
        .add("qk_nope_head_dim", s.mla.qk_nope_head_dim)
        .add("qk_rope_head_dim", s.mla.qk_rope_head_dim)
        .add("v_head_dim", s.mla.v_head_dim)
        .add("rope_interleave", s.rope.interleaved)
        .add("attention_bias", s.qkv_bias);
    return;
  }
  if (!own(f) && s.head_dim > 0) j.add("head_dim", s.head_dim);
  if (f == Family::kLlama || f == Family::kQwen3 || f == Family::kQwen3Moe)
    j.add("attention_bias", s.qkv_bias);
  if (f == Family::kQwen2Moe) j.add("qkv_bias", s.qkv_bias);
  if (f == Family::kLlama) j.add("mlp_bias", s.mlp_bias);
  if (!own(f) && !deepseek(f) && s.rope.partial_rotary_factor != 1.0)
    j.add("partial_rotary_factor", s.rope.partial_rotary_factor);
  if (f == Family::kMistral || f == Family::kMixtral) {
    if (s.window(0) > 0) {
      j.add("sliding_window", s.window(0));
    } else {
      j.add_raw("sliding_window", "null");
    }
  }
  if (qwen(f)) {
    int w = 0;
    std::string types = "[";
    for (int l = 0; l < s.num_hidden_layers; ++l) {
      if (s.window(l) > 0) w = s.window(l);
      types += std::string(l ? "," : "") +
               (s.window(l) > 0 ? "\"sliding_attention\"" : "\"full_attention\"");
    }
    j.add("use_sliding_window", w > 0);
    if (w > 0) j.add("sliding_window", w).add_raw("layer_types", types + "]");
  }
}

}  // namespace

std::string spec_to_json(const ModelSpec& s) {
  JsonLine j;
  const Family f = s.family;
  if (own(f)) {
    j.add("architecture", architecture_name(s.architecture));
  } else {
    j.add("model_type", family_name(f));
  }
  j.add("hidden_size", s.hidden_size)
      .add("num_hidden_layers", s.num_hidden_layers)
      .add("num_attention_heads", s.num_attention_heads)
      .add("num_key_value_heads", s.num_key_value_heads)
      .add("intermediate_size", s.intermediate_size);
  if (s.architecture == Architecture::kVit) {
    j.add("image_size", s.image_size)
        .add("patch_size", s.patch_size)
        .add("num_channels", s.num_channels)
        .add("num_classes", s.num_classes);
  } else {
    j.add("vocab_size", s.vocab_size)
        .add("seq_length", s.seq_length)
        .add("max_position_embeddings", s.max_position_embeddings)
        .add("tie_word_embeddings", s.tie_word_embeddings);
  }
  if (!own(f)) {
    j.add("hidden_act", "silu").add("rms_norm_eps", s.norm_eps).add("rope_theta", s.rope.theta);
    if (s.rope.scaling != RopeScaling::kNone) j.add_raw("rope_scaling", rope_json(s.rope));
  } else {
    j.add("layer_norm_epsilon", s.norm_eps);
  }
  if (s.attention_dropout > 0) j.add("attention_dropout", s.attention_dropout);
  if (s.hidden_dropout > 0) j.add("hidden_dropout", s.hidden_dropout);
  add_attention(s, j);
  if (s.is_moe()) add_moe(s, j);
  // A dense DeepSeek says so: the family's defaults are 256 routed experts (V3) after 3 dense
  // layers, which a reader would otherwise take.
  if (deepseek(f) && !s.is_moe())
    j.add("n_routed_experts", 0).add("first_k_dense_replace", s.num_hidden_layers);
  if (deepseek(f)) j.add("num_nextn_predict_layers", s.num_nextn_predict_layers);
  return j.str();
}

}  // namespace cann::model
