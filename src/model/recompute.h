// Activation recomputation (Korthikanti et al. 2022, "Reducing Activation Recomputation in
// Large Transformer Models"): trade backward compute for activation memory.
//   kNone       every layer keeps all it saved in forward.
//   kSelective  layers drop what attention's softmax saves for backward; each layer's backward
//               recomputes it from its saved qkv into one buffer shared by all layers. With
//               the fused attention kernel (kernels/cpu/attention.h) that is the log-sum-exp of
//               each query's scores, B*H*T floats, not the B*H*T*T probabilities it was when the
//               kernel kept them: the saving is small, and the mode remains for its recompute
//               cost and for parity with the planner's modes.
//   kFull       layers keep only their output (the next layer's input; the first layer's input
//               is the embedding output, kept anyway); each layer's backward re-runs its
//               forward into one set of layer buffers shared by all layers, then goes back.
//   kOp         the planner only (the engine refuses it, plan/engine_support.h): torchtitan's
//               per-operator policy ("selective" with selective_ac_option "op"), which saves
//               the attention kernel's output and every other matmul of a block, counting its
//               matmuls in forward order (in a Llama block wq, wv, w1, w2 are saved; wk, wo,
//               w3 and every elementwise op are recomputed in backward). Priced in
//               plan/layer_cost_attention.cc and plan/layer_cost_mlp.cc.
// Recomputation runs the same kernels on the same inputs, so gradients are bitwise those of
// kNone. The planner models the same layout (plan/engine_memory.h).
#pragma once

namespace cann::model {

enum class Recompute { kNone, kSelective, kFull, kOp };

}  // namespace cann::model
