// ModelSpec: the model description shared by the trainer and the planner, read from YAML or a
// Hugging Face config.json (the same keys; GPT-2 aliases accepted). See DESIGN.md, "Specs".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace cann::model {

enum class Architecture { kGpt, kBert, kVit };

struct ModelSpec {
  std::string name;    // bare name ("gpt_tiny") or the file's stem
  std::string source;  // where it was read from, for error messages
  Architecture architecture = Architecture::kGpt;
  int hidden_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;  // default: num_attention_heads
  int intermediate_size = 0;    // default: 4 * hidden_size
  int vocab_size = 0;
  int seq_length = 0;
  // Mixture of experts: num_local_experts > 0 turns every moe_layer_freq-th feed-forward
  // (layers moe_layer_freq-1, 2*moe_layer_freq-1, ...) into an MoE layer.
  int num_local_experts = 0;
  int num_experts_per_tok = 1;
  int moe_intermediate_size = 0;  // default: intermediate_size
  int moe_layer_freq = 1;
  double capacity_factor = 1.25;
  double router_aux_loss_coef = 0.01;
  // ViT
  int image_size = 0;
  int patch_size = 0;
  int num_channels = 3;
  int num_classes = 0;

  int head_size() const { return hidden_size / num_attention_heads; }
  bool is_moe() const { return num_local_experts > 0; }
  bool is_moe_layer(int layer) const { return is_moe() && (layer + 1) % moe_layer_freq == 0; }
  int num_moe_layers() const { return is_moe() ? num_hidden_layers / moe_layer_freq : 0; }
  // Width of the fused QKV projection: (heads + 2 * kv_heads) * head_size.
  int qkv_size() const { return (num_attention_heads + 2 * num_key_value_heads) * head_size(); }
  bool causal() const { return architecture == Architecture::kGpt; }
};

std::string_view architecture_name(Architecture a);

// Parses YAML or JSON text. `source` names the file in every error message.
StatusOr<ModelSpec> parse_model_spec(std::string_view text, const std::string& source);
// A path to a YAML/JSON file, or the bare name of a config shipped in configs/models/.
StatusOr<ModelSpec> load_model_spec(const std::string& name_or_path);
// Names of the shipped model configs.
std::vector<std::string> shipped_model_names();

}  // namespace cann::model
