// Whole-model gradient checks (model_test.cc, model_families_test.cc). For each parameter
// tensor t, the analytic gradient g_t is compared with central differences of the fp32 loss
// along two unit directions inside t: a random one, and g_t / |g_t| itself. The check |fd - <g_t, d>| <= tol * |g_t| bounds the error of the
// gradient's component along d relative to the gradient's size.
//
// MoE routing is piecewise: a top-k choice flips where two router logits cross, and the loss
// jumps there. A difference quotient straddling a flip measures the jump, not the gradient, so
// for MoE models the step is shrunk (down to h/1024) until both evaluations route every token
// exactly as the unperturbed forward did.
//
// Tolerance: the loss is a double sum of fp32 per-token losses of size ~log(V) = 3, each with
// relative rounding ~1e-6 after a few hundred fp32 operations, so the loss carries absolute
// noise ~1e-6; with step h = 1e-2 the difference quotient's noise is ~1e-4, and its truncation
// error h^2 |f'''| is of the same order for these smooth, small-weight models. Gradient norms
// per tensor are ~1e-2..1, so tol = 5e-2 (relative to |g_t|, with a floor of 2e-3 in absolute
// terms for near-zero tensors) catches any real error, which shows up at O(|g_t|).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/threads.h"
#include "model/model.h"
#include "model/spec.h"

