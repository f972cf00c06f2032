// The key table of the model spec (see spec_keys.h). Each row: the canonical key, its aliases,
// the families whose configs carry it, and what it sets; or, for an ignored key, why it cannot
// change the mathematics or the cost. A key of another family is refused rather than ignored
// (a Llama config with first_k_dense_replace is not a Llama).
//
// Sources of the families' keys and defaults: the Hugging Face transformers configuration
// classes (LlamaConfig, MistralConfig, MixtralConfig, Qwen2Config, Qwen2MoeConfig,
// Qwen3Config, Qwen3MoeConfig, DeepseekV2Config, DeepseekV3Config) and the released
// config.json files of the models they describe.
#include "model/spec_keys.h"

#include "model/custom_op.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>

#include "model/spec_values.h"

namespace cann::model::spec_keys {
namespace {

constexpr unsigned bit(Family f) {
  return 1u << static_cast<unsigned>(f);
}
constexpr unsigned kOwn = bit(Family::kGpt2) | bit(Family::kBert) | bit(Family::kVit);
constexpr unsigned kOwnLm = bit(Family::kGpt2) | bit(Family::kBert);
constexpr unsigned kMixtral = bit(Family::kMixtral);
constexpr unsigned kMistral = bit(Family::kMistral) | kMixtral;
constexpr unsigned kQwenMoe = bit(Family::kQwen2Moe) | bit(Family::kQwen3Moe);
constexpr unsigned kQwen = bit(Family::kQwen2) | bit(Family::kQwen3) | kQwenMoe;
constexpr unsigned kDeepseek = bit(Family::kDeepseekV2) | bit(Family::kDeepseekV3);
constexpr unsigned kHf = bit(Family::kLlama) | kMistral | kQwen | kDeepseek;
constexpr unsigned kLm = kOwnLm | kHf;
constexpr unsigned kAll = kOwn | kHf;
constexpr unsigned kOwnMoe = kOwn;  // cann-train's GPT-2-style experts
constexpr unsigned kMoe = kOwnMoe | kMixtral | kQwenMoe | kDeepseek;

using Reader = Status (*)(const YAML::Node&, const KeyRef&, SpecDraft*);

struct Rule {
  const char* key;
  std::vector<const char*> aliases;
  unsigned families;
  Reader read;                 // nullptr: accepted and ignored
  const char* ignored_reason;  // why an ignored key cannot change the mathematics or the cost
};

constexpr long long kMaxInt = (1LL << 31) - 1;

Status set_positive(const YAML::Node& v, const KeyRef& k, int* out) {
  CANN_ASSIGN_OR_RETURN(long long n, read_integer(v, k));
  if (n <= 0) return spec_error(k.source, k.key, "must be positive, got " + std::to_string(n));
  if (n > kMaxInt)
    return spec_error(k.source, k.key, "value " + std::to_string(n) + " is out of range");
  *out = static_cast<int>(n);
  return OkStatus();
}

Status set_non_negative(const YAML::Node& v, const KeyRef& k, int* out) {
  CANN_ASSIGN_OR_RETURN(*out, read_int_in(v, k, 0, kMaxInt));
  return OkStatus();
}

// A dropout probability: recorded (the planner prices its masks); the larger of several keys
// that set the same dropout wins.
Status set_dropout(const YAML::Node& v, const KeyRef& k, double* out) {
  CANN_ASSIGN_OR_RETURN(double p, read_number(v, k));
  if (!(p >= 0 && p < 1)) return spec_error(k.source, k.key, "must be in [0, 1)");
  *out = std::max(*out, p);
  return OkStatus();
}

Status read_activation(const YAML::Node& v, const KeyRef& k, SpecDraft* d) {
  CANN_ASSIGN_OR_RETURN(std::string act, read_string(v, k));
  const bool gated = d->spec.mlp == MlpKind::kSwiGlu;
  if (gated) {
    if (act == "silu" || act == "swish") return OkStatus();
    return spec_error(k.source, k.key,
                      "'" + act +
                          "' in a gated MLP is not a kind cann-train knows (it builds "
                          "SwiGLU, hidden_act silu); hint: use silu");
  }
  // GPT-2's gelu_new, BERT's gelu and their fast forms: one GeLU MLP of the same cost; the
  // engine computes the tanh form (gelu_new), as GPT-2 does.
  if (act == "gelu" || act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast")
    return OkStatus();
  if (find_activation(act) != nullptr) {
    d->spec.custom_activation = act;
    return OkStatus();
  }
  return spec_error(k.source, k.key,
                    "'" + act + "' is not an activation cann-train's " +
                        std::string(family_name(d->spec.family)) +
                        " MLP computes; hint: use gelu_new (GeLU)");
}

Status read_quantization(const YAML::Node& v, const KeyRef& k, SpecDraft* d) {
  if (!v.IsMap()) return spec_error(k.source, k.key, "expected a mapping");
  std::string text;
  auto part = [&](const char* field) {
    const YAML::Node f = v[field];
    if (!f || f.IsNull()) return;
    std::string s = f.IsScalar() ? f.Scalar() : "";
    if (f.IsSequence())
      for (const auto& e : f) {
        if (!s.empty()) s += 'x';
        s += e.as<std::string>();
      }
    if (s.empty()) return;
    if (!text.empty()) text += ' ';
    text += s;
  };
  part("quant_method");
  part("fmt");
  part("weight_block_size");
  d->spec.weight_storage = text.empty() ? "quantized" : text;
  return OkStatus();
}

const std::vector<Rule>& rules() {
  using N = const YAML::Node&;
  using K = const KeyRef&;
  static const std::vector<Rule> kRules = {
      // Shapes.
      {"hidden_size",
       {"n_embd", "d_model"},
       kAll,
       [](N v, K k, SpecDraft* d) { return set_positive(v, k, &d->spec.hidden_size); },
       nullptr},
      {"num_hidden_layers",
       {"n_layer"},
       kAll,
       [](N v, K k, SpecDraft* d) { return set_positive(v, k, &d->spec.num_hidden_layers); },
       nullptr},
      {"num_attention_heads",
       {"n_head"},
       kAll,
       [](N v, K k, SpecDraft* d) { return set_positive(v, k, &d->spec.num_attention_heads); },
       nullptr},
      {"num_key_value_heads",
       {},
       kAll,
       [](N v, K k, SpecDraft* d) { return set_positive(v, k, &d->spec.num_key_value_heads); },
       nullptr},
      {"head_dim",
       {},
       kHf,
       [](N v, K k, SpecDraft* d) -> Status {
         if (d->spec.family == Family::kDeepseekV2 || d->spec.family == Family::kDeepseekV3) {
           CANN_ASSIGN_OR_RETURN(long long n, read_integer(v, k));
           d->head_dim_deepseek = static_cast<double>(n);
           return OkStatus();
         }
         return set_positive(v, k, &d->spec.head_dim);
       },
       nullptr},
      {"intermediate_size",
       {"n_inner"},
       kAll,
       [](N v, K k, SpecDraft* d) { return set_positive(v, k, &d->spec.intermediate_size); },
       nullptr},
      {"vocab_size",
       {},
       kLm,
       [](N v, K k, SpecDraft* d) { return set_positive(v, k, &d->spec.vocab_size); },
       nullptr},
      {"seq_length",
       {},
       kAll,
       [](N v, K k, SpecDraft* d) { return set_positive(v, k, &d->spec.seq_length); },
       nullptr},
      {"max_position_embeddings",
       {"n_positions"},
       kLm,
       [](N v, K k, SpecDraft* d) { return set_positive(v, k, &d->spec.max_position_embeddings); },
       nullptr},
      {"tie_word_embeddings",
       {},
       kLm,
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(d->spec.tie_word_embeddings, read_bool(v, k));
         return OkStatus();
       },
       nullptr},

      // Blocks.
      {"hidden_act", {"activation_function"}, kAll, read_activation, nullptr},
      {"rms_norm_eps",
       {},
       kHf,
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(d->spec.norm_eps, read_number(v, k));
         return OkStatus();
       },
       nullptr},
      {"layer_norm_epsilon",
       {"layer_norm_eps"},
       kOwn,
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(d->spec.norm_eps, read_number(v, k));
         return OkStatus();
       },
       nullptr},
      {"attention_bias",
       {},
       bit(Family::kLlama) | bit(Family::kQwen3) | bit(Family::kQwen3Moe) | kDeepseek,
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(bool b, read_bool(v, k));
         d->spec.qkv_bias = d->spec.o_bias = b;
         return OkStatus();
       },
       nullptr},
      {"qkv_bias",
       {},
       bit(Family::kQwen2Moe) | bit(Family::kVit),
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(d->spec.qkv_bias, read_bool(v, k));
         return OkStatus();
       },
       nullptr},
      {"mlp_bias",
       {},
       bit(Family::kLlama),
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(d->spec.mlp_bias, read_bool(v, k));
         return OkStatus();
       },
       nullptr},
      {"rope_theta",
       {},
       kHf,
       [](N v, K k, SpecDraft* d) -> Status {
         if (d->rope_theta_in_parameters)
           return spec_error(k.source, k.key, "given twice (also in rope_parameters)");
         CANN_ASSIGN_OR_RETURN(d->spec.rope.theta, read_number(v, k));
         if (!(d->spec.rope.theta > 1)) return spec_error(k.source, k.key, "must be above 1");
         return OkStatus();
       },
       nullptr},
      {"rope_scaling", {}, kHf, read_rope_scaling, nullptr},
      {"rope_parameters", {}, kHf, read_rope_parameters, nullptr},
      {"partial_rotary_factor",
       {},
       kHf & ~kDeepseek,
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(double f, read_number(v, k));
         if (!(f > 0 && f <= 1)) return spec_error(k.source, k.key, "must be in (0, 1]");
         d->spec.rope.partial_rotary_factor = f;
         return OkStatus();
       },
       nullptr},
      {"rope_interleave",
       {},
       kDeepseek,
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(d->spec.rope.interleaved, read_bool(v, k));
         return OkStatus();
       },
       nullptr},
      {"sliding_window",
       {},
       kMistral | kQwen,
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(int w, read_int_in(v, k, 1, kMaxInt));
         d->sliding_window = w;
         return OkStatus();
       },
       nullptr},
      {"use_sliding_window",
       {},
       kQwen,
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(bool b, read_bool(v, k));
         d->use_sliding_window = b;
         return OkStatus();
       },
       nullptr},
      {"max_window_layers",
       {},
       kQwen,
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(int n, read_int_in(v, k, 0, kMaxInt));
         d->max_window_layers = n;
         return OkStatus();
       },
       nullptr},
      {"layer_types",
       {},
       kQwen,
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(auto types, read_string_list(v, k));
         for (const auto& t : types)
           if (t != "full_attention" && t != "sliding_attention")
             return spec_error(k.source, k.key,
                               "layer type '" + t +
                                   "' is not one cann-train knows; hint: use "
                                   "full_attention or sliding_attention");
         d->layer_types = std::move(types);
         return OkStatus();
       },
       nullptr},
      {"attention_dropout",
       {"attn_pdrop", "attention_probs_dropout_prob"},
       kAll,
       [](N v, K k, SpecDraft* d) { return set_dropout(v, k, &d->spec.attention_dropout); },
       nullptr},
      {"hidden_dropout",
       {"resid_pdrop", "hidden_dropout_prob"},
       kAll,
       [](N v, K k, SpecDraft* d) { return set_dropout(v, k, &d->spec.hidden_dropout); },
       nullptr},
      {"embd_pdrop",
       {},
       bit(Family::kGpt2),
       [](N v, K k, SpecDraft* d) { return set_dropout(v, k, &d->spec.hidden_dropout); },
       nullptr},
      {"position_embedding_type",
       {},
       bit(Family::kBert),
       [](N v, K k, SpecDraft*) -> Status {
         CANN_ASSIGN_OR_RETURN(std::string t, read_string(v, k));
         if (t == "absolute") return OkStatus();
         return spec_error(k.source, k.key,
                           "'" + t + "' positions are not built; hint: use absolute");
       },
       nullptr},

      // Multi-head latent attention.
      {"q_lora_rank",
       {},
       kDeepseek,
       [](N v, K k, SpecDraft* d) { return set_positive(v, k, &d->spec.mla.q_lora_rank); },
       nullptr},
      {"kv_lora_rank",
       {},
       kDeepseek,
       [](N v, K k, SpecDraft* d) { return set_positive(v, k, &d->spec.mla.kv_lora_rank); },
       nullptr},
      {"qk_nope_head_dim",
       {},
       kDeepseek,
       [](N v, K k, SpecDraft* d) { return set_positive(v, k, &d->spec.mla.qk_nope_head_dim); },
       nullptr},
      {"qk_rope_head_dim",
       {},
       kDeepseek,
       [](N v, K k, SpecDraft* d) { return set_positive(v, k, &d->spec.mla.qk_rope_head_dim); },
       nullptr},
      {"v_head_dim",
       {},
       kDeepseek,
       [](N v, K k, SpecDraft* d) { return set_positive(v, k, &d->spec.mla.v_head_dim); },
       nullptr},

      // Mixture of experts.
      {"num_local_experts",
       {"num_experts", "n_routed_experts"},
       kMoe,
       [](N v, K k, SpecDraft* d) { return set_non_negative(v, k, &d->spec.num_local_experts); },
       nullptr},
      {"num_experts_per_tok",
       {},
       kMoe,
       [](N v, K k, SpecDraft* d) { return set_positive(v, k, &d->spec.num_experts_per_tok); },
       nullptr},
      {"moe_intermediate_size",
       {},
       kOwnMoe | kQwenMoe | kDeepseek,
       [](N v, K k, SpecDraft* d) { return set_positive(v, k, &d->spec.moe_intermediate_size); },
       nullptr},
      {"moe_layer_freq",
       {},
       kOwnMoe | kDeepseek,
       [](N v, K k, SpecDraft* d) { return set_positive(v, k, &d->spec.moe_layer_freq); },
       nullptr},
      {"capacity_factor",
       {},
       kMoe,
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(d->spec.capacity_factor, read_number(v, k));
         if (!(d->spec.capacity_factor > 0)) return spec_error(k.source, k.key, "must be positive");
         d->spec.routing = MoeRouting::kCapacity;
         return OkStatus();
       },
       nullptr},
      {"moe_routing",
       {},
       kMoe,
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(std::string r, read_string(v, k));
         if (r == "dropless") {
           d->spec.routing = MoeRouting::kDropless;
         } else if (r == "capacity") {
           d->spec.routing = MoeRouting::kCapacity;
         } else {
           return spec_error(k.source, k.key, "'" + r + "'; hint: use dropless or capacity");
         }
         return OkStatus();
       },
       nullptr},
      {"router_aux_loss_coef",
       {"aux_loss_alpha"},
       kMoe,
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(d->spec.router_aux_loss_coef, read_number(v, k));
         if (!(d->spec.router_aux_loss_coef >= 0))
           return spec_error(k.source, k.key, "must be zero or positive");
         return OkStatus();
       },
       nullptr},
      {"output_router_logits",
       {},
       kMixtral | kQwenMoe,
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(bool b, read_bool(v, k));
         d->output_router_logits = b;
         return OkStatus();
       },
       nullptr},
      {"router_jitter_noise",
       {},
       kMixtral,
       [](N v, K k, SpecDraft*) -> Status {
         CANN_ASSIGN_OR_RETURN(double j, read_number(v, k));
         if (j == 0) return OkStatus();
         return spec_error(k.source, k.key,
                           "router jitter " + value_text(v) +
                               " multiplies the router input by noise in training; cann-train "
                               "does not; hint: set it to 0");
       },
       nullptr},
      {"norm_topk_prob",
       {},
       kQwenMoe | kDeepseek,
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(d->spec.norm_topk_prob, read_bool(v, k));
         return OkStatus();
       },
       nullptr},
      {"decoder_sparse_step",
       {},
       kQwenMoe,
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(int n, read_int_in(v, k, 1, kMaxInt));
         d->decoder_sparse_step = n;
         return OkStatus();
       },
       nullptr},
      {"mlp_only_layers",
       {},
       kQwenMoe,
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(auto layers, read_int_list(v, k));
         d->mlp_only_layers = std::move(layers);
         return OkStatus();
       },
       nullptr},
      {"shared_expert_intermediate_size",
       {},
       bit(Family::kQwen2Moe),
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(int n, read_int_in(v, k, 0, kMaxInt));
         d->shared_expert_intermediate_size = n;
         return OkStatus();
       },
       nullptr},
      {"n_shared_experts",
       {},
       kDeepseek,
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(int n, read_int_in(v, k, 0, kMaxInt));
         d->n_shared_experts = n;
         return OkStatus();
       },
       nullptr},
      {"first_k_dense_replace",
       {},
       kDeepseek,
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(int n, read_int_in(v, k, 0, kMaxInt));
         d->first_k_dense_replace = n;
         return OkStatus();
       },
       nullptr},
      {"scoring_func",
       {},
       kDeepseek,
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(std::string f, read_string(v, k));
         if (f == "softmax") {
           d->spec.router_score = RouterScore::kSoftmax;
         } else if (f == "sigmoid") {
           d->spec.router_score = RouterScore::kSigmoid;
         } else {
           return spec_error(k.source, k.key,
                             "scoring function '" + f +
                                 "' is not one cann-train knows; hint: "
                                 "use softmax or sigmoid");
         }
         return OkStatus();
       },
       nullptr},
      {"topk_method",
       {},
       kDeepseek | kOwnMoe,
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(std::string m, read_string(v, k));
         if (m == "greedy") {
           d->spec.topk_method = TopkMethod::kGreedy;
         } else if (m == "group_limited_greedy") {
           d->spec.topk_method = TopkMethod::kGroupLimited;
         } else if (m == "noaux_tc") {
           d->spec.topk_method = TopkMethod::kNoAuxTc;
         } else {
           return spec_error(k.source, k.key,
                             "top-k method '" + m +
                                 "' is not one cann-train knows; hint: use "
                                 "greedy, group_limited_greedy or noaux_tc");
         }
         return OkStatus();
       },
       nullptr},
      {"expert_bias_update_speed",
       {},
       kDeepseek | kOwnMoe,
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(d->spec.expert_bias_update_speed, read_number(v, k));
         if (!(d->spec.expert_bias_update_speed >= 0))
           return spec_error(k.source, k.key, "must be zero (a frozen bias) or positive");
         return OkStatus();
       },
       nullptr},
      {"n_group",
       {},
       kDeepseek,
       [](N v, K k, SpecDraft* d) { return set_positive(v, k, &d->spec.n_group); },
       nullptr},
      {"topk_group",
       {},
       kDeepseek,
       [](N v, K k, SpecDraft* d) { return set_positive(v, k, &d->spec.topk_group); },
       nullptr},
      {"routed_scaling_factor",
       {},
       kDeepseek,
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(d->spec.routed_scaling_factor, read_number(v, k));
         if (!(d->spec.routed_scaling_factor > 0))
           return spec_error(k.source, k.key, "must be positive");
         return OkStatus();
       },
       nullptr},
      {"seq_aux",
       {},
       kDeepseek,
       [](N v, K k, SpecDraft* d) -> Status {
         CANN_ASSIGN_OR_RETURN(bool b, read_bool(v, k));
         d->spec.aux_loss = b ? AuxLoss::kSequence : AuxLoss::kBatch;
         return OkStatus();
       },
       nullptr},
      {"num_nextn_predict_layers",
       {},
       kDeepseek,
       [](N v, K k,
          SpecDraft* d) { return set_non_negative(v, k, &d->spec.num_nextn_predict_layers); },
       nullptr},
      {"quantization_config", {}, kAll, read_quantization, nullptr},

      // ViT.
      {"image_size",
       {},
       bit(Family::kVit),
       [](N v, K k, SpecDraft* d) { return set_positive(v, k, &d->spec.image_size); },
       nullptr},
      {"patch_size",
       {},
       bit(Family::kVit),
       [](N v, K k, SpecDraft* d) { return set_positive(v, k, &d->spec.patch_size); },
       nullptr},
      {"num_channels",
       {},
       bit(Family::kVit),
       [](N v, K k, SpecDraft* d) { return set_positive(v, k, &d->spec.num_channels); },
       nullptr},
      {"num_classes",
       {},
       bit(Family::kVit),
       [](N v, K k, SpecDraft* d) { return set_positive(v, k, &d->spec.num_classes); },
       nullptr},

      // Accepted and ignored: none of these changes the model's mathematics or its cost.
      {"name", {}, kAll, nullptr, "cann-train's display name (read by the caller)"},
      {"description", {}, kAll, nullptr, "free text"},
      {"architectures", {}, kAll, nullptr, "Python class names; model_type selects the family"},
      {"torch_dtype", {"dtype"}, kAll, nullptr, "storage dtype of the released weights"},
      {"transformers_version", {}, kAll, nullptr, "bookkeeping"},
      {"_name_or_path", {}, kAll, nullptr, "bookkeeping"},
      {"auto_map", {}, kAll, nullptr, "where the Python code lives"},
      {"bos_token_id", {}, kAll, nullptr, "token ids"},
      {"eos_token_id", {}, kAll, nullptr, "token ids"},
      {"pad_token_id", {}, kAll, nullptr, "token ids"},
      {"sep_token_id", {}, kAll, nullptr, "token ids"},
      {"use_cache", {}, kAll, nullptr, "inference KV cache"},
      {"initializer_range", {}, kAll, nullptr, "initialization scale, not the model"},
      {"gradient_checkpointing", {}, kAll, nullptr, "the strategy's recompute sets it"},
      {"pretraining_tp",
       {},
       kHf,
       nullptr,
       "Llama's sliced matmuls sum the same products in another order"},
      {"ep_size", {}, kDeepseek, nullptr, "DeepSeek's inference expert-parallel layout"},
      {"n_ctx", {}, bit(Family::kGpt2), nullptr, "legacy copy of n_positions"},
      {"summary_activation", {}, bit(Family::kGpt2), nullptr, "classification head, not built"},
      {"summary_first_dropout", {}, bit(Family::kGpt2), nullptr, "classification head"},
      {"summary_proj_to_labels", {}, bit(Family::kGpt2), nullptr, "classification head"},
      {"summary_type", {}, bit(Family::kGpt2), nullptr, "classification head"},
      {"summary_use_proj", {}, bit(Family::kGpt2), nullptr, "classification head"},
      {"task_specific_params", {}, kAll, nullptr, "generation settings"},
      {"type_vocab_size",
       {},
       bit(Family::kBert),
       nullptr,
       "cann-train's bert is a single-segment masked LM without a token-type table"},
      {"classifier_dropout", {}, kAll, nullptr, "classification head, not built"},
      {"label2id", {}, kAll, nullptr, "classification labels"},
      {"id2label", {}, kAll, nullptr, "classification labels"},
      {"problem_type", {}, kAll, nullptr, "classification head"},
      {"encoder_stride", {}, bit(Family::kVit), nullptr, "masked-image-modeling decoder"},
  };
  return kRules;
}

