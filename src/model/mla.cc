// Multi-head latent attention in Model (DeepSeek-AI 2024, DeepSeek-V2 section 2.1; the order of
// deepseek-ai's modeling_deepseek.py, DeepseekV3Attention.forward):
//   q      = q_b(rms(q_a(x)))  or  q_proj(x)                       (N, heads * (nope + rope))
//   c, k_r = split(kv_a(x))                                        (N, kv_lora), (N, rope)
//   k_n, v = split_per_head(kv_b(rms(c)))                          (N, heads * (nope + v))
//   k_h    = [k_n_h | k_r]  (the rotary key is shared by every head)
//   scores = [q_n | rope(q_r)] . [k_n | rope(k_r)] * mscale^2 / sqrt(nope + rope)
// The layer lays q, k and v out as one qkv row of [q heads | k heads | v heads] (k_r copied into
// every k head), so the attention kernels, the rotary table and context parallelism's key/value
// gather are the multi-head path's. The rotary part is the last qk_rope_head_dim columns of
// every q and k head; rotating each copy of k_r gives the same floats as rotating it once, and
// in backward its gradient is the sum over the heads' copies.
//
// Tensor parallelism splits the heads: q_b (or q_proj) and kv_b by rows, the output projection
// by columns (param_table.cc). q_a, kv_a and their norms are replicated and see every token, but
// each rank back-propagates through its own heads only, so their gradients are partial sums:
// before the layer's backward, ranks other than 0 zero what those tensors hold (equal on every
// rank: earlier micro-batches were summed), each adds its part, and an all-reduce leaves
// old + the sum of the parts on every rank, as Model does for an MoE layer under sp. d(x) is
// partial the same way and is summed with the rest of the block's input gradient.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/linear.h"
#include "kernels/cpu/rmsnorm.h"
#include "model/model.h"

