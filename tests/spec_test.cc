// Model spec parsing: canonical keys, GPT-2 and Hugging Face aliases, defaults, and every
// validation error naming the file and key.
#include <gtest/gtest.h>

#include "model/param_table.h"
#include "model/spec.h"
#include "model/spec_json.h"
#include "test_util.h"

namespace cann::model {
namespace {

StatusOr<ModelSpec> parse(const std::string& text) {
  return parse_model_spec(text, "m.yaml");
}

void expect_error(const std::string& text, const std::string& key, const std::string& fragment) {
  auto s = parse(text);
  ASSERT_FALSE(s.ok()) << text;
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().exit_code(), 2);
  const std::string& m = s.status().message();
  EXPECT_NE(m.find("m.yaml"), std::string::npos) << m;
  EXPECT_NE(m.find(key), std::string::npos) << m;
  EXPECT_NE(m.find(fragment), std::string::npos) << m;
}

const char kGpt[] =
    "architecture: gpt\nhidden_size: 64\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
    "vocab_size: 100\nseq_length: 32\n";

TEST(SpecTest, CanonicalKeysAndDefaults) {
  auto s = parse(kGpt);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->architecture, Architecture::kGpt);
  EXPECT_EQ(s->num_key_value_heads, 4);
  EXPECT_EQ(s->intermediate_size, 256);
  EXPECT_EQ(s->head_size(), 16);
  EXPECT_FALSE(s->is_moe());
  EXPECT_EQ(s->name, "m");
}

TEST(SpecTest, Gpt2AliasesAndHuggingFaceConfig) {
  // An unmodified GPT-2 config.json from the Hugging Face hub.
  const std::string json = R"({
    "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256,
    "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2",
    "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024,
    "resid_pdrop": 0.1, "summary_activation": null, "summary_first_dropout": 0.1,
    "summary_proj_to_labels": true, "summary_type": "cls_index", "summary_use_proj": true,
    "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
    "vocab_size": 50257})";
  auto s = parse_model_spec(json, "config.json");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->architecture, Architecture::kGpt);
  EXPECT_EQ(s->hidden_size, 768);
  EXPECT_EQ(s->num_hidden_layers, 12);
  EXPECT_EQ(s->seq_length, 1024);
  // 124M parameters: GPT-2 small, with a tied head.
  EXPECT_NEAR(static_cast<double>(build_param_table(*s).num_parameters()), 124.44e6, 0.01e6);
}

TEST(SpecTest, MoeKeys) {
  auto s = parse(std::string(kGpt) +
                 "num_local_experts: 8\nnum_experts_per_tok: 2\nmoe_layer_freq: 2\n"
                 "capacity_factor: 1.5\n");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_TRUE(s->is_moe());
  EXPECT_FALSE(s->is_moe_layer(0));
  EXPECT_TRUE(s->is_moe_layer(1));
  EXPECT_EQ(s->num_moe_layers(), 1);
  EXPECT_EQ(s->moe_intermediate_size, 256);
  EXPECT_DOUBLE_EQ(s->capacity_factor, 1.5);
}

TEST(SpecTest, ValidationErrorsNameTheKey) {
  expect_error(std::string(kGpt) + "dropout_rate: 0.1\n", "dropout_rate", "unknown key");
  expect_error(
      "architecture: gpt\nhidden_size: -3\nnum_hidden_layers: 2\n"
      "num_attention_heads: 4\nvocab_size: 100\nseq_length: 32\n",
      "hidden_size", "must be positive");
  expect_error(
      "architecture: gpt\nhidden_size: 64\nnum_hidden_layers: 2\n"
      "num_attention_heads: 5\nvocab_size: 100\nseq_length: 32\n",
      "num_attention_heads", "do not divide hidden_size");
  expect_error(std::string(kGpt) + "num_local_experts: 4\nnum_experts_per_tok: 5\n",
               "num_experts_per_tok", "exceed");
  expect_error(std::string(kGpt) + "num_key_value_heads: 3\n", "num_key_value_heads",
               "do not divide");
  expect_error(
      "architecture: gpt\nhidden_size: sixty\nnum_hidden_layers: 2\n"
      "num_attention_heads: 4\nvocab_size: 100\nseq_length: 32\n",
      "hidden_size", "expected an integer");
  expect_error("architecture: transformer\nhidden_size: 64\n", "architecture",
               "unknown architecture");
  expect_error(
      "architecture: gpt\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
      "vocab_size: 100\nseq_length: 32\n",
      "hidden_size", "missing");
  expect_error(std::string(kGpt) + "n_embd: 64\n", "n_embd", "given twice");
}

