// Tiny models of every family (see hf_test_models.h).
#include "hf_test_models.h"

#include <fstream>
#include <nlohmann/json.hpp>

namespace cann::test {

const std::vector<HfTestModel>& hf_test_models() {
  static const std::string kBase =
      R"("hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, )"
      R"("num_key_value_heads": 2, "intermediate_size": 48, "vocab_size": 64, )"
      R"("max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0)";
  static const std::string kDeepseek =
      R"("hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4, )"
      R"("num_key_value_heads": 4, "intermediate_size": 48, "moe_intermediate_size": 16, )"
      R"("vocab_size": 64, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, )"
      R"("rope_theta": 10000.0, "kv_lora_rank": 16, "qk_nope_head_dim": 8, )"
      R"("qk_rope_head_dim": 4, "v_head_dim": 8, "n_routed_experts": 8, "n_shared_experts": 1, )"
      R"("num_experts_per_tok": 2, "n_group": 4, "topk_group": 2, "first_k_dense_replace": 1, )"
      R"("moe_layer_freq": 1, "tie_word_embeddings": false, "aux_loss_alpha": 0.0)";
  // Dense DeepSeek models: multi-head latent attention (v_head_dim apart from nope + rope) and
  // SwiGLU MLPs only.
  static const std::string kMla =
      R"("hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, )"
      R"("num_key_value_heads": 4, "intermediate_size": 48, "vocab_size": 64, )"
      R"("max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, )"
      R"("kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 10, )"
      R"("n_routed_experts": 0, "first_k_dense_replace": 2, "tie_word_embeddings": false)";
  static const std::vector<HfTestModel> kModels = {
      {"gpt2", R"({"architecture": "gpt", "hidden_size": 32, "num_hidden_layers": 2, )"
               R"("num_attention_heads": 4, "vocab_size": 64, "seq_length": 16})"},
      {"llama", R"({"model_type": "llama", )" + kBase + R"(, "tie_word_embeddings": false})"},
      {"qwen2", R"({"model_type": "qwen2", )" + kBase + R"(, "tie_word_embeddings": true})"},
      {"qwen3",
       R"({"model_type": "qwen3", )" + kBase + R"(, "head_dim": 16, "tie_word_embeddings": true})"},
      {"qwen3_moe", R"({"model_type": "qwen3_moe", )" + kBase +
                        R"(, "head_dim": 8, "num_experts": 4, "num_experts_per_tok": 2, )"
                        R"("moe_intermediate_size": 24, "norm_topk_prob": true, )"
                        R"("mlp_only_layers": [0], "tie_word_embeddings": false})"},
      {"qwen2_moe", R"({"model_type": "qwen2_moe", )" + kBase +
                        R"(, "num_experts": 4, "num_experts_per_tok": 2, )"
                        R"("moe_intermediate_size": 24, "shared_expert_intermediate_size": 40, )"
                        R"("tie_word_embeddings": false})"},
      {"mixtral", R"({"model_type": "mixtral", )" + kBase +
                      R"(, "num_local_experts": 4, "num_experts_per_tok": 2, )"
                      R"("output_router_logits": true, "router_aux_loss_coef": 0.05, )"
                      R"("tie_word_embeddings": false})"},
      {"deepseek_v2", R"({"model_type": "deepseek_v2", )" + kDeepseek +
                          R"(, "q_lora_rank": null, "topk_method": "group_limited_greedy", )"
                          R"("scoring_func": "softmax", "routed_scaling_factor": 2.0})"},
      {"deepseek_v3", R"({"model_type": "deepseek_v3", )" + kDeepseek +
                          R"(, "q_lora_rank": 24, "topk_method": "noaux_tc", )"
                          R"("scoring_func": "sigmoid", "norm_topk_prob": true, )"
                          R"("routed_scaling_factor": 2.5, "num_nextn_predict_layers": 0})"},
      {"deepseek_v3_dense", R"({"model_type": "deepseek_v3", )" + kMla +
                                R"(, "q_lora_rank": 24, "num_nextn_predict_layers": 0})"},
      // Yarn with DeepSeek's mscales: rotary cos/sin scaled by mscale / mscale_all_dim and the
      // softmax by mscale_all_dim's factor squared; biases on kv_a and o.
      {"deepseek_v2_dense_yarn",
       R"({"model_type": "deepseek_v2", )" + kMla +
           R"(, "q_lora_rank": null, "attention_bias": true, "rope_scaling": {"type": "yarn", )"
           R"("factor": 4.0, "original_max_position_embeddings": 16, "beta_fast": 32, )"
           R"("beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 0.8}})"},
  };
  return kModels;
}

model::ModelSpec hf_test_spec(const HfTestModel& m) {
  auto s = model::parse_model_spec(m.config, m.family + ".json");
  CANN_CHECK(s.ok()) << s.status().message();
  return *s;
}

std::vector<float> random_params(const model::ModelSpec& spec, uint64_t seed) {
  const model::ParamTable table = model::build_param_table(spec);
  std::vector<float> p(table.total_floats(), 0.0f);
  Rng rng(seed);
  for (const model::TensorInfo& t : table.tensors()) {
    const bool norm = t.name.ends_with("norm.w") || t.name.ends_with("ln1.w") ||
                      t.name.ends_with("ln2.w") || t.name == "lnf.w";
    for (size_t i = 0; i < t.numel; ++i) {
      const double z = rng.normal();
      p[t.offset + i] = static_cast<float>(norm                  ? 1.0 + 0.1 * z
                                           : t.shape.size() >= 2 ? 0.1 * z
                                                                 : 0.05 * z);
    }
  }
  return p;
}

void write_token_shard(const std::string& path, const std::vector<int>& tokens) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = 1;
  header[2] = static_cast<int32_t>(tokens.size());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  for (int t : tokens) {
    const uint16_t v = static_cast<uint16_t>(t);
    out.write(reinterpret_cast<const char*>(&v), 2);
  }
}

void write_token_data(const std::string& dir, uint64_t seed, int windows, int seq_len) {
  Rng rng(seed);
  for (const char* name : {"/train.bin", "/val.bin"}) {
    std::vector<int> tokens(static_cast<size_t>(windows) * seq_len + 1);
    for (int& t : tokens) t = static_cast<int>(rng.next_u64() % 64);
    write_token_shard(dir + name, tokens);
  }
}

void write_raw_safetensors(const std::string& path, const std::vector<RawTensor>& tensors) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  std::string data;
  for (const RawTensor& t : tensors) {
    h[t.name] = {{"dtype", t.dtype},
                 {"shape", t.shape},
                 {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  const std::string text = h.dump();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  std::ofstream(path, std::ios::binary) << out << text << data;
}

}  // namespace cann::test
