// Parameter and FLOP counts per block (see model_shape.h).
//
// Worked example, vit_g (Zhai et al. 2022, ViT-g/14: width 1408, depth 40, MLP 6144, 16 heads,
// 224x224 images, 14x14 patches, so 256 patches + 1 class token = 257 tokens):
//   per layer: QKV 1408*4224 + 4224, proj 1408*1408 + 1408, MLP 2*1408*6144 + 6144 + 1408,
//              2 layernorms 4*1408                                     = 25,250,176
//   40 layers                                                          = 1,010,007,040
//   patch embedding 3*14*14*1408 + 1408, class token 1408, positions 257*1408 = 1,192,576
//   final layernorm 2*1408, head 1408*1000 + 1000                      = 1,411,816
//   total 1,012,611,432: the "1011M" of Zhai et al. (2022), Table 2 (which counts the model
//   without a task head).
#include "plan/model_shape.h"

#include "model/flops.h"
#include "model/param_table.h"

namespace cann::plan {

ModelShape model_shape(const model::ModelSpec& m) {
  ModelShape s;
  const double h = m.hidden_size, f = m.intermediate_size, qkv = m.qkv_size();
  const double L = m.num_hidden_layers;
  s.attention_params = h * qkv + qkv + h * h + h;
  s.dense_mlp_params = 2 * h * f + f + h;
  s.norm_params = 4 * h;
  if (m.is_moe()) {
    const double fm = m.moe_intermediate_size;
    s.expert_params = 2 * h * fm + fm + h;
    s.router_params = m.num_local_experts * h;
  }
  s.final_norm_params = 2 * h;
  const double moe_layers = m.num_moe_layers(), dense_layers = L - moe_layers;
  double layers_total = L * (s.attention_params + s.norm_params) +
                        dense_layers * s.dense_mlp_params +
                        moe_layers * (m.num_local_experts * s.expert_params + s.router_params);

  if (m.architecture == model::Architecture::kVit) {
    const double patch_in = static_cast<double>(m.num_channels) * m.patch_size * m.patch_size;
    s.embedding_params = patch_in * h + h + h + m.seq_length * h;  // projection, cls, positions
    s.head_params = h * m.num_classes + m.num_classes;
    s.vocab_or_classes = m.num_classes;
    s.tied_head = false;
    s.total_params = layers_total + s.embedding_params + s.final_norm_params + s.head_params;
    // Matmul parameters per token: the layers (only top-k experts), the patch projection; the
    // head runs once per image, i.e. 1/seq_length of a token's share.
    double active = 0;
    for (int l = 0; l < m.num_hidden_layers; ++l) {
      active += h * qkv + h * h;
      active += m.is_moe_layer(l) ? m.num_experts_per_tok * 2 * h * m.moe_intermediate_size +
                                        h * m.num_local_experts
                                  : 2 * h * f;
    }
    active += patch_in * h * (m.seq_length - 1.0) / m.seq_length;
    active += h * m.num_classes / static_cast<double>(m.seq_length);
    s.active_params_per_token = active;
    s.flops_per_token = 6 * active + 12 * L * h * m.seq_length;
    return s;
  }
  s.embedding_params =
      static_cast<double>(m.vocab_size) * h + static_cast<double>(m.seq_length) * h;
  s.vocab_or_classes = m.vocab_size;
  s.tied_head = true;
  s.total_params = static_cast<double>(model::build_param_table(m).num_parameters());
  s.active_params_per_token = model::active_matmul_params(m);
  s.flops_per_token = model::train_flops_per_token(m, m.seq_length);
  return s;
}

}  // namespace cann::plan