namespace cann::test {

using model::Model;
using model::ModelSpec;

inline ModelSpec spec_from(const std::string& yaml) {
  auto s = model::parse_model_spec(yaml, "test.yaml");
  EXPECT_TRUE(s.ok()) << s.status().message();
  return *s;
}

struct Batch {
  std::vector<int> inputs, targets;
};

inline Batch make_batch(const ModelSpec& s, int B, int T, Rng& rng) {
  Batch b;
  b.inputs.resize(B * T);
  b.targets.resize(B * T);
  for (int i = 0; i < B * T; ++i) {
    b.inputs[i] = static_cast<int>(rng.below(s.vocab_size));
    b.targets[i] = static_cast<int>(rng.below(s.vocab_size));
    // BERT scores only some positions (the masked ones).
    if (s.architecture == model::Architecture::kBert && rng.uniform() < 0.6f) b.targets[i] = -1;
  }
  return b;
}

// Element ranges [begin, end) of a tensor that together make one part of it.
using Ranges = std::vector<std::pair<size_t, size_t>>;

// The parts of a projection whose rows feed different paths, checked one at a time: the fused
// QKV's q, k and v rows; under multi-head latent attention the nope and rope rows of every
// query head (q_b or q_proj), the latent and rotary-key rows of kv_a, and the k_nope and v rows
// of every head of kv_b. Other tensors have none.
inline std::vector<Ranges> tensor_parts(const ModelSpec& s, const model::TensorInfo& t) {
  auto is = [&](const char* part) {
    return t.name.ends_with(std::string(part) + ".w") || t.name.ends_with(std::string(part) + ".b");
  };
  const size_t rows = static_cast<size_t>(t.shape[0]), inner = t.numel / rows;
  // Rows [first, first + n) of every group of `group` rows, as element ranges.
  auto every = [&](size_t group, size_t first, size_t n) {
    Ranges r;
    for (size_t g = 0; g < rows; g += group) r.push_back({(g + first) * inner, (g + first + n) * inner});
    return r;
  };
  if (is("attn.qkv")) {
    const size_t hs = s.head_size(), q = s.num_attention_heads * hs,
                 kv = s.num_key_value_heads * hs;
    return {{{0, q * inner}}, {{q * inner, (q + kv) * inner}}, {{(q + kv) * inner, t.numel}}};
  }
  if (!s.mla_enabled) return {};
  const model::MlaSpec& m = s.mla;
  if (is("attn.q") || is("attn.q_b"))
    return {every(m.qk_head_dim(), 0, m.qk_nope_head_dim),
            every(m.qk_head_dim(), m.qk_nope_head_dim, m.qk_rope_head_dim)};
  if (is("attn.kv_a"))
    return {{{0, m.kv_lora_rank * inner}}, {{m.kv_lora_rank * inner, t.numel}}};
  if (is("attn.kv_b")) {
    const size_t head = m.qk_nope_head_dim + m.v_head_dim;
    return {every(head, 0, m.qk_nope_head_dim), every(head, m.qk_nope_head_dim, m.v_head_dim)};
  }
  return {};
}

// Checks every tensor of the model of spec s (B = 2 sequences of seq_length).
// qkv_scale multiplies the q/k/v projections: at GPT-2's init scale the scores are nearly
// flat, so the gradient through queries and keys (rotary, QK-norm) is a small share of every
// tensor's and an error there could hide under the tolerance; sharper scores expose it.
inline void check_model_gradients(const ModelSpec& s, float qkv_scale = 1.0f) {
  set_num_threads(2);
  const int B = 2, T = s.seq_length;
  auto created = Model::create(s, B, T);
  ASSERT_TRUE(created.ok()) << created.status().message();
  Model& m = **created;
  m.init_params(7);
  Rng rng(99);
  // Embeddings of unit scale instead of GPT-2's 0.02: the first layernorm then no longer
  // amplifies perturbations 50-fold, which keeps router logits far from their crossing points.
  for (const char* name : {"wte", "wpe"}) {
    auto found = m.table().find(name);
    if (!found.ok()) continue;  // rotary models have no position table
    const auto& t = m.table().at(*found);
    for (size_t i = 0; i < t.numel; ++i) m.params()[t.offset + i] *= 25.0f;
  }
  // Routers of unit scale too, so the gradient through the gates and the router's own input
  // gradient are a visible share of every upstream tensor's gradient (a dropped term fails).
  // Multi-head latent attention: its q and kv up projections, and kv_a for the rotary key.
  for (const auto& t : m.table().tensors())
    if (t.name.ends_with("attn.qkv.w") || t.name.ends_with("attn.q.w") ||
        t.name.ends_with("attn.q_b.w") || t.name.ends_with("attn.kv_a.w") ||
        t.name.ends_with("attn.kv_b.w"))
      for (size_t i = 0; i < t.numel; ++i) m.params()[t.offset + i] *= qkv_scale;
  for (const auto& t : m.table().tensors())
    if (t.name.ends_with("moe.router.w"))
      for (size_t i = 0; i < t.numel; ++i) m.params()[t.offset + i] *= 50.0f;
  // DeepSeek-V3's selection biases (initialized to zero) of the scores' size, so they steer
  // the choice that the gradients follow.
  for (const auto& t : m.table().tensors())
    if (t.name.ends_with("moe.router.bias"))
      for (size_t i = 0; i < t.numel; ++i) m.params()[t.offset + i] = 0.3f * rng.normal();
  const Batch batch = make_batch(s, B, T, rng);

  m.zero_grads();
  m.forward(batch.inputs.data(), batch.targets.data(), B, T);
  const auto routing = [&m] {
    std::vector<int> r;
    for (int i = 0; i < m.num_moe_layers(); ++i) {
      auto a = m.expert_assignments(i);
      r.insert(r.end(), a.begin(), a.end());
    }
    return r;
  };
  const std::vector<int> base_routing = routing();
  m.backward();
  const std::vector<float> grads(m.grads(), m.grads() + m.num_floats());

  auto loss_at = [&](bool* same_routing) {
    const double loss = m.forward(batch.inputs.data(), batch.targets.data(), B, T).loss;
    *same_routing &= routing() == base_routing;
    return loss;
  };
  // Central difference of the loss along unit direction d inside tensor t (steps shrink while
  // routing flips), beside the analytic <g_t, d>.
  auto along = [&](const model::TensorInfo& t, const std::vector<float>& d, double* fd,
                   double* analytic) {
    *analytic = 0.0;
    for (size_t i = 0; i < t.numel; ++i) *analytic += double(grads[t.offset + i]) * d[i];
    float* p = m.params() + t.offset;
    const std::vector<float> keep(p, p + t.numel);
    float h = 1e-2f;
    bool smooth = false;
    for (int attempt = 0; attempt < 6 && !smooth; ++attempt, h /= 4) {
      smooth = true;
      for (size_t i = 0; i < t.numel; ++i) p[i] = keep[i] + h * d[i];
      const double lp = loss_at(&smooth);
      for (size_t i = 0; i < t.numel; ++i) p[i] = keep[i] - h * d[i];
      const double lm = loss_at(&smooth);
      *fd = (lp - lm) / (2.0 * h);
    }
    std::copy(keep.begin(), keep.end(), p);
    EXPECT_TRUE(smooth) << t.name << ": routing flips even at h = " << h;
  };
  // A unit direction over the element ranges of t: random, or the gradient's.
  auto direction = [&](const model::TensorInfo& t, const Ranges& part, bool random) {
    std::vector<float> d(t.numel, 0.0f);
    double dn = 0.0;
    for (const auto& [begin, end] : part)
      for (size_t i = begin; i < end; ++i) {
        d[i] = random ? rng.normal() : grads[t.offset + i];
        dn += double(d[i]) * d[i];
      }
    if (dn == 0.0) return std::vector<float>{};
    for (float& v : d) v = static_cast<float>(v / std::sqrt(dn));
    return d;
  };
  auto norm = [&](const model::TensorInfo& t, const Ranges& part) {
    double n = 0.0;
    for (const auto& [begin, end] : part)
      for (size_t i = begin; i < end; ++i) n += double(grads[t.offset + i]) * grads[t.offset + i];
    return std::sqrt(n);
  };
  // The fused q/k/v projection's q, k and v rows are also checked one part at a time. The v
  // rows carry most of its gradient, and a wrong q or k part (say a rotation left out of
  // rotary's backward, which keeps its norm) hardly moves either whole-tensor check. Along
  // kProbes random unit directions r inside a part of n elements, the analytic error e gives
  // E[(e.r)^2] = |e|^2 / n, so sqrt(n * mean((fd - <g,r>)^2)) estimates |e| itself, which must
  // stay within a fifth of the part's gradient (floor: the difference quotients' noise, which
  // these estimates measure at 1e-5 to 3e-5 for correct gradients).
  // Multi-head latent attention's projections are checked by parts too (tensor_parts).
  constexpr int kProbes = 8;
  for (const auto& t : m.table().tensors()) {
    const Ranges whole = {{0, t.numel}};
    const double gnorm = norm(t, whole);
    for (bool random : {true, false}) {
      const std::vector<float> d = direction(t, whole, random);
      if (d.empty()) continue;  // zero gradient: the random direction still checks it is zero
      double fd = 0.0, analytic = 0.0;
      along(t, d, &fd, &analytic);
      const double tol = std::max(5e-2 * gnorm, 2e-3);
      EXPECT_NEAR(fd, analytic, tol) << t.name
                                     << (random ? " (random direction)" : " (gradient direction)")
                                     << " |g|=" << gnorm;
    }
    // At GPT-2's flat init scores (qkv_scale 1) the q and k parts' gradients are as small as
    // the quotients' noise, so the part checks run with sharpened scores only.
    if (qkv_scale <= 1.0f) continue;
    const std::vector<Ranges> parts = tensor_parts(s, t);
    for (size_t part = 0; part < parts.size(); ++part) {
      double err2 = 0.0;
      for (int probe = 0; probe < kProbes; ++probe) {
        double fd = 0.0, analytic = 0.0;
        along(t, direction(t, parts[part], true), &fd, &analytic);
        err2 += (fd - analytic) * (fd - analytic);
      }
      double n = 0.0;
      for (const auto& [begin, end] : parts[part]) n += static_cast<double>(end - begin);
      const double err = std::sqrt(n * err2 / kProbes);
      const double part_norm = norm(t, parts[part]);
      EXPECT_LE(err, std::max(0.2 * part_norm, 1e-4))
          << t.name << " part " << part << ": |g|=" << part_norm;
    }
  }
}

inline void check_model_gradients(const std::string& yaml, float qkv_scale = 1.0f) {
  check_model_gradients(spec_from(yaml), qkv_scale);
}

}  // namespace cann::test
