// ModelSpec: the model description shared by the trainer and the planner, read from YAML or a
// Hugging Face config.json (the same keys; GPT-2 aliases accepted). See DESIGN.md, "Specs".
//
// A spec names its family (gpt2, bert, vit, or one of today's Hugging Face families: llama,
// mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, deepseek_v2, deepseek_v3) and says,
// field by field, how each block is built: which MLP and norm, which positions, whether the
// head is tied, which biases, the attention kind (multi-head with grouped KV heads, or
// DeepSeek's multi-head latent attention), and for MoE models which layers are sparse, how
// tokens are routed and which experts are shared. The parameter tables (param_table.h), the
// FLOP counts (flops.h) and the planner read these fields; nothing downstream looks at the
// family name to decide a shape. Every key of a family's config.json is honoured, refused with
// one line naming it, or (token ids, dtype, cache flags) ignored because it cannot change the
// mathematics or the cost; spec_keys.cc lists each with its reason.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace cann::model {

// The block stack: a causal decoder (gpt: every *ForCausalLM family), a bidirectional encoder
// trained as a masked LM (bert), or a vision encoder with a classifier (vit).
enum class Architecture { kGpt, kBert, kVit };

// Where the spec's defaults and key set come from: the Hugging Face configuration class of
// that model_type, or cann-train's own GPT-2-style blocks for gpt2/bert/vit.
enum class Family {
  kGpt2,
  kBert,
  kVit,
  kLlama,
  kMistral,
  kMixtral,
  kQwen2,
  kQwen2Moe,
  kQwen3,
  kQwen3Moe,
  kDeepseekV2,
  kDeepseekV3,
};

// kGelu: fc (C->F), GeLU, proj (F->C): GPT-2 and BERT. kSwiGlu: down(silu(gate(x)) * up(x)),
// three matrices (Shazeer 2020): every Hugging Face family here with hidden_act "silu".
enum class MlpKind { kGelu, kSwiGlu };
enum class NormKind { kLayerNorm, kRmsNorm };
enum class PositionKind { kLearned, kRotary };
enum class RopeScaling { kNone, kLinear, kLlama3, kYarn };

// Rotary position embedding (Su et al. 2021) and its context-extension variants, with the
// parameters Hugging Face's modeling_rope_utils reads.
struct RopeSpec {
  double theta = 10000.0;
  RopeScaling scaling = RopeScaling::kNone;
  double factor = 1.0;                 // linear, llama3, yarn
  double low_freq_factor = 1.0;        // llama3
  double high_freq_factor = 4.0;       // llama3
  int original_max_position = 0;       // llama3, yarn: the pre-training context
  double beta_fast = 32.0;             // yarn
  double beta_slow = 1.0;              // yarn
  double mscale = 1.0;                 // yarn (DeepSeek's form)
  double mscale_all_dim = 0.0;         // yarn (DeepSeek's form)
  double attention_factor = 0.0;       // yarn: 0 means derived from factor and mscale
  bool truncate = true;                // yarn: round the correction range to whole dims
  double partial_rotary_factor = 1.0;  // share of the head that rotates (DeepSeek: rope dims)
  bool interleaved = false;            // pairs (2i, 2i+1) instead of halves (i, i+d/2)
};

// Multi-head latent attention (DeepSeek-AI 2024, DeepSeek-V2 section 2.1): queries through a
// low-rank bottleneck (q_lora_rank; 0 means a plain q projection), keys and values from one
// shared latent of kv_lora_rank plus a decoupled rotary key of qk_rope_head_dim shared by all
// heads. Query/key heads are qk_nope_head_dim + qk_rope_head_dim wide, value heads v_head_dim.
struct MlaSpec {
  int q_lora_rank = 0;
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

enum class RouterScore { kSoftmax, kSigmoid };
// kGreedy: the top-k scores. kGroupLimited: DeepSeek-V2's group_limited_greedy (keep the
// topk_group groups with the highest single score). kNoAuxTc: DeepSeek-V3's (groups ranked by
// the sum of their two best scores plus a per-expert balancing bias used for selection only).
enum class TopkMethod { kGreedy, kGroupLimited, kNoAuxTc };
// kCapacity: each expert takes at most capacity_factor * N*K/E tokens, the rest are dropped
// (GShard; cann-train's engine). kDropless: every assignment is computed (Hugging Face,
// Megablocks).
enum class MoeRouting { kCapacity, kDropless };
// Which balancing loss the router adds: over the whole batch (Switch/GShard/Mixtral) or per
// sequence (DeepSeek's seq_aux).
enum class AuxLoss { kBatch, kSequence };

struct ModelSpec {
  std::string name;    // bare name ("gpt_tiny") or the file's stem
  std::string source;  // where it was read from, for error messages
  Architecture architecture = Architecture::kGpt;
  Family family = Family::kGpt2;
  int hidden_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;  // default: num_attention_heads
  int head_dim = 0;             // default: hidden_size / num_attention_heads
  int intermediate_size = 0;    // default: 4 * hidden_size (gpt2, bert, vit)
  int vocab_size = 0;
  int seq_length = 0;               // tokens per training sequence (default: max positions)
  int max_position_embeddings = 0;  // learned position table rows / the model's context

