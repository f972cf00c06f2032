// Rotary position embeddings applied to query and key heads (Su et al. 2021). Each rotated
// pair (a, b) of a head at position p turns by the angle p * inv_freq[i]:
//   a' = a cos - b sin,  b' = b cos + a sin   (cos and sin carry the yarn attention factor).
// Two pairings, as the model families lay out their weights:
// - kHalves: pair i is (i, i + R/2), Hugging Face's rotate_half (transformers,
//   models/llama/modeling_llama.py, rotate_half / apply_rotary_pos_emb): Llama, Qwen, Mixtral.
// - kInterleaved: pair i is (2i, 2i+1), the complex-number form of DeepSeek's own code
//   (DeepSeek-V3 inference/model.py, apply_rotary_emb) for q_pe and k_pe. HF's deepseek_v3
//   with rope_interleave (apply_rotary_pos_emb_interleave) computes the same rotated pairs but
//   writes them de-interleaved (all first members, then all second members); the same
//   permutation of q's and k's rotary columns leaves every score q.k unchanged.
// Frequencies come from kernels/cpu/rope_scaling; a table of cos and sin per position is built
// once, so the step loop does no trigonometry.
#pragma once

#include <vector>

#include "kernels/cpu/rope_scaling.h"

namespace cann::kernels {

enum class RopeLayout { kHalves, kInterleaved };

// cos and sin are (max_positions, half), half = rotary_dim/2, each already multiplied by the
// attention factor: cos[p*half + i] = attention_factor * cos(p * inv_freq[i]).
struct RopeTable {
  int max_positions = 0;
  int half = 0;
  std::vector<float> cos, sin;
};

// Angles are formed in double from the float frequencies, so entry p is the correctly rounded
// value at every position (float32 products would lose ~p*6e-8 radians).
RopeTable rope_table(const RopeFrequencies& f, int max_positions);

// x is (N, row_stride); head h of a row occupies columns [h*head_size, (h+1)*head_size), and
// its rotated columns are [rot_offset, rot_offset + rotary_dim) of the head (rotary_dim is the
// table's 2*half). Examples: q and k heads inside a fused qkv buffer (heads = NH + KVH,
// row_stride = (NH + 2*KVH)*HS, rot_offset 0); DeepSeek's q (heads NH, head_size
// qk_nope + qk_rope, rot_offset qk_nope); k_pe as one head at the end of the kv_a output row
// (heads 1, head_size = row_stride = kv_lora_rank + qk_rope, rot_offset kv_lora_rank).
struct RopeShape {
  int N;  // rows (tokens)
  int heads;
  int head_size;
  int row_stride;
  int rot_offset;
  RopeLayout layout;
};

// Rotates x in place; pos (N) are positions in [0, max_positions). Columns outside the rotated
// ones are not touched.
void rope_forward(float* x, const int* pos, const RopeTable& t, const RopeShape& s);
// dx holds d(rotated x) on entry and is overwritten, on the rotated columns, with the gradient
// w.r.t. x before rotation: the transposed rotation. The other columns pass through as they
// are (their gradient is the identity's).
void rope_backward(float* dx, const int* pos, const RopeTable& t, const RopeShape& s);

}  // namespace cann::kernels
