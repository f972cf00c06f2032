// Whole-model gradient checks, one tiny config per GPT-2-style family (gpt, bert, MoE gpt, MoE
// bert, and grouped-query attention); the check itself is model_grad_check.h's. Also routing
// and loss sanity checks.
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
using test::Batch;
using test::check_model_gradients;
using test::make_batch;
using test::spec_from;

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
