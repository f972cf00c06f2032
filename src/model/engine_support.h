// What cann-train's engine (model.h) builds today, checked against a spec before anything is
// allocated: GPT-2/BERT blocks with LayerNorm, learned positions, a GeLU MLP with biases, fused
// QKV with biases, a tied head, and GShard-style experts (softmax top-k without
// renormalization, capacity routing). A spec that needs anything else (Llama's RMSNorm, rotary
// positions and SwiGLU, MLA, shared experts, ...) is refused in one line naming what it needs,
// rather than trained as something it is not. The planner prices every family.
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
