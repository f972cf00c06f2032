// Model spec reading: the family from `architecture` or `model_type`, that family's defaults,
// every key through the key table (spec_keys.cc), the keys that depend on each other
// (spec_finish.cc), then validation of shapes that contradict each other. Every error is one
// line naming the file and the key, and says what to do.
#include "model/spec.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>

#include "core/embedded.h"
#include "core/fs.h"
#include "model/spec_keys.h"
#include "model/spec_values.h"

namespace cann::model {
namespace {

using spec_keys::spec_error;

struct FamilyName {
  Family family;
  const char* name;
  Architecture architecture;
};

constexpr FamilyName kFamilies[] = {
    {Family::kGpt2, "gpt2", Architecture::kGpt},
    {Family::kBert, "bert", Architecture::kBert},
    {Family::kVit, "vit", Architecture::kVit},
    {Family::kLlama, "llama", Architecture::kGpt},
    {Family::kMistral, "mistral", Architecture::kGpt},
    {Family::kMixtral, "mixtral", Architecture::kGpt},
    {Family::kQwen2, "qwen2", Architecture::kGpt},
    {Family::kQwen2Moe, "qwen2_moe", Architecture::kGpt},
    {Family::kQwen3, "qwen3", Architecture::kGpt},
    {Family::kQwen3Moe, "qwen3_moe", Architecture::kGpt},
    {Family::kDeepseekV2, "deepseek_v2", Architecture::kGpt},
    {Family::kDeepseekV3, "deepseek_v3", Architecture::kGpt},
};

Status check_positive(const ModelSpec& s, const char* key, long long v) {
  if (v <= 0) return spec_error(s.source, key, "must be positive, got " + std::to_string(v));
  return OkStatus();
}

Status validate_moe(const ModelSpec& s) {
  const std::string& src = s.source;
  CANN_RETURN_IF_ERROR(check_positive(s, "num_experts_per_tok", s.num_experts_per_tok));
  CANN_RETURN_IF_ERROR(check_positive(s, "moe_intermediate_size", s.moe_intermediate_size));
  const int E = s.num_local_experts, K = s.num_experts_per_tok;
  if (K > E)
    return spec_error(src, "num_experts_per_tok",
                      std::to_string(K) + " experts per token exceed the " + std::to_string(E) +
                          " routed experts (num_local_experts / num_experts / n_routed_experts); "
                          "hint: lower it");
  if (s.num_moe_layers() == 0)
    return spec_error(src, "num_local_experts",
                      std::to_string(E) +
                          " experts but no layer is an MoE layer (moe_layer_freq, "
                          "first_k_dense_replace, decoder_sparse_step or "
                          "mlp_only_layers); hint: set num_experts to 0 for a "
                          "dense model");
  if (s.topk_method != TopkMethod::kGreedy) {
    if (s.topk_group > s.n_group)
      return spec_error(src, "topk_group",
                        std::to_string(s.topk_group) + " groups to keep exceed n_group " +
                            std::to_string(s.n_group) + "; hint: lower topk_group");
    if (E % s.n_group != 0)
      return spec_error(src, "n_group",
                        std::to_string(s.n_group) + " groups do not divide the " +
                            std::to_string(E) + " routed experts");
    if (K > s.topk_group * (E / s.n_group))
      return spec_error(src, "num_experts_per_tok",
                        std::to_string(K) + " experts per token exceed the " +
                            std::to_string(s.topk_group * (E / s.n_group)) +
                            " experts of the topk_group groups a token may use");
    if (s.topk_method == TopkMethod::kNoAuxTc && E / s.n_group < 2)
      return spec_error(src, "n_group",
                        "noaux_tc ranks groups by their two best experts; each of the " +
                            std::to_string(s.n_group) + " groups has fewer than two");
  }
  if (s.routing == MoeRouting::kCapacity && !(s.capacity_factor > 0))
    return spec_error(src, "capacity_factor", "must be positive");
  if (!(s.router_aux_loss_coef >= 0))
    return spec_error(src, "router_aux_loss_coef", "must be zero or positive");
  if (s.family == Family::kGpt2 || s.family == Family::kBert || s.family == Family::kVit) {
    if (s.moe_layer_freq > s.num_hidden_layers)
      return spec_error(src, "moe_layer_freq",
                        "exceeds num_hidden_layers, so no layer would be an MoE layer");
  }
  return OkStatus();
}

Status validate_attention(const ModelSpec& s) {
  const std::string& src = s.source;
  if (s.mla_enabled) {
    const MlaSpec& m = s.mla;
    for (auto [key, v] : {std::pair{"kv_lora_rank", m.kv_lora_rank},
                          {"qk_nope_head_dim", m.qk_nope_head_dim},
                          {"qk_rope_head_dim", m.qk_rope_head_dim},
                          {"v_head_dim", m.v_head_dim}})
      CANN_RETURN_IF_ERROR(check_positive(s, key, v));
    if (m.qk_rope_head_dim % 2 != 0)
      return spec_error(src, "qk_rope_head_dim", "rotary dimensions come in pairs: must be even");
    return OkStatus();
  }
  if (s.head_dim == 0 && s.hidden_size % s.num_attention_heads != 0)
    return spec_error(src, "num_attention_heads",
                      std::to_string(s.num_attention_heads) + " heads do not divide hidden_size " +
                          std::to_string(s.hidden_size) +
                          " and no head_dim is given; hint: pick a head count that divides it, "
                          "or set head_dim");
  if (s.num_attention_heads % s.num_key_value_heads != 0)
    return spec_error(src, "num_key_value_heads",
                      std::to_string(s.num_key_value_heads) +
                          " kv heads do not divide num_attention_heads " +
                          std::to_string(s.num_attention_heads));
  if (s.positions == PositionKind::kRotary) {
    const double rotary = s.head_size() * s.rope.partial_rotary_factor;
    if (rotary != static_cast<double>(static_cast<long long>(rotary)) ||
        static_cast<long long>(rotary) % 2 != 0 || rotary < 2)
      return spec_error(src, "partial_rotary_factor",
                        "head_dim " + std::to_string(s.head_size()) + " x " +
                            std::to_string(s.rope.partial_rotary_factor) +
                            " is not an even number of rotary dimensions");
  }
  return OkStatus();
}

Status validate(const ModelSpec& s, const std::set<std::string>& present) {
  const std::string& src = s.source;
  for (const char* key : {"hidden_size", "num_hidden_layers", "num_attention_heads"})
    if (!present.count(key)) return spec_error(src, key, "missing; hint: every model needs it");
  CANN_RETURN_IF_ERROR(check_positive(s, "num_key_value_heads", s.num_key_value_heads));
  CANN_RETURN_IF_ERROR(check_positive(s, "intermediate_size", s.intermediate_size));
  CANN_RETURN_IF_ERROR(validate_attention(s));
  if (s.architecture == Architecture::kVit) {
    for (const char* key : {"image_size", "patch_size", "num_classes"})
      if (!present.count(key)) return spec_error(src, key, "missing; hint: a vit model needs it");
    if (s.image_size % s.patch_size != 0)
      return spec_error(src, "patch_size",
                        "does not divide image_size " + std::to_string(s.image_size));
  } else {
    if (!present.count("vocab_size"))
      return spec_error(src, "vocab_size", "missing; hint: a language model needs it");
    if (s.seq_length <= 0)
      return spec_error(src, "seq_length",
                        "missing; hint: a language model needs it (or max_position_embeddings)");
    if (s.positions == PositionKind::kLearned && s.seq_length > s.position_rows())
      return spec_error(src, "seq_length",
                        std::to_string(s.seq_length) + " exceeds the learned position table of " +
                            std::to_string(s.max_position_embeddings) +
                            " (max_position_embeddings)");
  }
  if (s.num_local_experts < 0)
    return spec_error(src, "num_local_experts",
                      "must be 0 (dense) or positive, got " + std::to_string(s.num_local_experts));
  if (s.is_moe()) CANN_RETURN_IF_ERROR(validate_moe(s));
  return OkStatus();
}

// What a recommendation model's spec is for, to those who reach for it here.
constexpr const char* kRecommendationUse =
    "`cann-train run --model` trains in one process; the planner and the transformer engine "
    "take transformer families only; hint: use `cann-train run` for it";

// The family named by `architecture` and/or `model_type` (they must agree when both are given).
StatusOr<Family> read_family(const YAML::Node& root, const std::string& source) {
  std::optional<Family> family;
  std::string from;
  for (const char* key : {"architecture", "model_type"}) {
    const YAML::Node v = root[key];
    if (!v || v.IsNull()) continue;
    const std::string k = key;
    CANN_ASSIGN_OR_RETURN(std::string name, spec_keys::read_string(v, {k, source}));
    if (name == "dlrm" || name == "two_tower")
      return spec_error(
          source, key,
          "'" + name + "' is a recommendation model, which " + std::string(kRecommendationUse));
    auto f = parse_family(name);
    if (!f.ok()) return spec_error(source, key, f.status().message());
    if (family && *family != *f)
      return spec_error(source, key,
                        "'" + name + "' contradicts " + from + "; hint: keep one of them");
    family = *f;
    from = k + " '" + name + "'";
  }
  if (!family)
    return spec_error(source, "architecture",
                      "missing; hint: set architecture (gpt, bert, vit) or model_type (llama, "
                      "mixtral, qwen3, deepseek_v3, ...)");
  return *family;
}

}  // namespace

int ModelSpec::num_moe_layers() const {
  int n = 0;
  for (int l = 0; l < num_hidden_layers; ++l) n += is_moe_layer(l);
  return n;
}

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

std::string_view family_name(Family f) {
  for (const auto& n : kFamilies)
    if (n.family == f) return n.name;
  return "?";
}

StatusOr<Family> parse_family(std::string_view name) {
  if (name == "gpt") return Family::kGpt2;
  for (const auto& n : kFamilies)
    if (name == n.name) return n.family;
  std::string names = "gpt";
  for (const auto& n : kFamilies) names += std::string(", ") + n.name;
  return InvalidArgument("unknown architecture '" + std::string(name) + "'; hint: use one of " +
                         names);
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

  spec_keys::SpecDraft d;
  d.spec.source = source;
  d.spec.name = std::filesystem::path(source).stem().string();
  CANN_ASSIGN_OR_RETURN(Family family, read_family(root, source));
  spec_keys::apply_family_defaults(family, &d.spec);
  for (const auto& n : kFamilies)
    if (n.family == family) d.spec.architecture = n.architecture;
  for (const auto& item : root) {
    const std::string key = item.first.as<std::string>();
    if (spec_keys::is_family_key(key)) continue;
    CANN_RETURN_IF_ERROR(spec_keys::read_key(key, item.second, &d));
  }
  CANN_RETURN_IF_ERROR(spec_keys::finish_draft(&d));
  CANN_RETURN_IF_ERROR(validate(d.spec, d.present));
  return std::move(d.spec);
}

std::vector<std::string> shipped_model_names() {
  return embedded_names("configs/models", ".yaml");
}

StatusOr<ModelSpec> load_model_spec(const std::string& name_or_path) {
  if (path_exists(name_or_path)) {
    CANN_ASSIGN_OR_RETURN(std::string text, read_file(name_or_path));
    return parse_model_spec(text, name_or_path);
  }
  // A shipped name, bare or as its file name ("moe_bert.yaml"), from any directory.
  std::string stem = name_or_path;
  for (const char* ext : {".yaml", ".yml", ".json"})
    if (stem.ends_with(ext)) stem.resize(stem.size() - std::string_view(ext).size());
  if (stem.find('/') == std::string::npos) {
    const std::string rel = "configs/models/" + stem + ".yaml";
    if (auto text = embedded_file(rel)) {
      CANN_ASSIGN_OR_RETURN(ModelSpec s, parse_model_spec(*text, rel));
      s.name = stem;
      return s;
    }
    if (embedded_file("configs/recsys/" + stem + ".yaml"))
      return InvalidArgument("'" + stem + "' is a recommendation model, which " +
                             std::string(kRecommendationUse));
  }
  std::string names;
  for (const auto& n : shipped_model_names()) names += (names.empty() ? "" : ", ") + n;
  if (name_or_path.find('/') != std::string::npos)
    return InvalidArgument("cannot read model file '" + name_or_path +
                           "': no such file; hint: check the path, or use a shipped name (" +
                           names + ")");
  return NotFound("unknown model '" + name_or_path + "'; hint: use one of " + names +
                  ", or a path to a YAML or config.json file");
}

}  // namespace cann::model
