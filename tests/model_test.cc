// Whole-model gradient checks, one tiny config per family (gpt, bert, MoE gpt, MoE bert, and
// grouped-query attention). For each parameter tensor t, the analytic gradient g_t is compared
// with central differences of the fp32 loss along two unit directions inside t: a random one,
// and g_t / |g_t| itself. The check |fd - <g_t, d>| <= tol * |g_t| bounds the error of the
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
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/threads.h"
#include "model/model.h"
#include "model/spec.h"

namespace cann {
namespace {

using model::Model;
using model::ModelSpec;

ModelSpec spec_from(const std::string& yaml) {
  auto s = model::parse_model_spec(yaml, "test.yaml");
  EXPECT_TRUE(s.ok()) << s.status().message();
  return *s;
}

struct Batch {
  std::vector<int> inputs, targets;
};

Batch make_batch(const ModelSpec& s, int B, int T, Rng& rng) {
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

void check_model_gradients(const std::string& yaml) {
  set_num_threads(2);
  const ModelSpec s = spec_from(yaml);
  const int B = 2, T = s.seq_length;
  auto created = Model::create(s, B, T);
  ASSERT_TRUE(created.ok()) << created.status().message();
  Model& m = **created;
  m.init_params(7);
  Rng rng(99);
  // Embeddings of unit scale instead of GPT-2's 0.02: the first layernorm then no longer
  // amplifies perturbations 50-fold, which keeps router logits far from their crossing points.
  for (const char* name : {"wte", "wpe"}) {
    const auto& t = m.table().at(*m.table().find(name));
    for (size_t i = 0; i < t.numel; ++i) m.params()[t.offset + i] *= 25.0f;
  }
  // Routers of unit scale too, so the gradient through the gates and the router's own input
  // gradient are a visible share of every upstream tensor's gradient (a dropped term fails).
  for (const auto& t : m.table().tensors())
    if (t.name.ends_with("moe.router.w"))
      for (size_t i = 0; i < t.numel; ++i) m.params()[t.offset + i] *= 50.0f;
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
  for (const auto& t : m.table().tensors()) {
    double gnorm = 0.0;
    for (size_t i = 0; i < t.numel; ++i) gnorm += double(grads[t.offset + i]) * grads[t.offset + i];
    gnorm = std::sqrt(gnorm);
    for (int dir = 0; dir < 2; ++dir) {
      std::vector<float> d(t.numel);
      double dn = 0.0;
      for (size_t i = 0; i < t.numel; ++i) {
        d[i] = dir == 0 ? rng.normal() : grads[t.offset + i];
        dn += double(d[i]) * d[i];
      }
      if (dn == 0.0) continue;  // zero gradient: the random direction still checks it is zero
      dn = std::sqrt(dn);
      double analytic = 0.0;
      for (size_t i = 0; i < t.numel; ++i) {
        d[i] = static_cast<float>(d[i] / dn);
        analytic += double(grads[t.offset + i]) * d[i];
      }
      float* p = m.params() + t.offset;
      const std::vector<float> keep(p, p + t.numel);
      float h = 1e-2f;
      double fd = 0.0;
      bool smooth = false;
      for (int attempt = 0; attempt < 6 && !smooth; ++attempt, h /= 4) {
        smooth = true;
        for (size_t i = 0; i < t.numel; ++i) p[i] = keep[i] + h * d[i];
        const double lp = loss_at(&smooth);
        for (size_t i = 0; i < t.numel; ++i) p[i] = keep[i] - h * d[i];
        const double lm = loss_at(&smooth);
        fd = (lp - lm) / (2.0 * h);
      }
      std::copy(keep.begin(), keep.end(), p);
      ASSERT_TRUE(smooth) << t.name << ": routing flips even at h = " << h;
      const double tol = std::max(5e-2 * gnorm, 2e-3);
      EXPECT_NEAR(fd, analytic, tol)
          << t.name << (dir == 0 ? " (random direction)" : " (gradient direction)")
          << " |g|=" << gnorm;
    }
  }
}

TEST(ModelGradientTest, Gpt) {
  check_model_gradients(
      "architecture: gpt\nhidden_size: 16\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
      "vocab_size: 23\nseq_length: 8\n");
}

TEST(ModelGradientTest, GptGroupedQueryAttention) {
  check_model_gradients(
      "architecture: gpt\nhidden_size: 16\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
      "num_key_value_heads: 2\nintermediate_size: 24\nvocab_size: 23\nseq_length: 8\n");
}

TEST(ModelGradientTest, Bert) {
  check_model_gradients(
      "architecture: bert\nhidden_size: 16\nnum_hidden_layers: 2\nnum_attention_heads: 2\n"
      "vocab_size: 19\nseq_length: 8\n");
}

// capacity_factor is high enough that no token is dropped and the perturbations (|dw| = 1e-2)
// are far too small to flip a top-2 choice at these logit gaps, so the loss is smooth.
TEST(ModelGradientTest, MoeGpt) {
  check_model_gradients(
      "architecture: gpt\nhidden_size: 16\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
      "vocab_size: 23\nseq_length: 8\nnum_local_experts: 4\nnum_experts_per_tok: 2\n"
      "moe_intermediate_size: 20\ncapacity_factor: 4.0\nrouter_aux_loss_coef: 0.1\n");
}

TEST(ModelGradientTest, MoeBert) {
  check_model_gradients(
      "architecture: bert\nhidden_size: 16\nnum_hidden_layers: 2\nnum_attention_heads: 2\n"
      "vocab_size: 19\nseq_length: 8\nnum_local_experts: 3\nnum_experts_per_tok: 1\n"
      "moe_layer_freq: 2\ncapacity_factor: 4.0\nrouter_aux_loss_coef: 0.1\n");
}

TEST(ModelTest, MoeCapacityDropsAndCountsTokens) {
  set_num_threads(2);
  const ModelSpec s = spec_from(
      "architecture: gpt\nhidden_size: 16\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
      "vocab_size: 23\nseq_length: 16\nnum_local_experts: 4\nnum_experts_per_tok: 1\n"
      "capacity_factor: 0.5\n");
  auto m = Model::create(s, 4, 16);
  ASSERT_TRUE(m.ok());
  (*m)->init_params(3);
  Rng rng(5);
  const Batch b = make_batch(s, 4, 16, rng);
  const auto st = (*m)->forward(b.inputs.data(), b.targets.data(), 4, 16);
  EXPECT_GT(st.aux_loss, 0.0);
  ASSERT_EQ((*m)->num_moe_layers(), 2);
  // capacity = ceil(0.5 * 64 / 4) = 8 per expert, so at most 32 of 64 tokens are kept.
  for (int i = 0; i < 2; ++i) {
    long kept = 0;
    for (int c : (*m)->expert_counts(i)) {
      EXPECT_LE(c, 8);
      kept += c;
    }
    EXPECT_LE(kept, 32);
  }
  EXPECT_GE((*m)->dropped_assignments(), 64);
}

TEST(ModelTest, LossStartsNearLogVocab) {
  set_num_threads(2);
  const ModelSpec s = spec_from(
      "architecture: gpt\nhidden_size: 32\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
      "vocab_size: 256\nseq_length: 16\n");
  auto m = Model::create(s, 2, 16);
  ASSERT_TRUE(m.ok());
  (*m)->init_params(1);
  Rng rng(2);
  const Batch b = make_batch(s, 2, 16, rng);
  const auto st = (*m)->forward(b.inputs.data(), b.targets.data(), 2, 16);
  EXPECT_NEAR(st.loss, std::log(256.0), 0.1);
  EXPECT_EQ(st.scored, 32);
}

TEST(ModelTest, RejectsSequenceLongerThanSpec) {
  const ModelSpec s = spec_from(
      "architecture: gpt\nhidden_size: 16\nnum_hidden_layers: 1\nnum_attention_heads: 2\n"
      "vocab_size: 10\nseq_length: 8\n");
  auto m = Model::create(s, 1, 9);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("--seq-len"), std::string::npos);
}

}  // namespace
}  // namespace cann
