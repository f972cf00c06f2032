// Whole-model gradient checks of the Hugging Face families' mixture-of-experts layers on one
// process (model_grad_check.h): SwiGLU experts without biases behind the families' router
// (softmax, top-k weights renormalized or not, dropless or capacity slots, the Switch/Mixtral
// or the sequence-wise balance loss), dense layers beside MoE ones, and Qwen3's attention.
// Also: dropless routing keeps every assignment where capacity routing drops some, and the
// combine weights of a normalized router sum to one per token.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/threads.h"
#include "model/engine_support.h"
#include "model/model.h"
#include "model/spec.h"
#include "model_grad_check.h"

namespace cann {
namespace {

using model::Model;
using model::ModelSpec;
using test::check_model_gradients;
using test::spec_from;

// Qwen3-MoE: 4 experts of width 12, top-2 normalized, dropless, layer 0 dense (mlp_only_layers),
// QK-norm, head_dim 6, untied head, the Switch/Mixtral loss at a visible coefficient.
const char* kQwen3Moe =
    "model_type: qwen3_moe\nhidden_size: 16\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
    "num_key_value_heads: 2\nhead_dim: 6\nintermediate_size: 24\nmoe_intermediate_size: 12\n"
    "num_experts: 4\nnum_experts_per_tok: 2\nnorm_topk_prob: true\nmlp_only_layers: [0]\n"
    "vocab_size: 23\nmax_position_embeddings: 16\nseq_length: 8\ntie_word_embeddings: false\n"
    "output_router_logits: true\nrouter_aux_loss_coef: 0.1\n";

TEST(ModelMoeFamiliesGradientTest, Qwen3MoeDroplessNormalized) {
  check_model_gradients(kQwen3Moe, 10.0f);
}

// Qwen2-MoE-style weights left unnormalized (norm_topk_prob false), every layer sparse.
TEST(ModelMoeFamiliesGradientTest, Qwen3MoeUnnormalizedTopK) {
  check_model_gradients(
      "model_type: qwen3_moe\nhidden_size: 16\nnum_hidden_layers: 2\nnum_attention_heads: 2\n"
      "intermediate_size: 24\nmoe_intermediate_size: 10\nnum_experts: 3\n"
      "num_experts_per_tok: 2\nnorm_topk_prob: false\nvocab_size: 19\n"
      "max_position_embeddings: 16\nseq_length: 8\noutput_router_logits: true\n"
      "router_aux_loss_coef: 0.1\n");
}

// Mixtral: 4 experts, top-2 always normalized, every layer sparse.
TEST(ModelMoeFamiliesGradientTest, Mixtral) {
  check_model_gradients(
      "model_type: mixtral\nhidden_size: 16\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
      "num_key_value_heads: 2\nintermediate_size: 20\nnum_local_experts: 4\n"
      "num_experts_per_tok: 2\nvocab_size: 23\nmax_position_embeddings: 16\nseq_length: 8\n"
      "output_router_logits: true\nrouter_aux_loss_coef: 0.1\n");
}

// DeepSeek's sequence-wise balance loss (its configs, which need MLA, read it from seq_aux)
// on the Qwen3-MoE model, with capacity slots that drop nothing at factor 4.
TEST(ModelMoeFamiliesGradientTest, SequenceBalanceLossWithCapacity) {
  ModelSpec s = spec_from(kQwen3Moe);
  s.aux_loss = model::AuxLoss::kSequence;
  s.routing = model::MoeRouting::kCapacity;
  s.capacity_factor = 4.0;
  check_model_gradients(s, 10.0f);
}

// DeepSeek's router pieces on the same model (their own configs also need MLA): sigmoid
// scores, DeepSeek-V2's group-limited top-k (4 groups of 2 experts, the 2 with the best score
// kept), weights normalized and scaled by 2.5, with the sequence-wise loss.
TEST(ModelMoeFamiliesGradientTest, SigmoidGroupLimitedScaled) {
  ModelSpec s = spec_from(kQwen3Moe);
  s.num_local_experts = 8;
  s.router_score = model::RouterScore::kSigmoid;
  s.topk_method = model::TopkMethod::kGroupLimited;
  s.n_group = 4;
  s.topk_group = 2;
  s.routed_scaling_factor = 2.5;
  s.aux_loss = model::AuxLoss::kSequence;
  check_model_gradients(s, 10.0f);
}

// Routing of a 4-sequence batch through a Qwen3-MoE layer: dropless keeps all N*K
// assignments; the same spec with capacity routing at factor 0.5 drops some.
TEST(ModelMoeFamiliesTest, DroplessKeepsEveryAssignment) {
  set_num_threads(2);
  ModelSpec s = spec_from(kQwen3Moe);
  ASSERT_EQ(s.routing, model::MoeRouting::kDropless);
  Rng rng(5);
  const test::Batch b = test::make_batch(s, 4, 8, rng);
  auto dropless = Model::create(s, 4, 8);
  ASSERT_TRUE(dropless.ok()) << dropless.status().message();
  (*dropless)->init_params(3);
  (*dropless)->forward(b.inputs.data(), b.targets.data(), 4, 8);
  EXPECT_EQ((*dropless)->dropped_assignments(), 0);
  long kept = 0;
  for (int c : (*dropless)->expert_counts(0)) kept += c;
  EXPECT_EQ(kept, 4 * 8 * 2);

  s.routing = model::MoeRouting::kCapacity;
  s.capacity_factor = 0.5;
  auto capped = Model::create(s, 4, 8);
  ASSERT_TRUE(capped.ok()) << capped.status().message();
  (*capped)->init_params(3);
  (*capped)->forward(b.inputs.data(), b.targets.data(), 4, 8);
  EXPECT_GE((*capped)->dropped_assignments(), 32);  // capacity 8 of 64 assignments per expert
}

// What the engine still refuses of the MoE families names each missing piece in one line.
TEST(ModelMoeFamiliesTest, RefusesWhatDeepseekStillNeeds) {
  auto v3 = model::load_model_spec("deepseek_v3");
  ASSERT_TRUE(v3.ok());
  auto m = Model::create(*v3, 1, 8);
  ASSERT_FALSE(m.ok());
  for (const char* need :
       {"shared experts", "auxiliary-loss-free expert bias", "multi-token prediction"})
    EXPECT_NE(m.status().message().find(need), std::string::npos) << m.status().message();
  auto qwen = model::load_model_spec("qwen3_30b_a3b");
  ASSERT_TRUE(qwen.ok());
  EXPECT_TRUE(model::engine_builds(*qwen).ok()) << model::engine_builds(*qwen).message();
}

}  // namespace
}  // namespace cann
