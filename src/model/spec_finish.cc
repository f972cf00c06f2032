// Family defaults and the keys settled after reading (see spec_keys.h): which layers are MoE
// layers, which attend through a sliding window, how wide the shared experts are, whether the
// router's auxiliary loss is trained, and the multi-head latent attention dimensions.
//
// Defaults are the Hugging Face configuration classes' own (transformers, configuration_<family>
// .py): a config.json that omits a key means what Hugging Face would build from it.
#include <algorithm>
#include <set>

#include "model/spec_keys.h"

namespace cann::model::spec_keys {
namespace {

bool is_own(Family f) {
  return f == Family::kGpt2 || f == Family::kBert || f == Family::kVit;
}
bool is_qwen(Family f) {
  return f == Family::kQwen2 || f == Family::kQwen2Moe || f == Family::kQwen3 ||
         f == Family::kQwen3Moe;
}
bool is_deepseek(Family f) {
  return f == Family::kDeepseekV2 || f == Family::kDeepseekV3;
}

// Today's decoder blocks: pre-norm RMSNorm, rotary positions, SwiGLU, no biases, untied head.
void hf_decoder(ModelSpec* s) {
  s->mlp = MlpKind::kSwiGlu;
  s->norm = NormKind::kRmsNorm;
  s->norm_eps = 1e-6;
  s->positions = PositionKind::kRotary;
  s->rope = RopeSpec{};
  s->tie_word_embeddings = false;
  s->qkv_bias = s->o_bias = s->mlp_bias = false;
  s->router_aux_loss_coef = 0.001;
  s->routing = MoeRouting::kDropless;
}

}  // namespace

void apply_family_defaults(Family f, ModelSpec* s) {
  s->family = f;
  if (is_own(f)) return;  // ModelSpec's own defaults are the GPT-2-style blocks
  hf_decoder(s);
  s->architecture = Architecture::kGpt;
  switch (f) {
    case Family::kLlama:
      s->intermediate_size = 11008;
      s->max_position_embeddings = 2048;
      break;
    case Family::kMistral:
      s->intermediate_size = 14336;
      s->max_position_embeddings = 4096 * 32;
      break;
    case Family::kMixtral:
      s->intermediate_size = 14336;
      s->max_position_embeddings = 4096 * 32;
      s->norm_eps = 1e-5;
      s->rope.theta = 1e6;
      s->num_local_experts = 8;
      s->num_experts_per_tok = 2;
      s->norm_topk_prob = true;  // Mixtral always renormalizes the chosen two
      break;
    case Family::kQwen2:
      s->intermediate_size = 22016;
      s->max_position_embeddings = 32768;
      s->qkv_bias = true;  // Qwen2's q, k, v projections always carry a bias
      break;
    case Family::kQwen2Moe:
      s->intermediate_size = 5632;
      s->max_position_embeddings = 32768;
      s->qkv_bias = true;
      s->num_local_experts = 60;
      s->num_experts_per_tok = 4;
      s->moe_intermediate_size = 1408;
      break;
    case Family::kQwen3:
      s->intermediate_size = 22016;
      s->max_position_embeddings = 32768;
      s->head_dim = 128;
      s->qk_norm = true;
      break;
    case Family::kQwen3Moe:
      s->intermediate_size = 6144;
      s->max_position_embeddings = 32768;
      s->qk_norm = true;
      s->num_local_experts = 128;
      s->num_experts_per_tok = 8;
      s->moe_intermediate_size = 768;
      break;
    case Family::kDeepseekV2:
    case Family::kDeepseekV3: {
      const bool v3 = f == Family::kDeepseekV3;
      s->mla_enabled = true;
      s->mla = MlaSpec{1536, 512, 128, 64, 128};
      s->rope.interleaved = true;  // the released weights' rotary pairs are (2i, 2i+1)
      s->intermediate_size = v3 ? 18432 : 11008;
      s->max_position_embeddings = v3 ? 4096 : 2048;
      s->moe_intermediate_size = v3 ? 2048 : 1407;
      s->num_local_experts = v3 ? 256 : 0;
      s->num_experts_per_tok = v3 ? 8 : 1;
      s->norm_topk_prob = v3;
      s->routed_scaling_factor = v3 ? 2.5 : 1.0;
      s->router_score = v3 ? RouterScore::kSigmoid : RouterScore::kSoftmax;
      s->topk_method = v3 ? TopkMethod::kNoAuxTc : TopkMethod::kGreedy;
      s->n_group = v3 ? 8 : 1;
      s->topk_group = v3 ? 4 : 1;
      s->aux_loss = AuxLoss::kSequence;
      break;
    }
    default:
      break;
  }
}

Status finish_draft(SpecDraft* d) {
  ModelSpec& s = d->spec;
  const std::string& src = s.source;
  const Family f = s.family;
  auto given = [&](const char* key) { return d->present.count(key) > 0; };
  const int L = s.num_hidden_layers;

  if (!given("num_key_value_heads")) s.num_key_value_heads = s.num_attention_heads;
  if (is_own(f) && !given("intermediate_size")) s.intermediate_size = 4 * s.hidden_size;

  // Positions and the training sequence. GPT-2 and BERT configs name one length (n_positions
  // or seq_length): the position table and the sequence are the same unless both are given.
  if (s.architecture == Architecture::kVit) {
    if (!given("seq_length") && s.patch_size > 0)
      s.seq_length = (s.image_size / s.patch_size) * (s.image_size / s.patch_size) + 1;
  } else if (is_own(f)) {
    if (given("seq_length") && !given("max_position_embeddings"))
      s.max_position_embeddings = s.seq_length;
    if (given("max_position_embeddings") && !given("seq_length"))
      s.seq_length = s.max_position_embeddings;
  } else if (!given("seq_length")) {
    s.seq_length = s.max_position_embeddings;
  }

  // Multi-head latent attention.
  if (is_deepseek(f)) {
    if (d->q_lora_null) s.mla.q_lora_rank = 0;
    if (d->head_dim_deepseek && *d->head_dim_deepseek != s.mla.qk_rope_head_dim)
      return spec_error(src, "head_dim",
                        "DeepSeek's head_dim is its rotary part qk_rope_head_dim (" +
                            std::to_string(s.mla.qk_rope_head_dim) + "), got " +
                            std::to_string(static_cast<long long>(*d->head_dim_deepseek)));
    // Rotary positions apply to the qk_rope_head_dim part of each query/key head.
    s.rope.partial_rotary_factor =
        static_cast<double>(s.mla.qk_rope_head_dim) / std::max(1, s.mla.qk_head_dim());
  }

  // Which layers are MoE layers.
  s.moe_layers.clear();
  if (s.num_local_experts > 0) {
    s.moe_layers.assign(std::max(L, 0), 0);
    std::set<int> mlp_only;
    if (d->mlp_only_layers)
      for (int l : *d->mlp_only_layers) {
        if (l >= L)
          return spec_error(
              src, "mlp_only_layers",
              "layer " + std::to_string(l) + " is beyond num_hidden_layers " + std::to_string(L));
        mlp_only.insert(l);
      }
    const int step = d->decoder_sparse_step.value_or(1);
    const int first_dense = d->first_k_dense_replace.value_or(f == Family::kDeepseekV3 ? 3 : 0);
    if (first_dense > L)
      return spec_error(src, "first_k_dense_replace",
                        std::to_string(first_dense) + " dense layers exceed num_hidden_layers " +
                            std::to_string(L));
    for (int l = 0; l < L; ++l) {
      bool moe = true;
      if (is_own(f)) moe = s.moe_layer_freq > 0 && (l + 1) % s.moe_layer_freq == 0;
      if (f == Family::kQwen2Moe || f == Family::kQwen3Moe)
        moe = !mlp_only.count(l) && (l + 1) % step == 0;
      // DeepSeek's own modeling code: layer_idx >= first_k_dense_replace and
      // layer_idx % moe_layer_freq == 0 (every released config has moe_layer_freq 1).
      if (is_deepseek(f)) moe = l >= first_dense && l % s.moe_layer_freq == 0;
      s.moe_layers[l] = moe ? 1 : 0;
    }
    if (f == Family::kMixtral) s.moe_intermediate_size = s.intermediate_size;
    if (is_own(f) && !given("moe_intermediate_size")) s.moe_intermediate_size = s.intermediate_size;
  }

  // Shared experts.
  if (is_deepseek(f)) {
    const int n = d->n_shared_experts.value_or(f == Family::kDeepseekV3 ? 1 : 0);
    s.num_shared_experts = s.is_moe() ? n : 0;
    s.shared_expert_intermediate_size = s.num_shared_experts * s.moe_intermediate_size;
  }
  if (f == Family::kQwen2Moe) {
    const int width = d->shared_expert_intermediate_size.value_or(5632);
    s.num_shared_experts = s.is_moe() && width > 0 ? 1 : 0;
    s.shared_expert_intermediate_size = s.num_shared_experts ? width : 0;
    s.shared_expert_gate = s.num_shared_experts > 0;
  }

  // The selection bias moves only under noaux_tc: a speed without it would change nothing.
  if (given("expert_bias_update_speed") && !s.has_expert_bias())
    return spec_error(src, "expert_bias_update_speed",
                      "is the noaux_tc router's bias update speed, and this MoE spec does not "
                      "route with noaux_tc; hint: set topk_method: noaux_tc or drop the key");

  // Hugging Face's Mixtral and Qwen MoE models add the balancing loss to the training loss
  // only when output_router_logits is true (default false).
  if ((f == Family::kMixtral || f == Family::kQwen2Moe || f == Family::kQwen3Moe) &&
      !d->output_router_logits.value_or(false))
    s.router_aux_loss_coef = 0;

  // Sliding-window attention.
  s.attention_window.clear();
  if (f == Family::kMistral || f == Family::kMixtral) {
    const int w = d->sliding_window.value_or(f == Family::kMistral ? 4096 : 0);
    if (w > 0) s.attention_window.assign(L, w);
  }
  if (is_qwen(f)) {
    const bool use = d->use_sliding_window.value_or(false);
    const int w = d->sliding_window.value_or(4096);
    if (d->layer_types) {
      if (static_cast<int>(d->layer_types->size()) != L)
        return spec_error(src, "layer_types",
                          std::to_string(d->layer_types->size()) +
                              " entries for num_hidden_layers " + std::to_string(L));
      const bool any =
          std::count(d->layer_types->begin(), d->layer_types->end(), "sliding_attention") > 0;
      if (any && (!use || w <= 0))
        return spec_error(src, "layer_types",
                          "marks sliding_attention layers but use_sliding_window is false or "
                          "sliding_window is null; hint: set both, or mark every layer "
                          "full_attention");
      if (any) {
        s.attention_window.assign(L, 0);
        for (int l = 0; l < L; ++l)
          if ((*d->layer_types)[l] == "sliding_attention") s.attention_window[l] = w;
      }
    } else if (use) {
      // Which layers slide under use_sliding_window has changed between transformers releases
      // (layers from max_window_layers on, later every other layer below it): not a guess to
      // make for a user.
      return spec_error(src, "use_sliding_window",
                        "true without layer_types: which layers slide differs between "
                        "transformers versions; hint: list every layer in layer_types");
    }
  }
  return OkStatus();
}

}  // namespace cann::model::spec_keys
