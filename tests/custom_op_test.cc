// User activations (model/custom_op.h): the registry refuses what it must, a registered name is
// a value of hidden_act, and a model with each test op (tests/custom_ops.h) passes the
// whole-model gradient check; tensor_parallel_test checks the ops under tp against one process.
#include <gtest/gtest.h>

#include <string>

#include "custom_ops.h"
#include "model/custom_op.h"
#include "model/spec.h"
#include "model_grad_check.h"

namespace cann {
namespace {

const char* kGpt = R"(architecture: gpt
hidden_size: 24
num_hidden_layers: 2
num_attention_heads: 2
vocab_size: 31
seq_length: 8
)";

TEST(CustomOps, TheRegistryRefusesBuiltInTakenAndIncompleteOps) {
  test::register_test_activations();
  model::ActivationOp op;
  op.name = "gelu";
  op.forward = [](float*, const float*, int, int) {};
  op.backward = [](float*, const float*, const float*, int, int) {};
  EXPECT_FALSE(model::register_activation(op).ok());
  op.name = "squared_relu";
  const Status taken = model::register_activation(op);
  ASSERT_FALSE(taken.ok());
  EXPECT_NE(taken.message().find("registered already"), std::string::npos);
  op.name = "halfway";
  op.backward = nullptr;
  EXPECT_FALSE(model::register_activation(op).ok());
  EXPECT_EQ(model::find_activation("halfway"), nullptr);
  EXPECT_NE(model::find_activation("rms_silu"), nullptr);
}

TEST(CustomOps, ARegisteredNameIsAValueOfHiddenAct) {
  test::register_test_activations();
  auto s = model::parse_model_spec(std::string(kGpt) + "hidden_act: rms_silu\n", "t.yaml");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->custom_activation, "rms_silu");
  auto bad = model::parse_model_spec(std::string(kGpt) + "hidden_act: unregistered_op\n", "t.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'unregistered_op' is not an activation"),
            std::string::npos)
      << bad.status().message();
}

TEST(CustomOps, ModelsWithUserActivationsPassTheGradientCheck) {
  test::register_test_activations();
  for (const char* act : {"squared_relu", "rms_silu"}) {
    SCOPED_TRACE(act);
    test::check_model_gradients(std::string(kGpt) + "hidden_act: " + act + "\n");
  }
}

}  // namespace
}  // namespace cann
