// Rotary embedding frequencies (Su et al. 2021) for a model's rope config: the inverse
// frequency of every rotated pair and the factors by which the scaled variants change the
// attention scores, computed as Hugging Face transformers computes them
// (src/transformers/modeling_rope_utils.py; each formula cites its function in the .cc).
//
// The config mirrors config.json: rope_theta, the rotary dimension, and rope_scaling with
// rope_type "linear", "llama3" or "yarn" (DeepSeek-V2/V3, Qwen long-context). kernels/cpu/rope
// turns the frequencies into a per-position cos/sin table and applies the rotation.
#pragma once

#include <vector>

#include "core/status.h"

namespace cann::kernels {

enum class RopeScaling { kNone, kLinear, kLlama3, kYarn };

struct RopeConfig {
  double theta = 10000.0;  // rope_theta
  // Rotated dimensions of a head, even: head_dim for Llama/Qwen/Mixtral,
  // int(head_dim * partial_rotary_factor) for partial-rotary models, qk_rope_head_dim for
  // DeepSeek's MLA.
  int rotary_dim = 0;
  RopeScaling scaling = RopeScaling::kNone;
  double factor = 1.0;            // linear, llama3, yarn
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  // llama3 and yarn: the context length the model was pretrained at. A yarn config without it
  // means max_position_embeddings (what older transformers used): the caller passes that.
  int original_max_position_embeddings = 0;
  double beta_fast = 32.0;        // yarn; 0 means the default 32
  double beta_slow = 1.0;         // yarn; 0 means the default 1
  double mscale = 0.0;            // yarn; 0 means absent from the config
  double mscale_all_dim = 0.0;    // yarn; 0 means absent
  double attention_factor = 0.0;  // yarn; 0 means derived from factor and the mscales
  bool truncate = true;           // yarn: round the correction range outwards to integers
};

struct RopeFrequencies {
  // (rotary_dim/2): the angle of pair i at position p is p * inv_freq[i].
  std::vector<float> inv_freq;
  // Multiplies cos and sin, so the rotated part of both q and k (HF's attention_scaling): yarn
  // only, 1 otherwise.
  float attention_factor = 1.0f;
  // DeepSeek-V2/V3 multiply the softmax scale 1/sqrt(qk_head_dim) by this: yarn_get_mscale(
  // factor, mscale_all_dim)^2 when the config has mscale_all_dim, else 1. Llama and Qwen
  // models with yarn leave their softmax scale alone and ignore it.
  float softmax_scale_factor = 1.0f;
};

// Bad configs (odd or non-positive rotary_dim, factor <= 0, llama3/yarn without
// original_max_position_embeddings, llama3 with equal low and high factors) are
// InvalidArgument with a hint.
StatusOr<RopeFrequencies> rope_frequencies(const RopeConfig& c);

// YaRN's magnitude correction 0.1 * mscale * ln(scale) + 1, or 1 when scale <= 1 (transformers,
// modeling_rope_utils.py, _compute_yarn_parameters.get_mscale; DeepSeek-V3 and HF deepseek_v3,
// yarn_get_mscale).
double yarn_get_mscale(double scale, double mscale);

}  // namespace cann::kernels
