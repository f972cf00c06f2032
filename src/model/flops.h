// Model FLOPs per token, in the convention of PaLM (Chowdhery et al. 2022, appendix B):
// 6 * (matmul parameters a token passes through) + 12 * layers * hidden * seq_len, counting
// forward and backward, full (unmasked) attention, and no recomputation. For MoE layers only
// the num_experts_per_tok experts a token visits count. This is the figure behind "achieved
// GFLOP/s" and MFU everywhere in cann-train.
#pragma once

#include "model/spec.h"

namespace cann::model {

// Matmul parameters one token passes through: QKV, attention output, MLP or K experts plus the
// router, and the output head (tied or not, it is a V x C matmul). Embedding lookups and norms
// are not matmuls and do not count.
double active_matmul_params(const ModelSpec& s);
double train_flops_per_token(const ModelSpec& s, int seq_len);

}  // namespace cann::model
