// The transformer's forward and backward passes. Each layer is pre-LayerNorm (GPT-2 order):
//   a = x + proj(attention(ln1(x)));  out = a + mlp(ln2(a))   (mlp is dense or MoE)
// and the head is tied to the token embedding: logits = lnf(x_L) wte^T.
// BERT uses the same blocks with bidirectional attention and scores only masked positions.
#include "model/model.h"

#include <cmath>
#include <cstring>

#include "core/rng.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/residual.h"

namespace cann::model {

using namespace cann::kernels;

Model::Model(ModelSpec spec) : spec_(std::move(spec)), table_(build_param_table(spec_)) {}

StatusOr<std::unique_ptr<Model>> Model::create(const ModelSpec& spec, int max_batch, int max_seq) {
  if (spec.architecture == Architecture::kVit)
    return InvalidArgument(spec.source +
                           ": the trainer runs gpt and bert models; vit specs are for planning "
                           "(cann-train search/simulate); hint: pick a gpt or bert config");
  if (max_batch <= 0 || max_seq <= 0)
    return InvalidArgument("batch size and sequence length must be positive");
  if (max_seq > spec.seq_length)
    return InvalidArgument("sequence length " + std::to_string(max_seq) + " exceeds the model's " +
                           "seq_length " + std::to_string(spec.seq_length) + " (" + spec.source +
                           "); hint: lower --seq-len");
  std::unique_ptr<Model> m(new Model(spec));
  m->max_batch_ = max_batch;
  m->max_seq_ = max_seq;
  m->params_.resize(m->table_.total_floats());
  m->grads_.resize(m->table_.total_floats());
  auto off = [&](const std::string& name) { return m->table_.at(*m->table_.find(name)).offset; };
  m->wte_ = off("wte");
  m->wpe_ = off("wpe");
  m->lnfw_ = off("lnf.w");
  m->lnfb_ = off("lnf.b");
  for (int l = 0; l < spec.num_hidden_layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    LayerOffsets o{};
    o.ln1w = off(p + "ln1.w");
    o.ln1b = off(p + "ln1.b");
    o.qkvw = off(p + "attn.qkv.w");
    o.qkvb = off(p + "attn.qkv.b");
    o.projw = off(p + "attn.proj.w");
    o.projb = off(p + "attn.proj.b");
    o.ln2w = off(p + "ln2.w");
    o.ln2b = off(p + "ln2.b");
    if (spec.is_moe_layer(l)) {
      o.moe.routerw = off(p + "moe.router.w");
      o.moe.fcw = off(p + "moe.fc.w");
      o.moe.fcb = off(p + "moe.fc.b");
      o.moe.projw = off(p + "moe.proj.w");
      o.moe.projb = off(p + "moe.proj.b");
    } else {
      o.fcw = off(p + "mlp.fc.w");
      o.fcb = off(p + "mlp.fc.b");
      o.fcprojw = off(p + "mlp.proj.w");
      o.fcprojb = off(p + "mlp.proj.b");
    }
    m->offsets_.push_back(o);
  }
  m->layout_activations();
  return m;
}

// Carves the arena: every saved activation and every backward scratch buffer, sized for
// N = max_batch * max_seq tokens. Two passes: the first only counts (base == nullptr).
void Model::layout_activations() {
  const ModelSpec& s = spec_;
  const size_t N = static_cast<size_t>(max_batch_) * max_seq_;
  const size_t C = s.hidden_size, V = s.vocab_size, QKV = s.qkv_size(), F = s.intermediate_size;
  const size_t att = static_cast<size_t>(max_batch_) * s.num_attention_heads * max_seq_ * max_seq_;
  const size_t E = s.num_local_experts, K = s.num_experts_per_tok, FM = s.moe_intermediate_size;
  const size_t cap = s.is_moe() ? moe_capacity(static_cast<int>(N), static_cast<int>(E),
                                               static_cast<int>(K), s.capacity_factor)
                                : 0;
  for (int pass = 0; pass < 2; ++pass) {
    float* base = pass == 0 ? nullptr : acts_.data();
    int* ibase = pass == 0 ? nullptr : ints_.data();
    size_t used = 0, iused = 0;
    auto take = [&](size_t n) {
      float* p = base ? base + used : nullptr;
      used += (n + 15) / 16 * 16;
      return p;
    };
    auto itake = [&](size_t n) {
      int* p = ibase ? ibase + iused : nullptr;
      iused += (n + 15) / 16 * 16;
      return p;
    };
    layers_.clear();
    moe_layers_.clear();
    encoded_ = take(N * C);
    for (int l = 0; l < s.num_hidden_layers; ++l) {
      LayerActs a{};
      a.ln1 = take(N * C);
      a.ln1_mean = take(N);
      a.ln1_rstd = take(N);
      a.qkv = take(N * QKV);
      a.att = take(att);
      a.atty = take(N * C);
      a.resid_attn = take(N * C);
      a.ln2 = take(N * C);
      a.ln2_mean = take(N);
      a.ln2_rstd = take(N);
      a.out = take(N * C);
      if (s.is_moe_layer(l)) {
        MoeActs m{};
        m.router_logits = take(N * E);
        m.probs = take(N * E);
        m.gate = take(N * K);
        m.load_fraction = take(E);
        m.xe = take(E * cap * C);
        m.he = take(E * cap * FM);
        m.ge = take(E * cap * FM);
        m.ye = take(E * cap * C);
        m.expert_index = itake(N * K);
        m.slot = itake(N * K);
        m.expert_count = itake(E);
        a.moe_index = static_cast<int>(moe_layers_.size());
        moe_layers_.push_back(m);
      } else {
        a.fch = take(N * F);
        a.fch_gelu = take(N * F);
      }
      layers_.push_back(a);
    }
    lnf_ = take(N * C);
    lnf_mean_ = take(N);
    lnf_rstd_ = take(N);
    logits_ = take(N * V);
    losses_ = take(N);
    d_resid_ = take(N * C);
    d_branch_ = take(N * C);
    d_ln_ = take(N * C);
    d_atty_ = take(N * C);
    d_qkv_ = take(N * QKV);
    d_fch_ = take(N * F);
    if (s.is_moe()) {
      moe_scratch_.d_xe = take(E * cap * C);
      moe_scratch_.d_ge = take(E * cap * FM);
      moe_scratch_.d_ye = take(E * cap * C);
      moe_scratch_.d_gate = take(N * K);
      moe_scratch_.d_router = take(N * E);
    }
    inputs_ = itake(N);
    targets_ = itake(N);
    if (pass == 0) {
      acts_.resize(used);
      ints_.resize(iused);
    }
  }
}

size_t Model::activation_bytes() const {
  return acts_.bytes() + ints_.bytes();
}

void Model::init_params(uint64_t seed) {
  Rng rng(seed);
  const float residual_scale = 1.0f / std::sqrt(2.0f * spec_.num_hidden_layers);
  params_.zero();
  for (const TensorInfo& t : table_.tensors()) {
    float* p = params_.data() + t.offset;
    const std::string& n = t.name;
    const bool is_norm_gain = n.ends_with("ln1.w") || n.ends_with("ln2.w") || n == "lnf.w";
    if (is_norm_gain) {
      for (size_t i = 0; i < t.numel; ++i) p[i] = 1.0f;
    } else if (t.shape.size() >= 2) {
      float std = n == "wpe" ? 0.01f : 0.02f;
      if (n.ends_with("attn.proj.w") || n.ends_with("mlp.proj.w") || n.ends_with("moe.proj.w"))
        std *= residual_scale;
      for (size_t i = 0; i < t.numel; ++i) p[i] = std * rng.normal();
    }
    // Biases and norm shifts stay zero.
  }
}

std::span<const int> Model::expert_counts(int i) const {
  return {moe_layers_[i].expert_count, static_cast<size_t>(spec_.num_local_experts)};
}

std::span<const int> Model::expert_assignments(int i) const {
  const MoeActs& m = moe_layers_[i];
  return {m.expert_index, static_cast<size_t>(m.shape.N) * m.shape.K};
}

long Model::dropped_assignments() const {
  long dropped = 0;
  for (const MoeActs& m : moe_layers_) {
    long kept = 0;
    for (int e = 0; e < m.shape.E; ++e) kept += m.expert_count[e];
    dropped += static_cast<long>(m.shape.N) * m.shape.K - kept;
  }
  return dropped;
}

ForwardStats Model::forward(const int* inputs, const int* targets, int B, int T) {
  CANN_CHECK(B > 0 && B <= max_batch_ && T > 0 && T <= max_seq_)
      << "batch " << B << "x" << T << " exceeds the model's buffers " << max_batch_ << "x"
      << max_seq_;
  const ModelSpec& s = spec_;
  const int N = B * T, C = s.hidden_size, V = s.vocab_size, QKV = s.qkv_size();
  const int F = s.intermediate_size;
  B_ = B;
  T_ = T;
  have_targets_ = targets != nullptr;
  std::memcpy(inputs_, inputs, sizeof(int) * N);
  const float* P = params_.data();
  const AttentionShape ash{
      B, T, s.num_attention_heads, s.num_key_value_heads, s.head_size(), s.causal()};
  const MoeDims md{C, s.moe_intermediate_size, s.num_local_experts, s.num_experts_per_tok,
                   s.capacity_factor};

  embedding_forward(encoded_, inputs_, P + wte_, P + wpe_, B, T, C);
  const float* x = encoded_;
  double aux_total = 0.0;
  for (int l = 0; l < s.num_hidden_layers; ++l) {
    const LayerOffsets& o = offsets_[l];
    LayerActs& a = layers_[l];
    layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, P + o.ln1w, P + o.ln1b, N, C);
    linear_forward(a.qkv, a.ln1, P + o.qkvw, P + o.qkvb, N, C, QKV);
    attention_forward(a.atty, a.att, a.qkv, ash);
    linear_forward(a.resid_attn, a.atty, P + o.projw, P + o.projb, N, C, C);
    residual_forward(a.resid_attn, a.resid_attn, x, static_cast<size_t>(N) * C);
    layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.resid_attn, P + o.ln2w, P + o.ln2b, N, C);
    if (a.moe_index >= 0) {
      aux_total += moe_forward(a.out, a.ln2, P, o.moe, moe_layers_[a.moe_index], md, N);
    } else {
      linear_forward(a.fch, a.ln2, P + o.fcw, P + o.fcb, N, C, F);
      gelu_forward(a.fch_gelu, a.fch, static_cast<size_t>(N) * F);
      linear_forward(a.out, a.fch_gelu, P + o.fcprojw, P + o.fcprojb, N, F, C);
    }
    residual_forward(a.out, a.out, a.resid_attn, static_cast<size_t>(N) * C);
    x = a.out;
  }
  layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, x, P + lnfw_, P + lnfb_, N, C);
  linear_forward(logits_, lnf_, P + wte_, nullptr, N, C, V);

  ForwardStats st;
  st.aux_loss = aux_total;
  if (!have_targets_) return st;
  std::memcpy(targets_, targets, sizeof(int) * N);
  softmax_crossentropy_forward(losses_, logits_, targets_, N, V);
  double sum = 0.0;
  int scored = 0;
  for (int i = 0; i < N; ++i) {
    if (targets_[i] < 0) continue;
    sum += losses_[i];
    ++scored;
  }
  scored_ = scored;
  st.scored = scored;
  st.lm_loss = scored > 0 ? sum / scored : 0.0;
  st.loss = st.lm_loss + s.router_aux_loss_coef * aux_total;
  return st;
}

