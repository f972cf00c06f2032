// rope_scaling / rope_parameters: the rotary embedding's scaling type and its parameters, as
// Hugging Face's modeling_rope_utils reads them. Types: default (none), linear (Chen et al.
// 2023, position interpolation), llama3 (Dubey et al. 2024: low frequencies divided by factor,
// high kept, a smooth ramp between), yarn (Peng et al. 2023, with DeepSeek's mscale). Every
// key a type does not read is refused, and so are the types cann-train does not compute
// (dynamic NTK rescales with the sequence at inference; longrope, mrope).
#include <yaml-cpp/yaml.h>

#include <map>
#include <set>

#include "model/spec_keys.h"
#include "model/spec_values.h"

namespace cann::model::spec_keys {

namespace {

const std::map<std::string, std::set<std::string>>& type_keys() {
  static const std::map<std::string, std::set<std::string>> kKeys = {
      {"default", {}},
      {"linear", {"factor"}},
      {"llama3",
       {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}},
      {"yarn",
       {"factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale",
        "mscale_all_dim", "attention_factor", "truncate"}},
  };
  return kKeys;
}

// Reads a rope mapping. `params` is true for rope_parameters, which also carries rope_theta
// and partial_rotary_factor.
Status read_rope_map(const YAML::Node& v, const KeyRef& k, SpecDraft* d, bool params) {
  if (!v.IsMap()) return spec_error(k.source, k.key, "expected a mapping");
  RopeSpec& r = d->spec.rope;
  std::string type;
  for (const char* tk : {"type", "rope_type"}) {
    const YAML::Node t = v[tk];
    if (!t || t.IsNull()) continue;
    const std::string name = k.key + "." + tk;
    CANN_ASSIGN_OR_RETURN(std::string s, read_string(t, KeyRef{name, k.source}));
    if (!type.empty() && s != type)
      return spec_error(k.source, name, "'" + s + "' contradicts the other type '" + type + "'");
    type = s;
  }
  if (type.empty()) type = "default";
  auto allowed = type_keys().find(type);
  if (allowed == type_keys().end())
    return spec_error(k.source, k.key + ".type",
                      "rope scaling type '" + type +
                          "' is not one cann-train computes; hint: use linear, llama3 or yarn, "
                          "or remove " +
                          k.key);
  for (const auto& item : v) {
    const std::string key = item.first.as<std::string>();
    const std::string name = k.key + "." + key;
    const KeyRef ref{name, k.source};
    const YAML::Node& val = item.second;
    if (key == "type" || key == "rope_type") continue;
    if (params && key == "rope_theta") {
      if (d->present.count("rope_theta"))
        return spec_error(k.source, name, "given twice (also as rope_theta)");
      CANN_ASSIGN_OR_RETURN(r.theta, read_number(val, ref));
      if (!(r.theta > 1)) return spec_error(k.source, name, "must be above 1");
      d->rope_theta_in_parameters = true;
      continue;
    }
    if (params && key == "partial_rotary_factor") {
      CANN_ASSIGN_OR_RETURN(double f, read_number(val, ref));
      if (!(f > 0 && f <= 1)) return spec_error(k.source, name, "must be in (0, 1]");
      r.partial_rotary_factor = f;
      continue;
    }
    if (!allowed->second.count(key))
      return spec_error(k.source, name,
                        "not a parameter of rope type '" + type + "'; hint: remove it");
    if (val.IsNull()) continue;
    if (key == "original_max_position_embeddings") {
      CANN_ASSIGN_OR_RETURN(r.original_max_position, read_int_in(val, ref, 1, (1LL << 31) - 1));
    } else if (key == "truncate") {
      CANN_ASSIGN_OR_RETURN(r.truncate, read_bool(val, ref));
    } else {
      CANN_ASSIGN_OR_RETURN(double x, read_number(val, ref));
      if (key == "factor") r.factor = x;
      if (key == "low_freq_factor") r.low_freq_factor = x;
      if (key == "high_freq_factor") r.high_freq_factor = x;
      if (key == "beta_fast") r.beta_fast = x;
      if (key == "beta_slow") r.beta_slow = x;
      if (key == "mscale") r.mscale = x;
      if (key == "mscale_all_dim") r.mscale_all_dim = x;
      if (key == "attention_factor") r.attention_factor = x;
    }
  }
  if (type == "default") {
    r.scaling = RopeScaling::kNone;
    return OkStatus();
  }
  if (!v["factor"] || v["factor"].IsNull())
    return spec_error(k.source, k.key + ".factor",
                      "missing; hint: rope type '" + type + "' needs its scaling factor");
  if (!(r.factor >= 1))
    return spec_error(k.source, k.key + ".factor", "must be at least 1 (a context extension)");
  if (type == "linear") {
    r.scaling = RopeScaling::kLinear;
  } else if (type == "llama3") {
    r.scaling = RopeScaling::kLlama3;
    for (const char* need :
         {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
      if (!v[need] || v[need].IsNull())
        return spec_error(k.source, k.key + "." + need, "missing; hint: llama3 scaling needs it");
    if (!(r.high_freq_factor > r.low_freq_factor))
      return spec_error(k.source, k.key + ".high_freq_factor",
                        "must be above low_freq_factor (the ramp between them would be empty)");
  } else {
    r.scaling = RopeScaling::kYarn;
    if (!(r.beta_fast > r.beta_slow))
      return spec_error(k.source, k.key + ".beta_fast", "must be above beta_slow");
  }
  return OkStatus();
}

}  // namespace

Status read_rope_scaling(const YAML::Node& v, const KeyRef& k, SpecDraft* d) {
  if (d->present.count("rope_parameters"))
    return spec_error(k.source, k.key, "given twice (also as rope_parameters)");
  return read_rope_map(v, k, d, false);
}

Status read_rope_parameters(const YAML::Node& v, const KeyRef& k, SpecDraft* d) {
  if (d->present.count("rope_scaling"))
    return spec_error(k.source, k.key, "given twice (also as rope_scaling)");
  return read_rope_map(v, k, d, true);
}

}  // namespace cann::model::spec_keys