namespace cann::model {

using namespace cann::kernels;

void Model::mla_forward(const LayerActs& a, const LayerOffsets& o, const float* x, int N) {
  const MlaSpec& m = spec_.mla;
  const int C = spec_.hidden_size, QR = m.q_lora_rank, KR = m.kv_lora_rank;
  const int R = m.qk_rope_head_dim, NOPE = m.qk_nope_head_dim, VD = m.v_head_dim;
  const int KVA = KR + R, KVB = nh_ * (NOPE + VD), QK = qk_hs_;
  const float eps = static_cast<float>(spec_.norm_eps);
  const float* P = params_at_;
  if (QR > 0) {
    linear_forward(a.q_lat, x, P + o.q_a, opt(P, o.q_a_b), N, C, QR);
    rmsnorm_forward(a.q_lat_n, a.q_lat_rstd, a.q_lat, P + o.q_a_norm, N, QR, eps);
    linear_forward(mla_q_, a.q_lat_n, P + o.q_b, nullptr, N, QR, q_cols_);
  } else {
    linear_forward(mla_q_, x, P + o.q, nullptr, N, C, q_cols_);
  }
  linear_forward(mla_kva_, x, P + o.kv_a, opt(P, o.kv_a_b), N, C, KVA);
  for (int n = 0; n < N; ++n)
    std::memcpy(a.kv_lat + static_cast<size_t>(n) * KR, mla_kva_ + static_cast<size_t>(n) * KVA,
                sizeof(float) * KR);
  rmsnorm_forward(a.kv_lat_n, a.kv_lat_rstd, a.kv_lat, P + o.kv_a_norm, N, KR, eps);
  linear_forward(mla_kvb_, a.kv_lat_n, P + o.kv_b, nullptr, N, KR, KVB);
  // Row n of qkv: [q heads | k heads (nope from kv_b, rope from kv_a) | v heads].
  for (int n = 0; n < N; ++n) {
    float* row = a.qkv + static_cast<size_t>(n) * qkv_;
    const float* kvb = mla_kvb_ + static_cast<size_t>(n) * KVB;
    const float* k_rope = mla_kva_ + static_cast<size_t>(n) * KVA + KR;
    std::memcpy(row, mla_q_ + static_cast<size_t>(n) * q_cols_, sizeof(float) * q_cols_);
    for (int h = 0; h < nh_; ++h) {
      float* k = row + q_cols_ + h * QK;
      std::memcpy(k, kvb + h * (NOPE + VD), sizeof(float) * NOPE);
      std::memcpy(k + NOPE, k_rope, sizeof(float) * R);
      std::memcpy(row + 2 * q_cols_ + h * VD, kvb + h * (NOPE + VD) + NOPE, sizeof(float) * VD);
    }
  }
  rope_qk(a.qkv, N, false);
}

void Model::mla_backward(const LayerActs& a, const LayerOffsets& o, const float* x, int N) {
  const MlaSpec& m = spec_.mla;
  const int C = spec_.hidden_size, QR = m.q_lora_rank, KR = m.kv_lora_rank;
  const int R = m.qk_rope_head_dim, NOPE = m.qk_nope_head_dim, VD = m.v_head_dim;
  const int KVA = KR + R, KVB = nh_ * (NOPE + VD), QK = qk_hs_;
  const float* P = params_at_;
  float* G = grads_.data();
  const bool tp = tp_.size > 1;
  // The replicated tensors' gradients: rank 0 keeps what they hold, the others add to zero.
  if (tp && tp_.rank != 0) {
    if (o.q_down_floats > 0) std::fill_n(G + o.q_a, o.q_down_floats, 0.0f);
    std::fill_n(G + o.kv_a, o.kv_down_floats, 0.0f);
  }
  rope_qk(d_qkv_, N, true);
  // d(qkv) back into q, kv_b's output and kv_a's rotary key (summed over the heads).
  for (int n = 0; n < N; ++n) {
    const float* row = d_qkv_ + static_cast<size_t>(n) * qkv_;
    float* kvb = mla_kvb_ + static_cast<size_t>(n) * KVB;
    float* k_rope = mla_kva_ + static_cast<size_t>(n) * KVA + KR;
    std::memcpy(mla_q_ + static_cast<size_t>(n) * q_cols_, row, sizeof(float) * q_cols_);
    std::fill_n(k_rope, R, 0.0f);
    for (int h = 0; h < nh_; ++h) {
      const float* k = row + q_cols_ + h * QK;
      std::memcpy(kvb + h * (NOPE + VD), k, sizeof(float) * NOPE);
      for (int i = 0; i < R; ++i) k_rope[i] += k[NOPE + i];
      std::memcpy(kvb + h * (NOPE + VD) + NOPE, row + 2 * q_cols_ + h * VD, sizeof(float) * VD);
    }
  }
  // Keys and values: kv_b, the latent's norm, then kv_a (d(x) into d_ln_).
  linear_backward(mla_lat_, G + o.kv_b, nullptr, mla_kvb_, a.kv_lat_n, P + o.kv_b, N, KR, KVB);
  rmsnorm_backward(mla_lat2_, G + o.kv_a_norm, mla_lat_, a.kv_lat, P + o.kv_a_norm, a.kv_lat_rstd,
                   N, KR);
  for (int n = 0; n < N; ++n)
    std::memcpy(mla_kva_ + static_cast<size_t>(n) * KVA, mla_lat2_ + static_cast<size_t>(n) * KR,
                sizeof(float) * KR);
  linear_backward(d_ln_, G + o.kv_a, opt(G, o.kv_a_b), mla_kva_, x, P + o.kv_a, N, C, KVA);
  // Queries: q_b, q_a's norm, q_a (or the plain projection), d(x) added to d_ln_.
  if (QR > 0) {
    linear_backward(mla_lat_, G + o.q_b, nullptr, mla_q_, a.q_lat_n, P + o.q_b, N, QR, q_cols_);
    rmsnorm_backward(mla_lat2_, G + o.q_a_norm, mla_lat_, a.q_lat, P + o.q_a_norm, a.q_lat_rstd, N,
                     QR);
    linear_backward(mla_dx_, G + o.q_a, opt(G, o.q_a_b), mla_lat2_, x, P + o.q_a, N, C, QR);
  } else {
    linear_backward(mla_dx_, G + o.q, nullptr, mla_q_, x, P + o.q, N, C, q_cols_);
  }
  const size_t NC = static_cast<size_t>(N) * C;
  for (size_t i = 0; i < NC; ++i) d_ln_[i] += mla_dx_[i];
  if (!tp) return;
  if (o.q_down_floats > 0) tp_allreduce(G + o.q_a, o.q_down_floats);
  tp_allreduce(G + o.kv_a, o.kv_down_floats);
}

}  // namespace cann::model
