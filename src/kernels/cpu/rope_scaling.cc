// Rope frequencies per scaling type. Everything is computed in double and rounded to float
// once; Hugging Face computes in float32 tensors, so a frequency here may differ from its
// value by an ulp or two of float (its pow is float32), which moves a rotation angle at
// position p by about p * 1e-7 relative: far below what a training run can see at the
// sequence lengths that need such a test.
#include "kernels/cpu/rope_scaling.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace cann::kernels {
namespace {

constexpr double kPi = 3.14159265358979323846;

// inv_freq[i] = theta^(-2i/dim), i < dim/2 (modeling_rope_utils.py,
// _compute_default_rope_parameters).
std::vector<double> default_inv_freq(double theta, int dim) {
  std::vector<double> f(dim / 2);
  for (int i = 0; i < dim / 2; ++i) f[i] = 1.0 / std::pow(theta, 2.0 * i / dim);
  return f;
}

// Llama 3.1 (modeling_rope_utils.py, _compute_llama3_parameters): with wavelength
// w = 2 pi / f and L the original context, wavelengths longer than L/low_freq_factor are
// interpolated (f / factor), shorter than L/high_freq_factor kept, and those between blended
// with s = (L/w - low) / (high - low): f' = (1 - s) f / factor + s f. A wavelength exactly at
// either bound falls in the blend, where s is 0 or 1, so the result is continuous.
void apply_llama3(std::vector<double>& f, const RopeConfig& c) {
  const double L = c.original_max_position_embeddings;
  const double low_wavelen = L / c.low_freq_factor;
  const double high_wavelen = L / c.high_freq_factor;
  for (double& v : f) {
    const double wavelen = 2.0 * kPi / v;
    if (wavelen > low_wavelen) {
      v /= c.factor;
    } else if (wavelen >= high_wavelen) {
      const double s = (L / wavelen - c.low_freq_factor) / (c.high_freq_factor - c.low_freq_factor);
      v = (1.0 - s) * v / c.factor + s * v;
    }
  }
}

// YaRN, "NTK-by-parts" (Peng et al. 2023; modeling_rope_utils.py, _compute_yarn_parameters).
// The pair whose frequency makes r full turns over the original context L sits at
//   d(r) = dim * ln(L / (2 pi r)) / (2 ln theta)          (find_correction_dim)
// Pairs below d(beta_fast) (many turns: high frequency) keep their frequency, pairs above
// d(beta_slow) are interpolated by 1/factor, and a linear ramp blends the ones between:
//   ramp_i = clamp((i - low) / (high - low), 0, 1);  f'_i = f_i * (ramp_i / factor + 1 - ramp_i)
// with low = floor(d(beta_fast)), high = ceil(d(beta_slow)) when truncating, clipped to
// [0, dim-1], and high nudged by 0.001 when equal to low (linear_ramp_factor). Worked example,
// DeepSeek-V3 (dim 64, theta 10000, L 4096, beta 32/1): d(32) = 64 ln(4096/(64 pi)) / (2 ln
// 10000) = 10.47 -> low 10; d(1) = 22.51 -> high 23: pairs 0-10 keep their frequency, 23-31
// are divided by the factor.
void apply_yarn(std::vector<double>& f, const RopeConfig& c, int dim) {
  const double beta_fast = c.beta_fast > 0 ? c.beta_fast : 32.0;
  const double beta_slow = c.beta_slow > 0 ? c.beta_slow : 1.0;
  const double L = c.original_max_position_embeddings;
  auto correction_dim = [&](double turns) {
    return dim * std::log(L / (turns * 2.0 * kPi)) / (2.0 * std::log(c.theta));
  };
  double low = correction_dim(beta_fast);
  double high = correction_dim(beta_slow);
  if (c.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  for (size_t i = 0; i < f.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    f[i] *= ramp / c.factor + (1.0 - ramp);
  }
}

Status bad(const std::string& what, const std::string& hint) {
  return InvalidArgument("rope config: " + what + "; hint: " + hint);
}

}  // namespace

double yarn_get_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

StatusOr<RopeFrequencies> rope_frequencies(const RopeConfig& c) {
  if (c.rotary_dim <= 0 || c.rotary_dim % 2 != 0)
    return bad(
        "rotary dimension " + std::to_string(c.rotary_dim) + " is not a positive even number",
        "head_dim * partial_rotary_factor (or qk_rope_head_dim) must be even");
  if (!(c.theta > 1.0)) return bad("rope_theta must be above 1", "set rope_theta, e.g. 10000");
  if (c.scaling != RopeScaling::kNone && !(c.factor > 0.0))
    return bad("rope_scaling.factor must be positive", "set rope_scaling.factor, e.g. 8");
  const bool needs_original = c.scaling == RopeScaling::kLlama3 || c.scaling == RopeScaling::kYarn;
  if (needs_original && c.original_max_position_embeddings <= 0)
    return bad("rope_scaling needs original_max_position_embeddings",
               "set it to the pretraining context length (8192 for Llama 3.1)");
  if (c.scaling == RopeScaling::kLlama3 && !(c.high_freq_factor > c.low_freq_factor))
    return bad("llama3 rope_scaling needs high_freq_factor > low_freq_factor",
               "Llama 3.1 uses low_freq_factor 1 and high_freq_factor 4");

  std::vector<double> f = default_inv_freq(c.theta, c.rotary_dim);
  RopeFrequencies out;
  switch (c.scaling) {
    case RopeScaling::kNone:
      break;
    case RopeScaling::kLinear:
      // Position interpolation: p / factor, folded into the frequencies
      // (_compute_linear_scaling_rope_parameters).
      for (double& v : f) v /= c.factor;
      break;
    case RopeScaling::kLlama3:
      apply_llama3(f, c);
      break;
    case RopeScaling::kYarn: {
      apply_yarn(f, c, c.rotary_dim);
      // _compute_yarn_parameters: an explicit attention_factor wins; else the ratio of the two
      // mscales when the config has both (DeepSeek: 1 when they are equal), else
      // get_mscale(factor) = 0.1 ln(factor) + 1.
      double af = c.attention_factor;
      if (!(af > 0.0)) {
        af = (c.mscale != 0.0 && c.mscale_all_dim != 0.0)
                 ? yarn_get_mscale(c.factor, c.mscale) / yarn_get_mscale(c.factor, c.mscale_all_dim)
                 : yarn_get_mscale(c.factor, 1.0);
      }
      out.attention_factor = static_cast<float>(af);
      // transformers, models/deepseek_v3/modeling_deepseek_v3.py, DeepseekV3Attention.__init__
      // (and DeepSeek-V2's DeepseekV2Attention): scaling *= yarn_get_mscale(factor,
      // mscale_all_dim)^2 when mscale_all_dim is set.
      if (c.mscale_all_dim != 0.0) {
        const double m = yarn_get_mscale(c.factor, c.mscale_all_dim);
        out.softmax_scale_factor = static_cast<float>(m * m);
      }
      break;
    }
  }
  out.inv_freq.assign(f.begin(), f.end());
  return out;
}

}  // namespace cann::kernels
