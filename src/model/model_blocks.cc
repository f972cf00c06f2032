// The block pieces of today's Hugging Face families in Model: RMSNorm beside LayerNorm, Qwen3's
// per-head QK-norm, rotary positions on the q and k heads, and SwiGLU beside GeLU. The order
// inside attention is Hugging Face's (transformers, models/qwen3/modeling_qwen3.py,
// Qwen3Attention.forward; models/llama/modeling_llama.py, LlamaAttention.forward):
//   q, k, v = projections of the normed input; q, k = q_norm(q), k_norm(k) per head (Qwen3);
//   q, k = rope(q), rope(k); attention with softmax scale head_dim^-0.5.
// qkv keeps the rotated q and k (what attention and its backward read); QK-norm keeps its
// input in qk_raw. Rotary heads are contiguous at the start of every qkv row (the q heads,
// then the k heads), so one rope call covers both, with global positions under cp.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/swiglu.h"
#include "model/model.h"

namespace cann::model {

using namespace cann::kernels;

void Model::norm_forward(float* y, float* mean, float* rstd, const float* x, const float* w,
                         const float* b, int rows, int C) const {
  if (spec_.norm == NormKind::kRmsNorm)
    rmsnorm_forward(y, rstd, x, w, rows, C, static_cast<float>(spec_.norm_eps));
  else
    layernorm_forward(y, mean, rstd, x, w, b, rows, C);
}

namespace {

// Copies the q heads then the k heads of N qkv rows into (N*nh + N*kvh, hs) rows, or back.
void pack_qk(float* packed, float* qkv, int N, int nh, int kvh, int hs, int stride, bool to_pack) {
  const size_t q = static_cast<size_t>(nh) * hs, k = static_cast<size_t>(kvh) * hs;
  float* kpacked = packed + static_cast<size_t>(N) * q;
  for (int n = 0; n < N; ++n) {
    float* row = qkv + static_cast<size_t>(n) * stride;
    float* pq = packed + n * q;
    float* pk = kpacked + n * k;
    if (to_pack) {
      std::memcpy(pq, row, q * sizeof(float));
      std::memcpy(pk, row + q, k * sizeof(float));
    } else {
      std::memcpy(row, pq, q * sizeof(float));
      std::memcpy(row + q, pk, k * sizeof(float));
    }
  }
}

}  // namespace

void Model::qk_norm_forward(const LayerActs& a, const LayerOffsets& o, int N) {
  const int hs = spec_.head_size();
  const float eps = static_cast<float>(spec_.norm_eps);
  const float* P = params_at_;
  pack_qk(a.qk_raw, a.qkv, N, nh_, kvh_, hs, qkv_, true);
  // The normed heads go to d_ln_'s scratch (free during forward), then back into qkv.
  const size_t qrows = static_cast<size_t>(N) * nh_, krows = static_cast<size_t>(N) * kvh_;
  float* normed = d_qk_;
  rmsnorm_forward(normed, a.qk_rstd, a.qk_raw, P + o.q_norm, static_cast<int>(qrows), hs, eps);
  rmsnorm_forward(normed + qrows * hs, a.qk_rstd + qrows, a.qk_raw + qrows * hs, P + o.k_norm,
                  static_cast<int>(krows), hs, eps);
  pack_qk(normed, a.qkv, N, nh_, kvh_, hs, qkv_, false);
}

void Model::qk_norm_backward(const LayerActs& a, const LayerOffsets& o, int N) {
  const int hs = spec_.head_size();
  const float* P = params_at_;
  float* G = grads_.data();
  const size_t qrows = static_cast<size_t>(N) * nh_, krows = static_cast<size_t>(N) * kvh_;
  float* dnormed = d_qk_;
  float* draw = d_qk_ + (qrows + krows) * hs;
  pack_qk(dnormed, d_qkv_, N, nh_, kvh_, hs, qkv_, true);
  // Under tp each rank holds its own heads: the weights' gradients are partial sums.
  const bool tp = tp_.size > 1;
  float* dq = tp ? tp_qkgrad_ : G + o.q_norm;
  float* dk = tp ? tp_qkgrad_ + hs : G + o.k_norm;
  if (tp) std::fill(tp_qkgrad_, tp_qkgrad_ + 2 * hs, 0.0f);
  rmsnorm_backward(draw, dq, dnormed, a.qk_raw, P + o.q_norm, a.qk_rstd, static_cast<int>(qrows),
                   hs);
  rmsnorm_backward(draw + qrows * hs, dk, dnormed + qrows * hs, a.qk_raw + qrows * hs,
                   P + o.k_norm, a.qk_rstd + qrows, static_cast<int>(krows), hs);
  pack_qk(draw, d_qkv_, N, nh_, kvh_, hs, qkv_, false);
  if (!tp) return;
  tp_allreduce(tp_qkgrad_, 2 * static_cast<size_t>(hs));
  for (int c = 0; c < hs; ++c) {
    G[o.q_norm + c] += tp_qkgrad_[c];
    G[o.k_norm + c] += tp_qkgrad_[hs + c];
  }
}

const int* Model::rope_positions() {
  if (rope_pos_B_ != B_ || rope_pos_T_ != T_) {
    const int* cp_pos = cp_.size > 1 ? cp_positions(seq_) : nullptr;
    rope_pos_.resize(static_cast<size_t>(B_) * T_);
    for (int b = 0; b < B_; ++b)
      for (int t = 0; t < T_; ++t) rope_pos_[static_cast<size_t>(b) * T_ + t] = cp_pos ? cp_pos[t] : t;
    rope_pos_B_ = B_;
    rope_pos_T_ = T_;
  }
  return rope_pos_.data();
}

void Model::rope_qk(float* qkv, int N, bool backward) {
  const RopeLayout layout = spec_.rope.interleaved ? RopeLayout::kInterleaved : RopeLayout::kHalves;
  const RopeShape shape{N, nh_ + kvh_, qk_hs_, qkv_, rope_offset_, layout};
  if (backward)
    rope_backward(qkv, rope_positions(), rope_, shape);
  else
    rope_forward(qkv, rope_positions(), rope_, shape);
}

void Model::mlp_activation_forward(float* act, const float* fch, int N, int F) {
  if (custom_act_) {
    if (custom_act_->rule == DistributionRule::kElementwise || tp_.size == 1)
      custom_act_->forward(act, fch, N, F);
    else
      full_row_activation(act, fch, nullptr, N, F);
    return;
  }
  if (spec_.mlp == MlpKind::kSwiGlu)
    swiglu_forward(act, fch, N, F);
  else
    gelu_forward(act, fch, static_cast<size_t>(N) * F);
}

void Model::mlp_activation_backward(float* dfch, const float* d_act, const float* fch, int N,
                                    int F) {
  if (custom_act_) {
    if (custom_act_->rule == DistributionRule::kElementwise || tp_.size == 1)
      custom_act_->backward(dfch, fch, d_act, N, F);
    else
      full_row_activation(dfch, fch, d_act, N, F);
    return;
  }
  if (spec_.mlp == MlpKind::kSwiGlu)
    swiglu_backward(dfch, d_act, fch, N, F);
  else
    gelu_backward(dfch, fch, d_act, static_cast<size_t>(N) * F);
}

// A kFullRow op under tensor parallelism: each rank holds columns [r F, (r+1) F) of every row.
// The all-gather brings the ranks' (N,F) slices as (tp,N,F); they are interleaved into whole
// rows (N, tp F), the op runs on those, and this rank keeps its columns. Backward gathers the
// output gradient the same way (and the input again: it is not kept between the passes).
// Example, tp = 2, F = 2, N = 1: rank 0 holds [a b], rank 1 [c d]; both run the op on [a b c d]
// and keep [0, 2) and [2, 4) of the result.
void Model::full_row_activation(float* out, const float* x, const float* dy, int N, int F) {
  const int tp = tp_.size, W = tp * F;
  const size_t n = static_cast<size_t>(N) * F;
  auto gather_rows = [&](std::vector<float>& rows, const float* mine) {
    custom_gather_.resize(n * tp);
    if (tp_status_.ok()) tp_status_ = tp_.comm->allgather(custom_gather_.data(), mine, n);
    rows.resize(n * tp);
    for (int r = 0; r < tp; ++r)
      for (int i = 0; i < N; ++i)
        std::copy_n(custom_gather_.data() + (static_cast<size_t>(r) * N + i) * F, F,
                    rows.data() + static_cast<size_t>(i) * W + static_cast<size_t>(r) * F);
  };
  gather_rows(custom_x_, x);
  custom_out_.resize(n * tp);
  if (dy) {
    gather_rows(custom_dy_, dy);
    custom_act_->backward(custom_out_.data(), custom_x_.data(), custom_dy_.data(), N, W);
  } else {
    custom_act_->forward(custom_out_.data(), custom_x_.data(), N, W);
  }
  for (int i = 0; i < N; ++i)
    std::copy_n(custom_out_.data() + static_cast<size_t>(i) * W + static_cast<size_t>(tp_.rank) * F,
                F, out + static_cast<size_t>(i) * F);
}

}  // namespace cann::model
