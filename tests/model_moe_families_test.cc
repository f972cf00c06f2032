// Whole-model gradient checks of the Hugging Face families' mixture-of-experts layers on one
// process (model_grad_check.h): SwiGLU experts without biases behind the families' router
// (softmax, top-k weights renormalized or not, dropless or capacity slots, the Switch/Mixtral
// or the sequence-wise balance loss, DeepSeek-V3's selection bias), shared experts (DeepSeek's
// and Qwen2-MoE's gated one), dense layers beside MoE ones, and Qwen3's attention.
// Also: dropless routing keeps every assignment where capacity routing drops some, and the
// selection bias steers the choice without weighing it.
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

// DeepSeek's router pieces on the same model (their own configs also need MLA): 8 experts in 4
// groups of 2, 2 groups kept, sigmoid scores, weights normalized and scaled by 2.5, with the
// sequence-wise loss.
ModelSpec deepseek_router(model::TopkMethod method) {
  ModelSpec s = spec_from(kQwen3Moe);
  s.num_local_experts = 8;
  s.router_score = model::RouterScore::kSigmoid;
  s.topk_method = method;
  s.n_group = 4;
  s.topk_group = 2;
  s.routed_scaling_factor = 2.5;
  s.aux_loss = model::AuxLoss::kSequence;
  return s;
}

// DeepSeek-V2's group-limited top-k (groups ranked by their best score).
TEST(ModelMoeFamiliesGradientTest, SigmoidGroupLimitedScaled) {
  check_model_gradients(deepseek_router(model::TopkMethod::kGroupLimited), 10.0f);
}

// Qwen2-MoE: a shared expert of width 20 beside 4 routed ones, scaled per token by
// sigmoid(x . shared_expert_gate); weights not normalized, every layer sparse.
TEST(ModelMoeFamiliesGradientTest, Qwen2MoeGatedSharedExpert) {
  check_model_gradients(
      "model_type: qwen2_moe\nhidden_size: 16\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
      "num_key_value_heads: 2\nintermediate_size: 24\nmoe_intermediate_size: 12\n"
      "shared_expert_intermediate_size: 20\nnum_experts: 4\nnum_experts_per_tok: 2\n"
      "vocab_size: 23\nmax_position_embeddings: 16\nseq_length: 8\ntie_word_embeddings: false\n"
      "output_router_logits: true\nrouter_aux_loss_coef: 0.1\n",
      10.0f);
}

// DeepSeek's shared experts (their configs also need MLA) on the Qwen3-MoE model: two of the
// routed experts' width, one MLP of 24 added ungated to the routed output.
TEST(ModelMoeFamiliesGradientTest, DeepseekSharedExperts) {
  ModelSpec s = spec_from(kQwen3Moe);
  s.num_shared_experts = 2;
  s.shared_expert_intermediate_size = 2 * s.moe_intermediate_size;
  check_model_gradients(s, 10.0f);
}

// DeepSeek-V3's router: a per-expert selection bias (set to a visible size by the check),
// groups ranked by their two best biased scores, weights from the unbiased scores; with a
// shared expert.
TEST(ModelMoeFamiliesGradientTest, NoauxSelectionBias) {
  ModelSpec s = deepseek_router(model::TopkMethod::kNoAuxTc);
  s.num_shared_experts = 1;
  s.shared_expert_intermediate_size = s.moe_intermediate_size;
  check_model_gradients(s, 10.0f);
}

// The selection bias is state, not a parameter: it steers the choice (a large bias on expert
// 3 sends every token there), gets no gradient, and the parameter count leaves it out.
// (That it chooses without weighing is the router kernel's, tests/kernels_moe_routing_test.cc.)
TEST(ModelMoeFamiliesTest, SelectionBiasSteersAndIsNotTrained) {
  set_num_threads(2);
  ModelSpec s = spec_from(kQwen3Moe);
  s.topk_method = model::TopkMethod::kNoAuxTc;
  Rng rng(5);
  const test::Batch b = test::make_batch(s, 2, 8, rng);
  auto created = Model::create(s, 2, 8);
  ASSERT_TRUE(created.ok()) << created.status().message();
  Model& m = **created;
  m.init_params(3);
  const model::TensorInfo& bias = m.table().at(*m.table().find("h.1.moe.router.bias"));
  EXPECT_FALSE(bias.trained);
  EXPECT_EQ(m.table().num_parameters(),
            model::build_param_table(spec_from(kQwen3Moe)).num_parameters());
  m.params()[bias.offset + 3] = 10.0f;
  m.zero_grads();
  m.forward(b.inputs.data(), b.targets.data(), 2, 8);
  EXPECT_EQ(m.expert_counts(0)[3], 16);  // every token's first choice
  m.backward();
  for (size_t i = 0; i < bias.numel; ++i) EXPECT_EQ(m.grads()[bias.offset + i], 0.0f);
  m.params()[bias.offset + 3] = 0.0f;
  m.forward(b.inputs.data(), b.targets.data(), 2, 8);
  EXPECT_LT(m.expert_counts(0)[3], 16);
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
  for (const char* need : {"multi-token prediction"})
    EXPECT_NE(m.status().message().find(need), std::string::npos) << m.status().message();
  for (const char* built : {"shared experts", "noaux_tc", "latent attention"})
    EXPECT_EQ(m.status().message().find(built), std::string::npos) << m.status().message();
  auto qwen = model::load_model_spec("qwen3_30b_a3b");
  ASSERT_TRUE(qwen.ok());
  EXPECT_TRUE(model::engine_builds(*qwen).ok()) << model::engine_builds(*qwen).message();
}

}  // namespace
}  // namespace cann
