// Model spec parsing and validation. yaml-cpp reads both YAML and JSON (JSON is a subset of
// YAML 1.2 for these files). Every error names the file and the key, and says what to do.
#include "model/spec.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <map>
#include <set>

#include "core/embedded.h"
#include "core/fs.h"

namespace cann::model {
namespace {

// Canonical key -> aliases (GPT-2 and Hugging Face spellings).
const std::map<std::string, std::vector<std::string>>& key_aliases() {
  static const std::map<std::string, std::vector<std::string>> kAliases = {
      {"architecture", {}},
      {"hidden_size", {"n_embd", "d_model"}},
      {"num_hidden_layers", {"n_layer"}},
      {"num_attention_heads", {"n_head"}},
      {"num_key_value_heads", {}},
      {"intermediate_size", {"n_inner"}},
      {"vocab_size", {}},
      {"seq_length", {"max_position_embeddings", "n_positions"}},
      {"num_local_experts", {}},
      {"num_experts_per_tok", {}},
      {"moe_intermediate_size", {}},
      {"moe_layer_freq", {}},
      {"capacity_factor", {}},
      {"router_aux_loss_coef", {}},
      {"image_size", {}},
      {"patch_size", {}},
      {"num_channels", {}},
      {"num_classes", {}},
  };
  return kAliases;
}

// Keys that Hugging Face config.json files carry for bookkeeping or for features that do not
// change the shapes or FLOPs cann-train computes (dropout rates, token ids, dtype). They are
// accepted and ignored so an unmodified config.json loads; anything else unknown is an error.
const std::set<std::string>& ignored_keys() {
  static const std::set<std::string> kIgnored = {"name",
                                                 "description",
                                                 "architectures",
                                                 "model_type",
                                                 "torch_dtype",
                                                 "transformers_version",
                                                 "_name_or_path",
                                                 "bos_token_id",
                                                 "eos_token_id",
                                                 "pad_token_id",
                                                 "use_cache",
                                                 "initializer_range",
                                                 "layer_norm_epsilon",
                                                 "layer_norm_eps",
                                                 "n_ctx",
                                                 "activation_function",
                                                 "hidden_act",
                                                 "resid_pdrop",
                                                 "embd_pdrop",
                                                 "attn_pdrop",
                                                 "hidden_dropout_prob",
                                                 "attention_probs_dropout_prob",
                                                 "attention_dropout",
                                                 "summary_activation",
                                                 "summary_first_dropout",
                                                 "summary_proj_to_labels",
                                                 "summary_type",
                                                 "summary_use_proj",
                                                 "task_specific_params",
                                                 "type_vocab_size",
                                                 "classifier_dropout",
                                                 "position_embedding_type",
                                                 "gradient_checkpointing",
                                                 "tie_word_embeddings",
                                                 "rms_norm_eps",
                                                 "rope_theta",
                                                 "rope_scaling",
                                                 "sliding_window",
                                                 "output_router_logits",
                                                 "router_jitter_noise",
                                                 "hidden_dropout",
                                                 "qkv_bias",
                                                 "encoder_stride",
                                                 "label2id",
                                                 "id2label",
                                                 "problem_type",
                                                 "pretraining_tp",
                                                 "mlp_bias",
                                                 "attention_bias",
                                                 "head_dim"};
  return kIgnored;
}

Status spec_error(const std::string& source, const std::string& key, const std::string& what) {
  return InvalidArgument(source + ": key '" + key + "': " + what);
}

StatusOr<Architecture> parse_architecture(const std::string& v, const std::string& source,
                                          const std::string& key) {
  if (v == "gpt" || v == "gpt2" || v == "llama" || v == "mixtral" || v == "mistral")
    return Architecture::kGpt;
  if (v == "bert") return Architecture::kBert;
  if (v == "vit") return Architecture::kVit;
  return spec_error(source, key,
                    "unknown architecture '" + v + "'; hint: use one of gpt, bert, vit");
}

StatusOr<long long> read_int(const YAML::Node& node, const std::string& source,
                             const std::string& key) {
  try {
    return node.as<long long>();
  } catch (const YAML::Exception&) {
    return spec_error(source, key,
                      "expected an integer, got '" +
                          (node.IsScalar() ? node.Scalar() : std::string("<non-scalar>")) + "'");
  }
}

StatusOr<double> read_double(const YAML::Node& node, const std::string& source,
                             const std::string& key) {
  try {
    return node.as<double>();
  } catch (const YAML::Exception&) {
    return spec_error(source, key,
                      "expected a number, got '" +
                          (node.IsScalar() ? node.Scalar() : std::string("<non-scalar>")) + "'");
  }
}

Status validate(const ModelSpec& s, const std::set<std::string>& present) {
  const std::string& src = s.source;
  auto positive = [&](const char* key, long long v) -> Status {
    if (v <= 0) return spec_error(src, key, "must be positive, got " + std::to_string(v));
    return OkStatus();
  };
  for (const char* key : {"hidden_size", "num_hidden_layers", "num_attention_heads"})
    if (!present.count(key)) return spec_error(src, key, "missing; hint: every model needs it");
  CANN_RETURN_IF_ERROR(positive("hidden_size", s.hidden_size));
  CANN_RETURN_IF_ERROR(positive("num_hidden_layers", s.num_hidden_layers));
  CANN_RETURN_IF_ERROR(positive("num_attention_heads", s.num_attention_heads));
  CANN_RETURN_IF_ERROR(positive("num_key_value_heads", s.num_key_value_heads));
  CANN_RETURN_IF_ERROR(positive("intermediate_size", s.intermediate_size));
  if (s.hidden_size % s.num_attention_heads != 0)
    return spec_error(src, "num_attention_heads",
                      std::to_string(s.num_attention_heads) + " heads do not divide hidden_size " +
                          std::to_string(s.hidden_size) +
                          "; hint: pick a head count that divides it");
  if (s.num_attention_heads % s.num_key_value_heads != 0)
    return spec_error(src, "num_key_value_heads",
                      std::to_string(s.num_key_value_heads) +
                          " kv heads do not divide num_attention_heads " +
                          std::to_string(s.num_attention_heads));
  if (s.architecture == Architecture::kVit) {
    for (const char* key : {"image_size", "patch_size", "num_classes"})
      if (!present.count(key)) return spec_error(src, key, "missing; hint: a vit model needs it");
    CANN_RETURN_IF_ERROR(positive("image_size", s.image_size));
    CANN_RETURN_IF_ERROR(positive("patch_size", s.patch_size));
    CANN_RETURN_IF_ERROR(positive("num_channels", s.num_channels));
    CANN_RETURN_IF_ERROR(positive("num_classes", s.num_classes));
    if (s.image_size % s.patch_size != 0)
      return spec_error(src, "patch_size",
                        "does not divide image_size " + std::to_string(s.image_size));
  } else {
    for (const char* key : {"vocab_size", "seq_length"})
      if (!present.count(key))
        return spec_error(src, key, "missing; hint: a language model needs it");
    CANN_RETURN_IF_ERROR(positive("vocab_size", s.vocab_size));
    CANN_RETURN_IF_ERROR(positive("seq_length", s.seq_length));
  }
  if (s.num_local_experts < 0)
    return spec_error(src, "num_local_experts",
                      "must be 0 (dense) or positive, got " + std::to_string(s.num_local_experts));
  if (s.is_moe()) {
    CANN_RETURN_IF_ERROR(positive("num_experts_per_tok", s.num_experts_per_tok));
    CANN_RETURN_IF_ERROR(positive("moe_intermediate_size", s.moe_intermediate_size));
    CANN_RETURN_IF_ERROR(positive("moe_layer_freq", s.moe_layer_freq));
    if (s.num_experts_per_tok > s.num_local_experts)
      return spec_error(src, "num_experts_per_tok",
                        std::to_string(s.num_experts_per_tok) + " experts per token exceed the " +
                            std::to_string(s.num_local_experts) +
                            " experts (num_local_experts); hint: lower it");
    if (!(s.capacity_factor > 0)) return spec_error(src, "capacity_factor", "must be positive");
    if (!(s.router_aux_loss_coef >= 0))
      return spec_error(src, "router_aux_loss_coef", "must be zero or positive");
    if (s.moe_layer_freq > s.num_hidden_layers)
      return spec_error(src, "moe_layer_freq",
                        "exceeds num_hidden_layers, so no layer would be an MoE layer");
  }
  return OkStatus();
}

}  // namespace

std::string_view architecture_name(Architecture a) {
  switch (a) {
    case Architecture::kGpt:
      return "gpt";
    case Architecture::kBert:
      return "bert";
    case Architecture::kVit:
      return "vit";
  }
  return "?";
}

StatusOr<ModelSpec> parse_model_spec(std::string_view text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::ParserException& e) {
    return InvalidArgument(source + ":" + std::to_string(e.mark.line + 1) + ":" +
                           std::to_string(e.mark.column + 1) + ": malformed YAML/JSON: " + e.msg +
                           "; hint: fix the syntax at that line");
  }
  if (!root.IsMap())
    return InvalidArgument(source +
                           ": expected a mapping of keys to values at the top level; hint: see "
                           "configs/models/gpt_tiny.yaml");

