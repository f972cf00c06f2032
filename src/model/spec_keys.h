// The model spec's key table, internal to the spec reader (spec.cc): for every key a config may
// carry, the families it belongs to and what it does to the spec, or why it is ignored. Keys
// whose meaning depends on other keys (which layers are sparse, which slide, the shared
// experts' width, whether the router's auxiliary loss is trained) are collected in a
// SpecDraft and settled by finish_draft once every key has been read.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/spec.h"

namespace YAML {
class Node;
}

namespace cann::model::spec_keys {

// A spec being read: the fields set so far, and the raw values of keys settled at the end.
struct SpecDraft {
  ModelSpec spec;
  std::set<std::string> present;  // canonical keys given (not null)
  std::optional<int> sliding_window;
  std::optional<bool> use_sliding_window;
  std::optional<int> max_window_layers;
  std::optional<std::vector<std::string>> layer_types;
  std::optional<int> decoder_sparse_step;
  std::optional<std::vector<int>> mlp_only_layers;
  std::optional<int> first_k_dense_replace;
  std::optional<int> n_shared_experts;
  std::optional<int> shared_expert_intermediate_size;
  std::optional<bool> output_router_logits;
  std::optional<double> head_dim_deepseek;  // DeepSeek's head_dim: must equal qk_rope_head_dim
  bool q_lora_null = false;                 // q_lora_rank: null (DeepSeek-V2-Lite)
  bool rope_theta_in_parameters = false;    // rope_parameters carried rope_theta
};

// Family defaults: the Hugging Face configuration class's own defaults for that model_type
// (gpt2, bert and vit: cann-train's GPT-2-style blocks).
void apply_family_defaults(Family f, ModelSpec* s);

// Reads one key (canonical name or alias) into the draft. An unknown key, a key of another
// family, or a value of the wrong type or out of range is an error naming the key.
Status read_key(const std::string& key, const YAML::Node& value, SpecDraft* d);

// rope_scaling and rope_parameters (spec_rope.cc).
struct KeyRef;
Status read_rope_scaling(const YAML::Node& v, const KeyRef& k, SpecDraft* d);
Status read_rope_parameters(const YAML::Node& v, const KeyRef& k, SpecDraft* d);

// Whether `key` (or an alias) is the family selector: architecture / model_type.
bool is_family_key(const std::string& key);

// Settles the keys that depend on each other and the defaults derived from other keys.
Status finish_draft(SpecDraft* d);

// One line naming the file and key: "<source>: key '<key>': <what>".
Status spec_error(const std::string& source, const std::string& key, const std::string& what);

}  // namespace cann::model::spec_keys
