// What cann-train's engine (model.h) builds today, checked against a spec before anything is
// allocated: dense blocks with LayerNorm or RMSNorm, learned or rotary positions (rope_theta,
// linear/llama3/yarn scaling), a GeLU or SwiGLU MLP, fused QKV with grouped KV heads and any
// head_dim, biases on or off, Qwen3's QK-norm, DeepSeek's multi-head latent attention, a tied
// or untied head; and routed experts (GeLU or SwiGLU, biases on or off) behind GShard's router
// or the families' (softmax or sigmoid scores, group-limited top-k, normalized and scaled
// weights, capacity or dropless, the Switch/Mixtral or sequence-wise balance loss, DeepSeek-V3's
// balancing bias), with shared experts (DeepSeek's, Qwen2-MoE's gated one). A spec that needs
// anything else (sliding windows, multi-token prediction, ...) is refused in one line naming
// what it needs, rather than trained as something it is not. The planner prices every family.
#pragma once

#include <string>

#include "core/status.h"
#include "model/spec.h"

namespace cann::model {

// OK if the engine builds this spec exactly; otherwise InvalidArgument (exit 2) listing the
// features it lacks.
Status engine_builds(const ModelSpec& spec);

// A one-line notice for settings the engine accepts but does not apply (dropout), or "".
std::string engine_notice(const ModelSpec& spec);

}  // namespace cann::model
