// Today's model families through the spec reader: each family's released config.json
// (tests/data/hf) reads with the right blocks, and its parameter count equals the count of
// the tensors the Hugging Face implementation creates. That count is derived here a second
// time, independently of the reader and of build_param_table, straight from the config's
// keys and the modules of each family's modeling file (one nn.Linear / nn.Embedding /
// RMSNorm at a time), and checked against the model cards' figures.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "model/engine_support.h"
#include "model/param_table.h"
#include "model/spec.h"
#include "model/spec_json.h"
#include "plan/model_shape.h"
#include "test_util.h"

namespace cann::model {
namespace {

using Json = nlohmann::json;

std::string data_path(const std::string& name) {
  return std::string(CANN_SOURCE_DIR) + "/tests/data/hf/" + name + ".json";
}

Json read_json(const std::string& name) {
  std::ifstream in(data_path(name));
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str());
}

// The parameters of the Hugging Face model a config.json builds, module by module.
int64_t hf_param_count(const Json& c) {
  const std::string mt = c["model_type"];
  const int64_t h = c["hidden_size"], L = c["num_hidden_layers"], nh = c["num_attention_heads"];
  const int64_t V = c["vocab_size"], I = c["intermediate_size"];
  const int64_t nkv = c.value("num_key_value_heads", nh);
  const bool tie = c.value("tie_word_embeddings", false);
  const bool deepseek = mt == "deepseek_v2" || mt == "deepseek_v3";
  const bool qwen_moe = mt == "qwen2_moe" || mt == "qwen3_moe";
  auto linear = [](int64_t in, int64_t out, bool bias) { return in * out + (bias ? out : 0); };
  auto swiglu = [&](int64_t width) { return 3 * linear(h, width, false); };

  int64_t attention = 0;
  if (deepseek) {
    const bool b = c.value("attention_bias", false);
    const int64_t kv = c["kv_lora_rank"], rope = c["qk_rope_head_dim"];
    const int64_t nope = c["qk_nope_head_dim"], v = c["v_head_dim"], qk = nope + rope;
    if (c["q_lora_rank"].is_null()) {
      attention += linear(h, nh * qk, false);
    } else {
      const int64_t q = c["q_lora_rank"];
      attention += linear(h, q, b) + q /* q_a_layernorm */ + linear(q, nh * qk, false);
    }
    attention +=
        linear(h, kv + rope, b) + kv /* kv_a_layernorm */ + linear(kv, nh * (nope + v), false);
    attention += linear(nh * v, h, b);
  } else {
    const int64_t hd = c.value("head_dim", h / nh);
    const bool qkv_b = mt == "qwen2" || mt == "qwen2_moe" || c.value("attention_bias", false);
    const bool o_b = c.value("attention_bias", false);
    attention =
        linear(h, nh * hd, qkv_b) + 2 * linear(h, nkv * hd, qkv_b) + linear(nh * hd, h, o_b);
    if (mt == "qwen3" || mt == "qwen3_moe") attention += 2 * hd;  // q_norm, k_norm
  }
  const bool mlp_b = c.value("mlp_bias", false);
  const int64_t dense = mlp_b ? 2 * linear(h, I, true) + linear(I, h, true) : swiglu(I);

  int64_t total = V * h + (tie ? 0 : V * h) + h;  // embed_tokens, lm_head, norm
  for (int64_t l = 0; l < L; ++l) {
    total += attention + 2 * h;  // input_layernorm, post_attention_layernorm
    bool sparse = false;
    int64_t E = 0, expert_width = 0;
    if (mt == "mixtral") {
      sparse = true;
      E = c["num_local_experts"];
      expert_width = I;
    } else if (qwen_moe) {
      std::set<int64_t> dense_only;
      for (const auto& x : c.value("mlp_only_layers", Json::array()))
        dense_only.insert(x.get<int64_t>());
      E = c["num_experts"];
      sparse = !dense_only.count(l) && (l + 1) % c.value("decoder_sparse_step", 1) == 0;
      expert_width = c["moe_intermediate_size"];
    } else if (deepseek && !c["n_routed_experts"].is_null()) {
      E = c["n_routed_experts"];
      sparse =
          l >= c["first_k_dense_replace"].get<int64_t>() && l % c.value("moe_layer_freq", 1) == 0;
      expert_width = c["moe_intermediate_size"];
    }
    if (!sparse) {
      total += dense;
      continue;
    }
    total += E * swiglu(expert_width) + linear(h, E, false);  // experts, router gate
    if (mt == "qwen2_moe")
      total += swiglu(c["shared_expert_intermediate_size"]) + linear(h, 1, false);
    if (deepseek) total += swiglu(c["n_shared_experts"].get<int64_t>() * expert_width);
  }
  return total;
}

struct FamilyCase {
  const char* file;
  Family family;
  int64_t published;  // the count this config's model card or paper gives, exactly
};

// Published: Llama 3 8B 8,030,261,248 (Hugging Face model card: "8.03B"); Mixtral 8x7B
// 46,702,792,704 ("46.7B"); the others' cards round to 7.24B, 7.62B, 57.4B, 8.19B, 30.5B, 236B,
// 406B and 671B, which these exact counts match.
const FamilyCase kCases[] = {
    {"llama3_8b", Family::kLlama, 8030261248},
    {"llama3_1_405b", Family::kLlama, 405853388800},
    {"mistral_7b_v0_1", Family::kMistral, 7241732096},
    {"mixtral_8x7b", Family::kMixtral, 46702792704},
    {"qwen2_7b", Family::kQwen2, 7615616512},
    {"qwen2_57b_a14b", Family::kQwen2Moe, 57408658944},
    {"qwen3_8b", Family::kQwen3, 8190735360},
    {"qwen3_30b_a3b", Family::kQwen3Moe, 30532122624},
    {"deepseek_v2", Family::kDeepseekV2, 235741434880},
    {"deepseek_v3", Family::kDeepseekV3, 671026404352},
};

TEST(SpecFamiliesTest, ParameterCountsEqualTheHuggingFaceModels) {
  for (const FamilyCase& c : kCases) {
    SCOPED_TRACE(c.file);
    auto s = load_model_spec(data_path(c.file));
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_EQ(s->family, c.family);
    const int64_t table = static_cast<int64_t>(build_param_table(*s).num_parameters());
    const int64_t independent = hf_param_count(read_json(c.file));
    EXPECT_EQ(table, independent);
    EXPECT_EQ(table, c.published);
    EXPECT_EQ(static_cast<int64_t>(plan::model_shape(*s).total_params), table);
  }
}

TEST(SpecFamiliesTest, BlocksAreReadAsTheFamilyBuildsThem) {
  auto llama = load_model_spec(data_path("llama3_8b"));
  ASSERT_TRUE(llama.ok());
  EXPECT_EQ(llama->mlp, MlpKind::kSwiGlu);
  EXPECT_EQ(llama->norm, NormKind::kRmsNorm);
  EXPECT_DOUBLE_EQ(llama->norm_eps, 1e-5);
  EXPECT_EQ(llama->positions, PositionKind::kRotary);
  EXPECT_DOUBLE_EQ(llama->rope.theta, 500000.0);
  EXPECT_FALSE(llama->tie_word_embeddings);
  EXPECT_FALSE(llama->qkv_bias);
  EXPECT_EQ(llama->num_key_value_heads, 8);
  EXPECT_EQ(llama->seq_length, 8192);
  EXPECT_TRUE(build_param_table(*llama).find("lm_head").ok());
  EXPECT_FALSE(build_param_table(*llama).find("wpe").ok());

  auto l405 = load_model_spec(data_path("llama3_1_405b"));
  ASSERT_TRUE(l405.ok());
  EXPECT_EQ(l405->rope.scaling, RopeScaling::kLlama3);
  EXPECT_DOUBLE_EQ(l405->rope.factor, 8.0);
  EXPECT_EQ(l405->rope.original_max_position, 8192);

  auto mistral = load_model_spec(data_path("mistral_7b_v0_1"));
  ASSERT_TRUE(mistral.ok());
  EXPECT_EQ(mistral->window(0), 4096);
  EXPECT_EQ(mistral->window(31), 4096);

  auto mixtral = load_model_spec(data_path("mixtral_8x7b"));
  ASSERT_TRUE(mixtral.ok());
  EXPECT_EQ(mixtral->num_moe_layers(), 32);
  EXPECT_EQ(mixtral->moe_intermediate_size, 14336);
  EXPECT_TRUE(mixtral->norm_topk_prob);
  EXPECT_EQ(mixtral->routing, MoeRouting::kDropless);
  EXPECT_EQ(mixtral->window(0), 0);
  // output_router_logits is false: Hugging Face trains no balancing loss then.
  EXPECT_EQ(mixtral->router_aux_loss_coef, 0.0);

  auto qwen2 = load_model_spec(data_path("qwen2_7b"));
  ASSERT_TRUE(qwen2.ok());
  EXPECT_TRUE(qwen2->qkv_bias);
  EXPECT_FALSE(qwen2->o_bias);
  EXPECT_TRUE(qwen2->attention_window.empty());  // use_sliding_window: false

  auto qmoe = load_model_spec(data_path("qwen2_57b_a14b"));
  ASSERT_TRUE(qmoe.ok());
  EXPECT_EQ(qmoe->num_shared_experts, 1);
  EXPECT_EQ(qmoe->shared_expert_intermediate_size, 20480);
  EXPECT_TRUE(qmoe->shared_expert_gate);

  auto qwen3 = load_model_spec(data_path("qwen3_30b_a3b"));
  ASSERT_TRUE(qwen3.ok());
  EXPECT_TRUE(qwen3->qk_norm);
  EXPECT_EQ(qwen3->head_size(), 128);  // not 2048 / 32
  EXPECT_TRUE(qwen3->norm_topk_prob);
  EXPECT_EQ(qwen3->num_moe_layers(), 48);

  auto v2 = load_model_spec(data_path("deepseek_v2"));
  ASSERT_TRUE(v2.ok());
  EXPECT_TRUE(v2->mla_enabled);
  EXPECT_EQ(v2->topk_method, TopkMethod::kGroupLimited);
  EXPECT_EQ(v2->num_shared_experts, 2);
  EXPECT_EQ(v2->shared_expert_intermediate_size, 3072);
  EXPECT_FALSE(v2->is_moe_layer(0));
  EXPECT_TRUE(v2->is_moe_layer(1));
  EXPECT_EQ(v2->rope.scaling, RopeScaling::kYarn);
  EXPECT_DOUBLE_EQ(v2->rope.mscale_all_dim, 0.707);

  auto v3 = load_model_spec(data_path("deepseek_v3"));
  ASSERT_TRUE(v3.ok());
  EXPECT_EQ(v3->router_score, RouterScore::kSigmoid);
  EXPECT_EQ(v3->topk_method, TopkMethod::kNoAuxTc);
  EXPECT_EQ(v3->n_group, 8);
  EXPECT_EQ(v3->topk_group, 4);
  EXPECT_DOUBLE_EQ(v3->routed_scaling_factor, 2.5);
  EXPECT_EQ(v3->num_moe_layers(), 58);
  EXPECT_EQ(v3->aux_loss, AuxLoss::kSequence);
  EXPECT_EQ(v3->num_nextn_predict_layers, 1);
  EXPECT_EQ(v3->weight_storage, "fp8 e4m3 128x128");
  EXPECT_TRUE(v3->rope.interleaved);
  EXPECT_DOUBLE_EQ(v3->rope.partial_rotary_factor, 64.0 / 192.0);
  // The multi-token prediction module: one MoE block, eh_proj and three norms (the embedding
  // and head are shared), counted beside the model.
  EXPECT_EQ(static_cast<int64_t>(plan::model_shape(*v3).mtp_params), 11610067968);
}

TEST(SpecFamiliesTest, EveryConfigRoundTripsThroughJson) {
  for (const FamilyCase& c : kCases) {
    SCOPED_TRACE(c.file);
    auto s = load_model_spec(data_path(c.file));
    ASSERT_TRUE(s.ok());
    auto back = parse_model_spec(spec_to_json(*s), "back.json");
    ASSERT_TRUE(back.ok()) << back.status().message() << "\n" << spec_to_json(*s);
    EXPECT_EQ(spec_to_json(*back), spec_to_json(*s));
    EXPECT_EQ(build_param_table(*back).fingerprint(), build_param_table(*s).fingerprint());
    EXPECT_EQ(build_param_table(*back, 2).fingerprint(), build_param_table(*s, 2).fingerprint());
  }
  for (const auto& name : shipped_model_names()) {
    SCOPED_TRACE(name);
    auto s = load_model_spec(name);
    ASSERT_TRUE(s.ok()) << s.status().message();
    auto back = parse_model_spec(spec_to_json(*s), "back.json");
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(spec_to_json(*back), spec_to_json(*s));
  }
}

// The config with `edit` applied: each entry sets a key (null removes it).
std::string edited(const std::string& file, const Json& edit) {
  Json c = read_json(file);
  for (auto it = edit.begin(); it != edit.end(); ++it) {
    if (it.value().is_null()) {
      c.erase(it.key());
    } else {
      c[it.key()] = it.value();
    }
  }
  return c.dump();
}

void expect_refused(const std::string& text, const std::vector<std::string>& fragments) {
  auto s = parse_model_spec(text, "config.json");
  ASSERT_FALSE(s.ok()) << text;
  EXPECT_EQ(s.status().exit_code(), 2);
  const std::string& m = s.status().message();
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_NE(m.find("config.json"), std::string::npos) << m;
  for (const auto& f : fragments) EXPECT_NE(m.find(f), std::string::npos) << f << " in: " << m;
}

TEST(SpecFamiliesTest, ContradictionsAreRefusedNamingTheKeys) {
  expect_refused(edited("llama3_8b", {{"num_attention_heads", 30}}),
                 {"num_attention_heads", "hidden_size", "head_dim"});
  EXPECT_TRUE(parse_model_spec(edited("llama3_8b", {{"num_attention_heads", 30},
                                                    {"num_key_value_heads", 10},
                                                    {"head_dim", 128}}),
                               "config.json")
                  .ok());
  expect_refused(edited("llama3_8b", {{"num_key_value_heads", 5}}),
                 {"num_key_value_heads", "num_attention_heads"});
  expect_refused(edited("mixtral_8x7b", {{"num_experts_per_tok", 9}}),
                 {"num_experts_per_tok", "exceed"});
  expect_refused(edited("deepseek_v3", {{"topk_group", 9}}), {"topk_group", "n_group"});
  expect_refused(edited("deepseek_v3", {{"n_group", 7}}), {"n_group", "divide"});
  expect_refused(edited("llama3_8b", {{"rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2}}}}),
                 {"rope_scaling.type", "dynamic"});
  expect_refused(edited("llama3_8b", {{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8}}}}),
                 {"rope_scaling.low_freq_factor", "missing"});
  expect_refused(edited("llama3_8b",
                        {{"rope_scaling", {{"type", "linear"}, {"factor", 2}, {"beta_fast", 32}}}}),
                 {"rope_scaling.beta_fast", "linear"});
  expect_refused(edited("qwen2_7b", {{"use_sliding_window", true}}),
                 {"use_sliding_window", "layer_types"});
  expect_refused(edited("deepseek_v3", {{"scoring_func", "sqrtsoftplus"}}), {"scoring_func"});
  expect_refused(edited("mixtral_8x7b", {{"router_jitter_noise", 0.1}}), {"router_jitter_noise"});
  expect_refused(edited("llama3_8b", {{"hidden_act", "gelu"}}), {"hidden_act", "silu"});
  // A key of another family is refused, not ignored.
  expect_refused(edited("llama3_8b", {{"n_shared_experts", 2}}),
                 {"n_shared_experts", "deepseek", "llama"});
  expect_refused(edited("llama3_8b", {{"num_local_experts", 8}}), {"num_local_experts"});
  expect_refused(edited("qwen3_8b", {{"gating_temperature", 1.0}}),
                 {"gating_temperature", "unknown key"});
  expect_refused(edited("llama3_8b", {{"model_type", "gemma2"}}), {"model_type", "gemma2"});
  expect_refused(edited("llama3_8b", {{"architecture", "bert"}}), {"model_type", "contradicts"});
}

TEST(SpecFamiliesTest, SlidingLayersFromLayerTypes) {
  Json types = Json::array();
  for (int l = 0; l < 28; ++l) types.push_back(l % 2 ? "full_attention" : "sliding_attention");
  auto s = parse_model_spec(
      edited("qwen2_7b",
             {{"use_sliding_window", true}, {"sliding_window", 4096}, {"layer_types", types}}),
      "config.json");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->window(0), 4096);
  EXPECT_EQ(s->window(1), 0);
}

TEST(SpecFamiliesTest, RopeParametersInTheNewFormat) {
  auto s = parse_model_spec(
      edited("llama3_8b", {{"rope_theta", nullptr},
                           {"rope_scaling", nullptr},
                           {"rope_parameters",
                            {{"rope_theta", 500000.0}, {"rope_type", "linear"}, {"factor", 4}}}}),
      "config.json");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_DOUBLE_EQ(s->rope.theta, 500000.0);
  EXPECT_EQ(s->rope.scaling, RopeScaling::kLinear);
  expect_refused(edited("llama3_8b", {{"rope_parameters", {{"rope_theta", 10000.0}}}}),
                 {"rope_theta", "twice"});
}

TEST(SpecFamiliesTest, DeepseekLiteWithoutQueryCompression) {
  auto s = parse_model_spec(edited("deepseek_v2", {{"q_lora_rank", nullptr}}), "config.json");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->mla.q_lora_rank, 1536);  // absent: the class default
  Json c = read_json("deepseek_v2");
  c["q_lora_rank"] = nullptr;  // written null: no query compression (DeepSeek-V2-Lite)
  auto lite = parse_model_spec(c.dump(), "config.json");
  ASSERT_TRUE(lite.ok());
  EXPECT_EQ(lite->mla.q_lora_rank, 0);
  EXPECT_TRUE(build_param_table(*lite).find("h.0.attn.q.w").ok());
  EXPECT_EQ(static_cast<int64_t>(build_param_table(*lite).num_parameters()), hf_param_count(c));
}

