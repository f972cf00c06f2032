// Whole-model gradient checks of today's dense Hugging Face families on one process: each
// tiny config turns on the pieces its family uses (RMSNorm, rotary positions with each scaling,
// SwiGLU, an untied head, biases on or off, grouped KV heads, head_dim apart from
// hidden/heads, Qwen3's QK-norm, DeepSeek's latent attention), and every parameter tensor is
// checked against central differences (model_grad_check.h). Also: what the spec reader builds for
// these families has exactly the tensors Hugging Face has (no wpe, no norm biases), and rotary
// positions make the model depend on order (a model without positions would not).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/threads.h"
#include "model/model.h"
#include "model/spec.h"
#include "model_grad_check.h"

namespace cann {
namespace {

using model::Model;
using model::ModelSpec;
using test::check_model_gradients;
using test::spec_from;

// Sharp attention scores (model_grad_check.h), so that rotary and QK-norm gradients count.
constexpr float kQkvScale = 10.0f;

// Llama: RMSNorm, rotary halves, SwiGLU, untied head, no biases, GQA (4 heads, 2 kv heads).
const char* kLlama =
    "model_type: llama\nhidden_size: 16\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
    "num_key_value_heads: 2\nintermediate_size: 24\nvocab_size: 23\nmax_position_embeddings: 16\n"
    "seq_length: 8\ntie_word_embeddings: false\nrms_norm_eps: 1.0e-6\nrope_theta: 500.0\n";

TEST(ModelFamiliesGradientTest, Llama) { check_model_gradients(kLlama, kQkvScale); }

TEST(ModelFamiliesGradientTest, LlamaTiedHeadLinearRope) {
  check_model_gradients(
      "model_type: llama\nhidden_size: 16\nnum_hidden_layers: 2\nnum_attention_heads: 2\n"
      "intermediate_size: 20\nvocab_size: 19\nmax_position_embeddings: 16\nseq_length: 8\n"
      "tie_word_embeddings: true\nrope_scaling: {rope_type: linear, factor: 2.0}\n",
      kQkvScale);
}

TEST(ModelFamiliesGradientTest, LlamaThreeScaling) {
  check_model_gradients(
      "model_type: llama\nhidden_size: 16\nnum_hidden_layers: 1\nnum_attention_heads: 2\n"
      "num_key_value_heads: 1\nintermediate_size: 20\nvocab_size: 19\n"
      "max_position_embeddings: 64\nseq_length: 8\ntie_word_embeddings: false\n"
      "rope_theta: 100.0\nrope_scaling: {rope_type: llama3, factor: 8.0, low_freq_factor: 1.0, "
      "high_freq_factor: 4.0, original_max_position_embeddings: 8}\n",
      kQkvScale);
}

// Qwen2: biases on q, k and v only (not o, not the MLP).
TEST(ModelFamiliesGradientTest, Qwen2QkvBiasYarn) {
  check_model_gradients(
      "model_type: qwen2\nhidden_size: 16\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
      "num_key_value_heads: 2\nintermediate_size: 24\nvocab_size: 23\nmax_position_embeddings: "
      "32\nseq_length: 8\ntie_word_embeddings: false\n"
      "rope_scaling: {rope_type: yarn, factor: 4.0, original_max_position_embeddings: 8}\n",
      kQkvScale);
}

// Qwen3: QK-norm, head_dim 6 apart from hidden/heads = 4, GQA.
const char* kQwen3 =
    "model_type: qwen3\nhidden_size: 16\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
    "num_key_value_heads: 2\nhead_dim: 6\nintermediate_size: 24\nvocab_size: 23\n"
    "max_position_embeddings: 16\nseq_length: 8\ntie_word_embeddings: false\n";

TEST(ModelFamiliesGradientTest, Qwen3QkNormHeadDim) { check_model_gradients(kQwen3, kQkvScale); }

// DeepSeek-V3's multi-head latent attention, dense: the low-rank query with its norm, the joint
// key/value latent with its norm, a rotary key shared by the heads (interleaved pairs), value
// heads of 6 beside query/key heads of 4 + 4.
const char* kDeepseekMla =
    "model_type: deepseek_v3\nhidden_size: 16\nnum_hidden_layers: 2\nnum_attention_heads: 2\n"
    "q_lora_rank: 12\nkv_lora_rank: 8\nqk_nope_head_dim: 4\nqk_rope_head_dim: 4\n"
    "v_head_dim: 6\nintermediate_size: 24\nvocab_size: 23\nmax_position_embeddings: 16\n"
    "seq_length: 8\nn_routed_experts: 0\nfirst_k_dense_replace: 2\n"
    "num_nextn_predict_layers: 0\ntie_word_embeddings: false\n";

TEST(ModelFamiliesGradientTest, DeepseekLatentAttention) {
  check_model_gradients(kDeepseekMla, kQkvScale);
}

// DeepSeek-V2's form: the plain q projection, biases on kv_a and o, rotary halves, and yarn
// with DeepSeek's mscales (cos/sin and the softmax scale both changed).
TEST(ModelFamiliesGradientTest, DeepseekLatentAttentionPlainQueryYarn) {
  check_model_gradients(
      "model_type: deepseek_v2\nhidden_size: 16\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
      "q_lora_rank: null\nkv_lora_rank: 6\nqk_nope_head_dim: 2\nqk_rope_head_dim: 4\n"
      "v_head_dim: 3\nintermediate_size: 24\nvocab_size: 23\nmax_position_embeddings: 32\n"
      "seq_length: 8\nn_routed_experts: 0\nattention_bias: true\nrope_interleave: false\n"
      "tie_word_embeddings: false\nrope_scaling: {type: yarn, factor: 4.0, "
      "original_max_position_embeddings: 8, mscale: 1.0, mscale_all_dim: 0.8}\n",
      kQkvScale);
}

TEST(ModelFamiliesTest, TablesHoldTheFamiliesTensorsOnly) {
  for (const char* yaml : {kLlama, kQwen3}) {
    const ModelSpec s = spec_from(yaml);
    auto m = Model::create(s, 1, 8);
    ASSERT_TRUE(m.ok()) << m.status().message();
    const auto& t = (*m)->table();
    EXPECT_FALSE(t.find("wpe").ok());
    EXPECT_FALSE(t.find("h.0.ln1.b").ok());
    EXPECT_FALSE(t.find("h.0.attn.proj.b").ok());
    EXPECT_TRUE(t.find("lm_head").ok());
    EXPECT_EQ(t.find("h.0.attn.q_norm.w").ok(), s.qk_norm);
    // SwiGLU: one (2F, C) fc weight holding gate then up.
    EXPECT_EQ(t.at(*t.find("h.1.mlp.fc.w")).shape, (std::vector<int64_t>{48, 16}));
  }
}

// Latent attention's tensors in place of the fused QKV, shaped as Hugging Face's: q_a (q_lora,
// C), kv_a (kv_lora + rope, C), kv_b (heads * (nope + v), kv_lora), o (C, heads * v).
TEST(ModelFamiliesTest, LatentAttentionTablesHoldDeepSeeksTensors) {
  auto m = Model::create(spec_from(kDeepseekMla), 1, 8);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const auto& t = (*m)->table();
  EXPECT_FALSE(t.find("h.0.attn.qkv.w").ok());
  EXPECT_FALSE(t.find("h.0.attn.q.w").ok());
  auto shape = [&](const std::string& name) { return t.at(*t.find(name)).shape; };
  EXPECT_EQ(shape("h.1.attn.q_a.w"), (std::vector<int64_t>{12, 16}));
  EXPECT_EQ(shape("h.1.attn.q_a_norm.w"), (std::vector<int64_t>{12}));
  EXPECT_EQ(shape("h.1.attn.q_b.w"), (std::vector<int64_t>{16, 12}));
  EXPECT_EQ(shape("h.1.attn.kv_a.w"), (std::vector<int64_t>{12, 16}));
  EXPECT_EQ(shape("h.1.attn.kv_a_norm.w"), (std::vector<int64_t>{8}));
  EXPECT_EQ(shape("h.1.attn.kv_b.w"), (std::vector<int64_t>{20, 8}));
  EXPECT_EQ(shape("h.1.attn.proj.w"), (std::vector<int64_t>{16, 12}));
}

// With rotary positions and no position table, the logits of a token depend on where earlier
// tokens sit: swapping two earlier tokens changes the last position's logits.
TEST(ModelFamiliesTest, RotaryPositionsMakeOrderMatter) {
  set_num_threads(2);
  const ModelSpec s = spec_from(kLlama);
  auto m = Model::create(s, 1, 8);
  ASSERT_TRUE(m.ok());
  (*m)->init_params(3);
  // Unit-scale embeddings and sharp attention, so that positions visibly move the scores.
  for (auto& t : (*m)->table().tensors())
    if (t.name == "wte" || t.name.ends_with("attn.qkv.w"))
      for (size_t i = 0; i < t.numel; ++i) (*m)->params()[t.offset + i] *= 25.0f;
  std::vector<int> a = {1, 2, 3, 4, 5, 6, 7, 8}, b = {2, 1, 3, 4, 5, 6, 7, 8};
  (*m)->forward(a.data(), nullptr, 1, 8);
  const int V = s.vocab_size;
  const std::vector<float> la((*m)->logits() + 7 * V, (*m)->logits() + 8 * V);
  (*m)->forward(b.data(), nullptr, 1, 8);
  double diff = 0.0;
  for (int v = 0; v < V; ++v) diff += std::fabs(la[v] - (*m)->logits()[7 * V + v]);
  EXPECT_GT(diff, 1e-2);
}

TEST(ModelFamiliesTest, LossStartsNearLogVocab) {
  set_num_threads(2);
  const ModelSpec s = spec_from(
      "model_type: qwen3\nhidden_size: 32\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
      "num_key_value_heads: 2\nintermediate_size: 64\nvocab_size: 256\n"
      "max_position_embeddings: 16\nseq_length: 16\ntie_word_embeddings: false\n");
  auto m = Model::create(s, 2, 16);
  ASSERT_TRUE(m.ok()) << m.status().message();
  (*m)->init_params(1);
  Rng rng(2);
  const test::Batch b = test::make_batch(s, 2, 16, rng);
  const auto st = (*m)->forward(b.inputs.data(), b.targets.data(), 2, 16);
  EXPECT_NEAR(st.loss, std::log(256.0), 0.1);
}

}  // namespace
}  // namespace cann
