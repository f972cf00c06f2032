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
//
// Worked example, DeepSeek-V3 (DeepSeek-AI 2024): per layer MLA 187,107,328 and two norms
// 14,336; 3 dense layers of 3*7168*18432 = 396,361,728; 58 MoE layers of 256 experts *
// 3*7168*2048 + a shared expert of the same width + a 256 x 7168 router = 11,320,164,352;
// embedding and untied head 2 * 129280*7168; final norm 7168: 671,026,404,352 in all. The
// multi-token prediction module adds one MoE layer, 2*7168*7168 and three norms: 11.61B.
#include "plan/model_shape.h"

#include "model/flops.h"
#include "model/param_table.h"

namespace cann::plan {
namespace {

// Parameters of layer l in a table, split into routed experts and the rest. Here and below,
// state that is not trained (DeepSeek-V3's expert bias) is no parameter, as in the table's
// own count.
LayerParams sum_layer(const model::ParamTable& t, int l) {
  LayerParams p;
  for (const auto& info : t.tensors()) {
    if (info.layer != l || !info.trained) continue;
    (info.expert ? p.expert_params : p.params) += static_cast<double>(info.numel);
  }
  return p;
}

double count_prefix(const model::ParamTable& t, int l, const std::string& part) {
  double n = 0;
  const std::string prefix = "h." + std::to_string(l) + "." + part;
  for (const auto& info : t.tensors())
    if (info.trained && info.name.compare(0, prefix.size(), prefix) == 0)
      n += static_cast<double>(info.numel);
  return n;
}

int first_layer(const model::ModelSpec& m, bool moe) {
  for (int l = 0; l < m.num_hidden_layers; ++l)
    if (m.is_moe_layer(l) == moe) return l;
  return -1;
}

}  // namespace

LayerParams layer_params(const model::ModelSpec& m, int layer, int tp, int ep) {
  const model::ParamTable t = model::build_chunked_param_table(m, tp, {{layer, layer + 1}}, ep);
  return sum_layer(t, layer);
}

ModelShape model_shape(const model::ModelSpec& m) {
  ModelShape s;
  const double h = m.hidden_size, f = m.intermediate_size, qkv = m.qkv_size();
  const double L = m.num_hidden_layers;
  if (m.architecture == model::Architecture::kVit) {
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
    const double layers_total =
        L * (s.attention_params + s.norm_params) + dense_layers * s.dense_mlp_params +
        moe_layers * (m.num_local_experts * s.expert_params + s.router_params);
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

  // Language models: the counts of the parameter table, block by block.
  const model::ParamTable t = model::build_param_table(m);
  s.total_params = static_cast<double>(t.num_parameters());
  const int dense = first_layer(m, false), moe = first_layer(m, true);
  const int any = dense >= 0 ? dense : moe;
  const double attention_norms =
      count_prefix(t, any, "attn.q_norm") + count_prefix(t, any, "attn.k_norm") +
      count_prefix(t, any, "attn.q_a_norm") + count_prefix(t, any, "attn.kv_a_norm");
  s.attention_params = count_prefix(t, any, "attn.") - attention_norms;
  s.norm_params = count_prefix(t, any, "ln") + attention_norms;
  if (dense >= 0) s.dense_mlp_params = count_prefix(t, dense, "mlp.");
  if (moe >= 0) {
    s.router_params = count_prefix(t, moe, "moe.router");
    s.shared_expert_params =
        count_prefix(t, moe, "moe.shared.") + count_prefix(t, moe, "moe.shared_gate");
    s.expert_params = sum_layer(t, moe).expert_params / m.num_local_experts;
  }
  s.embedding_params =
      static_cast<double>(m.vocab_size) * h + (m.positions == model::PositionKind::kLearned
                                                   ? static_cast<double>(m.position_rows()) * h
                                                   : 0.0);
  s.final_norm_params = m.norm == model::NormKind::kLayerNorm ? 2 * h : h;
  s.vocab_or_classes = m.vocab_size;
  s.tied_head = m.tie_word_embeddings;
  s.head_params = m.tie_word_embeddings ? 0 : static_cast<double>(m.vocab_size) * h;
  s.active_params_per_token = model::active_matmul_params(m);
  s.flops_per_token = model::train_flops_per_token(m, m.seq_length);

  if (m.num_nextn_predict_layers > 0) {
    // Each module: enorm, hnorm, the shared head's norm (3h), eh_proj (2h x h) and one block
    // like the last layer; its matmuls per token: eh_proj, the block, and the shared head.
    const int last = m.num_hidden_layers - 1;
    const LayerParams block = sum_layer(t, last);
    const double module = 3 * h + 2 * h * h + block.params + block.expert_params;
    s.mtp_params = m.num_nextn_predict_layers * module;
    const double block_active = model::attention_matmul_params(m) +
                                (m.is_moe_layer(last) ? model::moe_matmul_params_per_token(m)
                                                      : model::dense_mlp_matmul_params(m));
    const double module_flops = 6 * (2 * h * h + block_active + h * m.vocab_size) +
                                model::attention_flops_per_token(m, last, m.seq_length);
    s.flops_per_token += m.num_nextn_predict_layers * module_flops;
  }
  return s;
}

}  // namespace cann::plan
