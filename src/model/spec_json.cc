// ModelSpec -> JSON.
#include "model/spec_json.h"

#include "core/json_line.h"

namespace cann::model {

std::string spec_to_json(const ModelSpec& s) {
  JsonLine j;
  j.add("architecture", architecture_name(s.architecture))
      .add("hidden_size", s.hidden_size)
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
    j.add("vocab_size", s.vocab_size).add("seq_length", s.seq_length);
  }
  if (s.is_moe()) {
    j.add("num_local_experts", s.num_local_experts)
        .add("num_experts_per_tok", s.num_experts_per_tok)
        .add("moe_intermediate_size", s.moe_intermediate_size)
        .add("moe_layer_freq", s.moe_layer_freq)
        .add("capacity_factor", s.capacity_factor)
        .add("router_aux_loss_coef", s.router_aux_loss_coef);
  }
  return j.str();
}

}  // namespace cann::model
