// FLOP accounting shared by the trainer's progress line and the planner.
//
// Matmul parameters per token, by block:
//   attention  multi-head: C*(heads + 2*kv_heads)*head_dim (QKV) + heads*head_dim*C (output);
//              latent (MLA): C*q_lora + q_lora*heads*qk_head (or C*heads*qk_head without the
//              query bottleneck) + C*(kv_lora + rope) + kv_lora*heads*(nope + v) + heads*v*C
//   MLP        GeLU 2*C*F; SwiGLU 3*C*F
//   MoE        K routed experts, the router C*E, the shared experts and Qwen2-MoE's shared gate
//   head       C*V (tied or not, it is a matmul)
// Attention scores and values add 6 * heads * keys * (qk_head + v_head) per token and layer
// (PaLM's 12*L*h*s when qk_head = v_head = h/heads), keys being the sequence, or the window for
// a sliding-window layer.
#include "model/flops.h"

#include <algorithm>

namespace cann::model {
namespace {

double mlp_params(const ModelSpec& s, double F) {
  return (s.mlp == MlpKind::kSwiGlu ? 3.0 : 2.0) * s.hidden_size * F;
}

}  // namespace

double attention_matmul_params(const ModelSpec& s) {
  const double C = s.hidden_size, H = s.num_attention_heads;
  if (s.mla_enabled) {
    const MlaSpec& m = s.mla;
    const double qk = m.qk_head_dim();
    const double q = m.q_lora_rank > 0 ? C * m.q_lora_rank + m.q_lora_rank * H * qk : C * H * qk;
    return q + C * (m.kv_lora_rank + m.qk_rope_head_dim) +
           m.kv_lora_rank * H * (m.qk_nope_head_dim + m.v_head_dim) + H * m.v_head_dim * C;
  }
  return C * s.qkv_size() + static_cast<double>(s.attention_out_size()) * C;
}

double dense_mlp_matmul_params(const ModelSpec& s) {
  return mlp_params(s, s.intermediate_size);
}

double moe_matmul_params_per_token(const ModelSpec& s) {
  if (!s.is_moe()) return 0.0;
  double p = s.num_experts_per_tok * mlp_params(s, s.moe_intermediate_size) +
             static_cast<double>(s.hidden_size) * s.num_local_experts;
  if (s.has_shared_experts()) p += mlp_params(s, s.shared_expert_intermediate_size);
  if (s.shared_expert_gate) p += s.hidden_size;
  return p;
}

double active_matmul_params(const ModelSpec& s) {
  const double attn = attention_matmul_params(s);
  double total = 0.0;
  for (int l = 0; l < s.num_hidden_layers; ++l)
    total +=
        attn + (s.is_moe_layer(l) ? moe_matmul_params_per_token(s) : dense_mlp_matmul_params(s));
  return total + static_cast<double>(s.hidden_size) * s.vocab_size;
}

double attention_flops_per_token(const ModelSpec& s, int layer, int seq_len) {
  const double qk = s.mla_enabled ? s.mla.qk_head_dim() : s.head_size();
  const double v = s.mla_enabled ? s.mla.v_head_dim : s.head_size();
  const int w = s.window(layer);
  const double keys = w > 0 ? std::min(w, seq_len) : seq_len;
  return 6.0 * s.num_attention_heads * keys * (qk + v);
}

double train_flops_per_token(const ModelSpec& s, int seq_len) {
  double attn = 0.0;
  for (int l = 0; l < s.num_hidden_layers; ++l) attn += attention_flops_per_token(s, l, seq_len);
  return 6.0 * active_matmul_params(s) + attn;
}

}  // namespace cann::model