void Model::backward(float grad_scale, const std::function<void(int)>& layer_done) {
  auto done = [&](int layer) {
    if (layer_done) layer_done(layer);
  };
  CANN_CHECK(have_targets_) << "backward() needs a forward() with targets";
  const ModelSpec& s = spec_;
  const int B = B_, T = T_, N = B * T, C = s.hidden_size, V = s.vocab_size, QKV = s.qkv_size();
  const int F = s.intermediate_size;
  const size_t NC = static_cast<size_t>(N) * C;
  const float* P = params_.data();
  float* G = grads_.data();
  const AttentionShape ash{
      B, T, s.num_attention_heads, s.num_key_value_heads, s.head_size(), s.causal()};
  const MoeDims md{C, s.moe_intermediate_size, s.num_local_experts, s.num_experts_per_tok,
                   s.capacity_factor};
  const float aux_grad = grad_scale * static_cast<float>(s.router_aux_loss_coef);

  // Head: the logits buffer becomes its own gradient (fused softmax cross-entropy).
  const float logit_scale = scored_ > 0 ? grad_scale / scored_ : 0.0f;
  softmax_crossentropy_backward(logits_, logits_, targets_, logit_scale, N, V);
  linear_backward(d_ln_, G + wte_, nullptr, logits_, lnf_, P + wte_, N, C, V);
  const float* x_last = s.num_hidden_layers > 0 ? layers_.back().out : encoded_;
  layernorm_backward(d_resid_, G + lnfw_, G + lnfb_, d_ln_, x_last, P + lnfw_, lnf_mean_, lnf_rstd_,
                     N, C);
  done(s.num_hidden_layers);

  // d_resid_ carries the gradient of the residual stream down through the layers.
  for (int l = s.num_hidden_layers - 1; l >= 0; --l) {
    const LayerOffsets& o = offsets_[l];
    const LayerActs& a = layers_[l];
    const float* x_in = l == 0 ? encoded_ : layers_[l - 1].out;
    // Feed-forward branch: out = resid_attn + mlp(ln2(resid_attn)).
    if (a.moe_index >= 0) {
      moe_backward(d_ln_, G, d_resid_, a.ln2, P, o.moe, moe_layers_[a.moe_index], moe_scratch_, md,
                   aux_grad, d_branch_);
    } else {
      linear_backward(d_fch_, G + o.fcprojw, G + o.fcprojb, d_resid_, a.fch_gelu, P + o.fcprojw, N,
                      F, C);
      gelu_backward(d_fch_, a.fch, d_fch_, static_cast<size_t>(N) * F);
      linear_backward(d_ln_, G + o.fcw, G + o.fcb, d_fch_, a.ln2, P + o.fcw, N, C, F);
    }
    layernorm_backward(d_branch_, G + o.ln2w, G + o.ln2b, d_ln_, a.resid_attn, P + o.ln2w,
                       a.ln2_mean, a.ln2_rstd, N, C);
    residual_backward(d_resid_, d_branch_, NC);
    // Attention branch: resid_attn = x_in + proj(attention(ln1(x_in))).
    linear_backward(d_atty_, G + o.projw, G + o.projb, d_resid_, a.atty, P + o.projw, N, C, C);
    attention_backward(d_qkv_, d_atty_, a.qkv, a.att, ash);
    linear_backward(d_ln_, G + o.qkvw, G + o.qkvb, d_qkv_, a.ln1, P + o.qkvw, N, C, QKV);
    layernorm_backward(d_branch_, G + o.ln1w, G + o.ln1b, d_ln_, x_in, P + o.ln1w, a.ln1_mean,
                       a.ln1_rstd, N, C);
    residual_backward(d_resid_, d_branch_, NC);
    done(l);
  }
  embedding_backward(G + wte_, G + wpe_, d_resid_, inputs_, B, T, C);
  done(-1);
}

}  // namespace cann::model