TEST(SpecTest, MalformedYamlGivesLineAndColumn) {
  auto s = parse("architecture: gpt\nhidden_size: [64\nnum_hidden_layers: 2\n");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().exit_code(), 2);
  EXPECT_NE(s.status().message().find("m.yaml:"), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("malformed"), std::string::npos);
  auto list = parse("- 1\n- 2\n");
  ASSERT_FALSE(list.ok());
  EXPECT_NE(list.status().message().find("mapping"), std::string::npos);
}

TEST(SpecTest, ShippedConfigsAllLoadByName) {
  const auto names = shipped_model_names();
  for (const char* required : {"gpt_tiny", "moe_bert_tiny", "gpt2_124m", "bert_base", "bert_large"})
    EXPECT_NE(std::find(names.begin(), names.end(), required), names.end()) << required;
  for (const auto& n : names) {
    auto s = load_model_spec(n);
    EXPECT_TRUE(s.ok()) << n << ": " << s.status().message();
    EXPECT_EQ(s->name, n);
  }
  auto moe = load_model_spec("moe_bert_tiny");
  ASSERT_TRUE(moe.ok());
  EXPECT_EQ(moe->architecture, Architecture::kBert);
  EXPECT_EQ(moe->num_local_experts, 4);
  // BERT-Base: 12 layers of 7.1M, embeddings 23.8M (no token-type table, no pooler here).
  auto base = load_model_spec("bert_base");
  ASSERT_TRUE(base.ok());
  EXPECT_NEAR(static_cast<double>(build_param_table(*base).num_parameters()) / 1e6, 109.1, 0.5);
}

TEST(SpecTest, UnknownNameListsTheShippedOnes) {
  auto s = load_model_spec("gpt_huge");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  EXPECT_NE(s.status().message().find("gpt_tiny"), std::string::npos);
  auto f = load_model_spec("/nonexistent/model.yaml");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().exit_code(), 2);
}

TEST(SpecTest, LoadsFromFileAndRoundTripsThroughJson) {
  test::TempDir dir;
  test::write_text(dir.file("my.yaml"), std::string(kGpt) + "num_local_experts: 2\n");
  auto s = load_model_spec(dir.file("my.yaml"));
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->name, "my");
  auto back = parse_model_spec(spec_to_json(*s), "back.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(spec_to_json(*back), spec_to_json(*s));
  EXPECT_EQ(build_param_table(*back).fingerprint(), build_param_table(*s).fingerprint());
}

TEST(ParamTableTest, OffsetsAlignedAndDisjoint) {
  auto s = parse(std::string(kGpt) + "num_local_experts: 3\nmoe_layer_freq: 2\n");
  ASSERT_TRUE(s.ok());
  const ParamTable t = build_param_table(*s);
  size_t end = 0;
  for (const auto& info : t.tensors()) {
    EXPECT_EQ(info.offset % ParamTable::kAlign, 0u) << info.name;
    EXPECT_GE(info.offset, end) << info.name;
    end = info.offset + info.numel;
  }
  EXPECT_EQ(end, t.total_floats());
  EXPECT_TRUE(t.find("h.1.moe.fc.w").ok());
  EXPECT_TRUE(t.find("h.0.mlp.fc.w").ok());
  EXPECT_FALSE(t.find("h.0.moe.fc.w").ok());
  auto [b, e] = t.layer_range(1);
  EXPECT_LT(b, e);
}

}  // namespace
}  // namespace cann::model