TEST(SpecFamiliesTest, EngineRefusesWhatItDoesNotBuildInOneLine) {
  auto v3 = load_model_spec(data_path("deepseek_v3"));
  ASSERT_TRUE(v3.ok());
  const Status st = engine_builds(*v3);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.exit_code(), 2);
  for (const char* need : {"multi-token"})
    EXPECT_NE(st.message().find(need), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos);
  auto qwen2_moe = load_model_spec(data_path("qwen2_57b_a14b"));  // shared experts
  ASSERT_TRUE(qwen2_moe.ok());
  EXPECT_TRUE(engine_builds(*qwen2_moe).ok()) << engine_builds(*qwen2_moe).message();
  for (const char* ok :
       {"gpt_tiny", "moe_bert_tiny", "gpt2_124m", "bert_base", "llama3_8b", "llama3_405b"}) {
    auto s = load_model_spec(ok);
    ASSERT_TRUE(s.ok());
    EXPECT_TRUE(engine_builds(*s).ok()) << ok << ": " << engine_builds(*s).message();
  }
}

// Runs the test body in another directory, and comes back.
struct InDirectory {
  explicit InDirectory(const std::string& dir) : back(std::filesystem::current_path()) {
    std::filesystem::current_path(dir);
  }
  ~InDirectory() { std::filesystem::current_path(back); }
  std::filesystem::path back;
};

TEST(SpecFamiliesTest, ShippedNamesWithAnExtensionFromAnyDirectory) {
  test::TempDir dir;
  InDirectory cd(dir.path());
  for (const char* name : {"moe_bert", "moe_bert.yaml", "moe_bert.json", "llama3_8b.yaml"}) {
    auto s = load_model_spec(name);
    EXPECT_TRUE(s.ok()) << name << ": " << s.status().message();
  }
  auto unknown = load_model_spec("llama4.yaml");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().exit_code(), 2);
  EXPECT_NE(unknown.status().message().find("deepseek_v3"), std::string::npos);
}

}  // namespace
}  // namespace cann::model
