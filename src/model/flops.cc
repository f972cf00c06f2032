// FLOP accounting shared by the trainer's progress line and (later) the planner.
#include "model/flops.h"

namespace cann::model {

double active_matmul_params(const ModelSpec& s) {
  const double C = s.hidden_size;
  const double attn = C * s.qkv_size() + C * C;
  const double dense_mlp = 2.0 * C * s.intermediate_size;
  const double moe_mlp = s.is_moe() ? s.num_experts_per_tok * 2.0 * C * s.moe_intermediate_size +
                                          C * s.num_local_experts
                                    : 0.0;
  double total = 0.0;
  for (int l = 0; l < s.num_hidden_layers; ++l)
    total += attn + (s.is_moe_layer(l) ? moe_mlp : dense_mlp);
  return total + C * s.vocab_size;
}

double train_flops_per_token(const ModelSpec& s, int seq_len) {
  return 6.0 * active_matmul_params(s) +
         12.0 * s.num_hidden_layers * static_cast<double>(s.hidden_size) * seq_len;
}

}  // namespace cann::model