  // Blocks.
  MlpKind mlp = MlpKind::kGelu;
  // A user's activation (model/custom_op.h) in place of GeLU, by its registered name; empty:
  // the built-in one.
  std::string custom_activation;
  NormKind norm = NormKind::kLayerNorm;
  double norm_eps = 1e-5;
  PositionKind positions = PositionKind::kLearned;
  RopeSpec rope;
  bool tie_word_embeddings = true;
  bool qkv_bias = true;  // biases of the q, k, v projections
  bool o_bias = true;    // bias of the attention output projection
  bool mlp_bias = true;  // biases of the MLP (and expert) matrices
  bool qk_norm = false;  // RMSNorm over each query and key head (Qwen3)
  bool mla_enabled = false;
  MlaSpec mla;
  // Per layer: the attention window in tokens, 0 for full attention. Empty: all full.
  std::vector<int> attention_window;
  double attention_dropout = 0.0;
  double hidden_dropout = 0.0;  // residual and embedding dropout

  // Mixture of experts: num_local_experts > 0 routed experts in the layers moe_layers marks
  // (built from moe_layer_freq, first_k_dense_replace, decoder_sparse_step or mlp_only_layers
  // by family; see spec_keys.cc).
  int num_local_experts = 0;
  int num_experts_per_tok = 1;
  int moe_intermediate_size = 0;  // default: intermediate_size
  int moe_layer_freq = 1;
  std::vector<uint8_t> moe_layers;          // one flag per layer; empty for a dense model
  int num_shared_experts = 0;               // DeepSeek: n_shared_experts; Qwen2-MoE: 1
  int shared_expert_intermediate_size = 0;  // the shared MLP's width (all shared experts)
  bool shared_expert_gate = false;          // Qwen2-MoE: sigmoid(x . g) scales the shared MLP
  RouterScore router_score = RouterScore::kSoftmax;
  bool norm_topk_prob = false;  // renormalize the chosen experts' weights to sum to 1
  double routed_scaling_factor = 1.0;
  TopkMethod topk_method = TopkMethod::kGreedy;
  int n_group = 1;
  int topk_group = 1;
  // noaux_tc: how far each expert's selection bias moves after a step (DeepSeek-AI 2024,
  // DeepSeek-V3 report section 2.1.2, its bias update speed gamma; 0.001 in section 4.2).
  // 0 freezes the bias.
  double expert_bias_update_speed = 0.001;
  MoeRouting routing = MoeRouting::kCapacity;
  double capacity_factor = 1.25;
  AuxLoss aux_loss = AuxLoss::kBatch;
  double router_aux_loss_coef = 0.01;
  // DeepSeek-V3's multi-token prediction modules (DeepSeek-AI 2024, section 2.2): each one
  // transformer block (the model's last kind) plus a projection of 2h -> h and two RMSNorms,
  // sharing the embedding and output head with the main model. Trained and priced.
  int num_nextn_predict_layers = 0;
  // How the released weights are stored (quantization_config), for the report only: training
  // precision is the cluster's. Empty: not quantized.
  std::string weight_storage;

  // ViT
  int image_size = 0;
  int patch_size = 0;
  int num_channels = 3;
  int num_classes = 0;

  int head_size() const { return head_dim > 0 ? head_dim : hidden_size / num_attention_heads; }
  bool is_moe() const { return num_local_experts > 0; }
  // A spec built in code rather than read (tests) may leave moe_layers empty: then every
  // moe_layer_freq-th layer is an MoE layer, as cann-train's own configs say.
  bool is_moe_layer(int layer) const {
    if (!is_moe() || layer < 0 || layer >= num_hidden_layers) return false;
    if (moe_layers.empty()) return moe_layer_freq > 0 && (layer + 1) % moe_layer_freq == 0;
    return layer < static_cast<int>(moe_layers.size()) && moe_layers[layer] != 0;
  }
  // Rows of the learned position table (max_position_embeddings; seq_length when a spec built
  // in code leaves it 0).
  int position_rows() const {
    return max_position_embeddings > 0 ? max_position_embeddings : seq_length;
  }
  int num_moe_layers() const;
  // Width of the fused QKV projection: (heads + 2 * kv_heads) * head_size (not MLA).
  int qkv_size() const { return (num_attention_heads + 2 * num_key_value_heads) * head_size(); }
  // Width of the attention output: heads * head_size, or heads * v_head_dim under MLA.
  int attention_out_size() const {
    return num_attention_heads * (mla_enabled ? mla.v_head_dim : head_size());
  }
  int window(int layer) const {
    return layer < static_cast<int>(attention_window.size()) ? attention_window[layer] : 0;
  }
  bool has_shared_experts() const { return num_shared_experts > 0; }
  // DeepSeek-V3's per-expert selection bias (topk_method noaux_tc) in every MoE layer.
  bool has_expert_bias() const { return is_moe() && topk_method == TopkMethod::kNoAuxTc; }
  bool causal() const { return architecture == Architecture::kGpt; }
};

std::string_view architecture_name(Architecture a);
std::string_view family_name(Family f);
// The Hugging Face model_type / cann-train architecture names of the families ("gpt" reads as
// gpt2), or an error listing them.
StatusOr<Family> parse_family(std::string_view name);

// Parses YAML or JSON text. `source` names the file in every error message.
StatusOr<ModelSpec> parse_model_spec(std::string_view text, const std::string& source);
// A path to a YAML/JSON file, a shipped name ("llama3_8b"), or a shipped name with .yaml,
// .yml or .json ("moe_bert.yaml") when no such file exists in the working directory.
StatusOr<ModelSpec> load_model_spec(const std::string& name_or_path);
// Names of the shipped model configs.
std::vector<std::string> shipped_model_names();

}  // namespace cann::model