const Rule* find_rule(const std::string& key) {
  for (const Rule& r : rules()) {
    if (key == r.key) return &r;
    for (const char* a : r.aliases)
      if (key == a) return &r;
  }
  return nullptr;
}

std::string families_of(unsigned mask) {
  std::string out;
  for (int f = 0; f <= static_cast<int>(Family::kDeepseekV3); ++f)
    if (mask & (1u << f))
      out += (out.empty() ? "" : ", ") + std::string(family_name(static_cast<Family>(f)));
  return out;
}

}  // namespace

Status spec_error(const std::string& source, const std::string& key, const std::string& what) {
  return InvalidArgument(source + ": key '" + key + "': " + what);
}

bool is_family_key(const std::string& key) {
  return key == "architecture" || key == "model_type";
}

Status read_key(const std::string& key, const YAML::Node& value, SpecDraft* d) {
  const std::string& src = d->spec.source;
  const Rule* r = find_rule(key);
  if (r == nullptr)
    return spec_error(src, key,
                      "unknown key; hint: see DESIGN.md \"Specs\" for the accepted keys, or "
                      "remove it");
  if (!(r->families & bit(d->spec.family)))
    return spec_error(src, key,
                      std::string("belongs to ") + families_of(r->families) + " configs; a " +
                          std::string(family_name(d->spec.family)) +
                          " model has no such setting; hint: remove it or fix model_type");
  const std::string canonical = r->key;
  if (d->present.count(canonical))
    return spec_error(src, key,
                      "given twice (directly or through an alias of '" + canonical + "')");
  if (value.IsNull()) {
    // JSON null: the key's default. DeepSeek-V2-Lite writes q_lora_rank: null for "no query
    // compression", which is not the class default (1536): record it.
    if (canonical == "q_lora_rank") d->q_lora_null = true;
    if (canonical == "sliding_window") d->sliding_window = 0;
    return OkStatus();
  }
  d->present.insert(canonical);
  if (canonical == "name" && value.IsScalar()) d->spec.name = value.Scalar();
  if (r->read == nullptr) return OkStatus();
  return r->read(value, KeyRef{key, src}, d);
}

}  // namespace cann::model::spec_keys