  // Map every alias to its canonical key.
  std::map<std::string, std::string> canonical;
  for (const auto& [key, aliases] : key_aliases()) {
    canonical[key] = key;
    for (const auto& a : aliases) canonical[a] = key;
  }

  ModelSpec s;
  s.source = source;
  s.name = std::filesystem::path(source).stem().string();
  std::set<std::string> present;
  std::string model_type;
  for (const auto& item : root) {
    const std::string key = item.first.as<std::string>();
    const YAML::Node& v = item.second;
    if (key == "model_type" && v.IsScalar()) model_type = v.Scalar();
    if (key == "name" && v.IsScalar()) s.name = v.Scalar();
    auto it = canonical.find(key);
    if (it == canonical.end()) {
      if (ignored_keys().count(key)) continue;
      return spec_error(source, key,
                        "unknown key; hint: see DESIGN.md \"Specs\" for the accepted keys");
    }
    const std::string& k = it->second;
    if (present.count(k))
      return spec_error(source, key, "given twice (directly or through an alias of '" + k + "')");
    present.insert(k);
    if (v.IsNull()) {
      present.erase(k);  // JSON null: treat as absent
      continue;
    }
    if (k == "architecture") {
      CANN_ASSIGN_OR_RETURN(s.architecture, parse_architecture(v.Scalar(), source, key));
      continue;
    }
    if (k == "capacity_factor" || k == "router_aux_loss_coef") {
      CANN_ASSIGN_OR_RETURN(double d, read_double(v, source, key));
      (k == "capacity_factor" ? s.capacity_factor : s.router_aux_loss_coef) = d;
      continue;
    }
    CANN_ASSIGN_OR_RETURN(long long n, read_int(v, source, key));
    if (n > (1LL << 31) - 1 || n < -(1LL << 31))
      return spec_error(source, key, "value " + std::to_string(n) + " is out of range");
    const int iv = static_cast<int>(n);
    if (k == "hidden_size")
      s.hidden_size = iv;
    else if (k == "num_hidden_layers")
      s.num_hidden_layers = iv;
    else if (k == "num_attention_heads")
      s.num_attention_heads = iv;
    else if (k == "num_key_value_heads")
      s.num_key_value_heads = iv;
    else if (k == "intermediate_size")
      s.intermediate_size = iv;
    else if (k == "vocab_size")
      s.vocab_size = iv;
    else if (k == "seq_length")
      s.seq_length = iv;
    else if (k == "num_local_experts")
      s.num_local_experts = iv;
    else if (k == "num_experts_per_tok")
      s.num_experts_per_tok = iv;
    else if (k == "moe_intermediate_size")
      s.moe_intermediate_size = iv;
    else if (k == "moe_layer_freq")
      s.moe_layer_freq = iv;
    else if (k == "image_size")
      s.image_size = iv;
    else if (k == "patch_size")
      s.patch_size = iv;
    else if (k == "num_channels")
      s.num_channels = iv;
    else if (k == "num_classes")
      s.num_classes = iv;
  }
  if (!present.count("architecture")) {
    if (model_type.empty())
      return spec_error(source, "architecture", "missing; hint: set it to gpt, bert or vit");
    CANN_ASSIGN_OR_RETURN(s.architecture, parse_architecture(model_type, source, "model_type"));
  }
  // Defaults that depend on other keys.
  if (!present.count("num_key_value_heads")) s.num_key_value_heads = s.num_attention_heads;
  if (!present.count("intermediate_size")) s.intermediate_size = 4 * s.hidden_size;
  if (!present.count("moe_intermediate_size")) s.moe_intermediate_size = s.intermediate_size;
  if (s.architecture == Architecture::kVit && !present.count("seq_length") && s.patch_size > 0)
    s.seq_length = (s.image_size / s.patch_size) * (s.image_size / s.patch_size) + 1;
  CANN_RETURN_IF_ERROR(validate(s, present));
  return s;
}

std::vector<std::string> shipped_model_names() {
  return embedded_names("configs/models", ".yaml");
}

StatusOr<ModelSpec> load_model_spec(const std::string& name_or_path) {
  const bool looks_like_path = name_or_path.find('/') != std::string::npos ||
                               name_or_path.ends_with(".yaml") || name_or_path.ends_with(".yml") ||
                               name_or_path.ends_with(".json");
  if (path_exists(name_or_path) || looks_like_path) {
    CANN_ASSIGN_OR_RETURN(std::string text, read_file(name_or_path));
    return parse_model_spec(text, name_or_path);
  }
  const std::string rel = "configs/models/" + name_or_path + ".yaml";
  if (auto text = embedded_file(rel)) {
    CANN_ASSIGN_OR_RETURN(ModelSpec s, parse_model_spec(*text, rel));
    s.name = name_or_path;
    return s;
  }
  std::string names;
  for (const auto& n : shipped_model_names()) names += (names.empty() ? "" : ", ") + n;
  return NotFound("unknown model '" + name_or_path + "'; hint: use one of " + names +
                  ", or a path to a YAML or config.json file");
}

}  // namespace cann::model
