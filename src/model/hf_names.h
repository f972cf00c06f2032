// Hugging Face tensor names: which block of which ParamTable tensor each tensor of a published
// checkpoint is, per family. cann-train fuses what the Hugging Face models keep apart (one QKV
// weight for q_proj/k_proj/v_proj, one (2F,C) fc for SwiGLU's gate_proj/up_proj, one (E,...)
// tensor for all experts), and every Hugging Face tensor is one contiguous block of a fused
// tensor: rows [q | k | v] of qkv.w, rows [gate | up] of fc.w, expert e's slice of an expert
// tensor. GPT-2 stores its projections as Conv1D, (in, out): the transpose of the block.
//
// Names follow the published modeling files and checkpoints (transformers' modeling_llama.py,
// modeling_mistral.py, modeling_mixtral.py, modeling_qwen2.py, modeling_qwen2_moe.py,
// modeling_qwen3.py, modeling_qwen3_moe.py, modeling_gpt2.py; deepseek-ai's
// modeling_deepseek.py for DeepSeek-V2/V3): "model.layers.N.self_attn.q_proj.weight",
// "model.layers.N.block_sparse_moe.experts.E.w1.weight" (Mixtral: w1 gate, w2 down, w3 up),
// "model.layers.N.mlp.shared_experts.gate_proj.weight" (DeepSeek), "transformer.h.N.attn.
// c_attn.weight" (GPT-2), ...
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/param_table.h"
#include "model/spec.h"

namespace cann::model {

struct HfTensor {
  std::string name;            // "model.layers.3.self_attn.k_proj.weight"
  std::vector<int64_t> shape;  // as the checkpoint stores it
  // The block of the single-process table's tensor `param` (empty: a tensor the engine holds
  // no parameter for, which must be zero; none today) starting `offset` floats into it, of
  // product(shape) floats.
  std::string param;
  size_t offset = 0;
  bool transposed = false;  // GPT-2's Conv1D: the checkpoint holds the (in, out) transpose
  size_t numel() const;
};

// Every tensor of the family's checkpoint for `spec`, in the order transformers writes them
// (embeddings, then each layer, then the final norm and head); covers each tensor of
// build_param_table(spec) exactly once. Fails for a spec with no Hugging Face layout (bert,
// cann-train's MoE GPT) with a one-line hint.
StatusOr<std::vector<HfTensor>> hf_tensors(const ModelSpec& spec);

// h's block of its ParamTable tensor (`param`: that tensor's values) as the checkpoint stores
// it, and back.
void hf_block_from_param(const HfTensor& h, const float* param, float* out);
void hf_block_to_param(const HfTensor& h, const float* block, float* param);

}  // namespace cann::model
