// Hugging Face weights: safetensors of every dtype the loader reads, each family's names
// covering its parameter table exactly once, export -> load -> export bit for bit (one file
// and sharded), and `run --init-from` under several layouts writing back the same bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "ckpt/safetensors.h"
#include "ckpt/safetensors_file.h"
#include "core/fs.h"
#include "hf_test_models.h"
#include "model/hf_names.h"
#include "run_args.h"
#include "test_util.h"
#include "train/hf_weights.h"

namespace cann {
namespace {

using test::TempDir;

std::string u16_bytes(const std::vector<uint16_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 2);
}

TEST(HfSafetensors, ReadsBf16F16AndF32AndNamesOtherDtypes) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  const float f32[2] = {0.1f, -7.0f};
  const int64_t i64[1] = {42};
  test::write_raw_safetensors(
      path, {{"b", "BF16", {4}, u16_bytes({0x3f80, 0xc020, 0x4049, 0x8000})},
             {"h", "F16", {5}, u16_bytes({0x3c00, 0xc100, 0x0001, 0x7c00, 0x3555})},
             {"f", "F32", {2}, std::string(reinterpret_cast<const char*>(f32), 8)},
             {"i", "I64", {1}, std::string(reinterpret_cast<const char*>(i64), 8)}});
  auto h = ckpt::read_safetensors_header(path);
  ASSERT_TRUE(h.ok()) << h.status().message();
  ASSERT_EQ(h->tensors.size(), 4u);
  auto read = [&](size_t i, size_t n) {
    std::vector<float> out(n);
    Status s = ckpt::read_tensor_f32(path, h->data_start, h->tensors[i], out.data());
    EXPECT_TRUE(s.ok()) << s.message();
    return out;
  };
  // bf16 is the top half of a float: 1, -2.5, 3.140625, -0.
  const std::vector<float> b = read(0, 4);
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(b[1], -2.5f);
  EXPECT_EQ(b[2], 3.140625f);
  EXPECT_TRUE(b[3] == 0.0f && std::signbit(b[3]));
  // f16: 1, -2.5, the smallest subnormal 2^-24, +inf, 0x3555 = 1/3 rounded (0.333251953125).
  const std::vector<float> f = read(1, 5);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], -2.5f);
  EXPECT_EQ(f[2], std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(f[3]) && f[3] > 0);
  EXPECT_EQ(f[4], 0.333251953125f);
  EXPECT_EQ(read(2, 2), std::vector<float>({0.1f, -7.0f}));
  std::vector<float> x(1);
  Status s = ckpt::read_tensor_f32(path, h->data_start, h->tensors[3], x.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tensor i in " + path + " is I64"), std::string::npos) << s.message();
}

// Every float of the table is one float of exactly one Hugging Face tensor, and the names are
// the published ones.
TEST(HfNames, EveryFamilyCoversItsTableOnce) {
  for (const test::HfTestModel& m : test::hf_test_models()) {
    SCOPED_TRACE(m.family);
    const model::ModelSpec spec = test::hf_test_spec(m);
    const model::ParamTable table = model::build_param_table(spec);
    auto hf = model::hf_tensors(spec);
    ASSERT_TRUE(hf.ok()) << hf.status().message();
    std::vector<int> covered(table.total_floats(), 0);
    std::set<std::string> names;
    for (const model::HfTensor& h : *hf) {
      EXPECT_TRUE(names.insert(h.name).second) << h.name;
      if (h.param.empty()) continue;
      const model::TensorInfo& t = table.at(*table.find(h.param));
      ASSERT_LE(h.offset + h.numel(), t.numel) << h.name;
      for (size_t i = 0; i < h.numel(); ++i) ++covered[t.offset + h.offset + i];
    }
    for (const model::TensorInfo& t : table.tensors())
      for (size_t i = 0; i < t.numel; ++i)
        ASSERT_EQ(covered[t.offset + i], 1) << t.name << " float " << i;
    const bool tied = spec.tie_word_embeddings;
    EXPECT_EQ(names.count("lm_head.weight"), tied ? 0u : 1u);
    auto has = [&](const std::string& n) { EXPECT_TRUE(names.count(n)) << n; };
    if (m.family == "gpt2") {
      has("transformer.h.1.attn.c_attn.weight");
      has("transformer.h.0.mlp.c_proj.bias");
      has("transformer.wpe.weight");
      has("transformer.ln_f.bias");
    } else {
      has("model.embed_tokens.weight");
      has("model.layers.1.input_layernorm.weight");
      has("model.layers.1.post_attention_layernorm.weight");
      has("model.norm.weight");
    }
    if (m.family == "llama" || m.family == "qwen2" || m.family == "qwen3") {
      has("model.layers.0.self_attn.k_proj.weight");
      has("model.layers.1.mlp.up_proj.weight");
    }
    if (m.family == "qwen2") has("model.layers.0.self_attn.v_proj.bias");
    if (m.family == "qwen3") has("model.layers.0.self_attn.q_norm.weight");
    if (m.family == "mixtral") {
      has("model.layers.1.block_sparse_moe.gate.weight");
      has("model.layers.1.block_sparse_moe.experts.3.w1.weight");
      has("model.layers.1.block_sparse_moe.experts.3.w2.weight");
      has("model.layers.1.block_sparse_moe.experts.3.w3.weight");
    }
    if (m.family == "qwen3_moe") {
      has("model.layers.0.mlp.gate_proj.weight");  // mlp_only_layers: [0]
      has("model.layers.1.mlp.experts.3.down_proj.weight");
      has("model.layers.1.mlp.gate.weight");
    }
    if (m.family == "qwen2_moe") {
      has("model.layers.0.mlp.shared_expert.up_proj.weight");
      has("model.layers.0.mlp.shared_expert_gate.weight");
    }
    if (m.family.starts_with("deepseek")) {
      has("model.layers.0.mlp.down_proj.weight");  // first_k_dense_replace: 1, or all dense
      has("model.layers.1.self_attn.kv_a_proj_with_mqa.weight");
      has("model.layers.1.self_attn.kv_a_layernorm.weight");
      has("model.layers.1.self_attn.kv_b_proj.weight");
    }
    if (m.family == "deepseek_v2" || m.family == "deepseek_v3") {
      has("model.layers.2.mlp.experts.7.gate_proj.weight");
      has("model.layers.2.mlp.shared_experts.down_proj.weight");
    }
    if (m.family.starts_with("deepseek_v2")) has("model.layers.1.self_attn.q_proj.weight");
    if (m.family.starts_with("deepseek_v3")) {
      has("model.layers.1.self_attn.q_a_proj.weight");
      has("model.layers.1.self_attn.q_a_layernorm.weight");
      has("model.layers.1.self_attn.q_b_proj.weight");
    }
    if (m.family == "deepseek_v3") has("model.layers.2.mlp.gate.e_score_correction_bias");
    if (m.family == "deepseek_v2_dense_yarn") {
      has("model.layers.1.self_attn.kv_a_proj_with_mqa.bias");
      has("model.layers.1.self_attn.o_proj.bias");
    }
  }
}

TEST(HfNames, SplitsFusedTensorsAndTransposesConv1d) {
  const auto& models = test::hf_test_models();
  // Llama: k_proj is rows [Q, Q+KV) of qkv.w; up_proj rows [F, 2F) of fc.w.
  const model::ModelSpec llama = test::hf_test_spec(models[1]);
  auto hf = model::hf_tensors(llama);
  ASSERT_TRUE(hf.ok());
  for (const model::HfTensor& h : *hf) {
    if (h.name == "model.layers.1.self_attn.k_proj.weight") {
      EXPECT_EQ(h.param, "h.1.attn.qkv.w");
      EXPECT_EQ(h.offset, 32u * 32u);  // 4 q heads of 8 rows, 32 columns
      EXPECT_EQ(h.shape, (std::vector<int64_t>{16, 32}));
    }
    if (h.name == "model.layers.0.mlp.up_proj.weight") {
      EXPECT_EQ(h.param, "h.0.mlp.fc.w");
      EXPECT_EQ(h.offset, 48u * 32u);
    }
  }
  // GPT-2: c_attn.weight (C, 3C) is qkv.w (3C, C) transposed.
  const model::ModelSpec gpt2 = test::hf_test_spec(models[0]);
  const std::vector<float> p = test::random_params(gpt2, 3);
  const model::ParamTable table = model::build_param_table(gpt2);
  auto g = model::hf_tensors(gpt2);
  ASSERT_TRUE(g.ok());
  for (const model::HfTensor& h : *g) {
    if (h.name != "transformer.h.0.attn.c_attn.weight") continue;
    ASSERT_TRUE(h.transposed);
    const float* qkv = p.data() + table.at(*table.find("h.0.attn.qkv.w")).offset;
    std::vector<float> block(h.numel()), back(h.numel());
    model::hf_block_from_param(h, qkv, block.data());
    for (int i = 0; i < 32; ++i)
      for (int j = 0; j < 96; ++j) ASSERT_EQ(block[i * 96 + j], qkv[j * 32 + i]);
    model::hf_block_to_param(h, block.data(), back.data());
    EXPECT_EQ(0, std::memcmp(back.data(), qkv, back.size() * 4));
  }
}

std::vector<std::string> files_in(const std::string& dir) {
  auto names = list_dir(dir);
  return names.ok() ? *names : std::vector<std::string>{};
}

void expect_same_bits(const model::ParamTable& table, const std::vector<float>& a,
                      const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const model::TensorInfo& t : table.tensors())
    EXPECT_EQ(0, std::memcmp(a.data() + t.offset, b.data() + t.offset, t.numel * 4)) << t.name;
}

TEST(HfWeights, ExportLoadExportIsBitIdentical) {
  for (const test::HfTestModel& m : test::hf_test_models()) {
    SCOPED_TRACE(m.family);
    const model::ModelSpec spec = test::hf_test_spec(m);
    const model::ParamTable table = model::build_param_table(spec);
    const std::vector<float> params = test::random_params(spec, 7);
    for (const uint64_t shard : {train::kHfShardBytes, uint64_t{20000}}) {
      TempDir a, b;
      ASSERT_TRUE(train::export_hf(spec, params.data(), a.path(), shard).ok());
      std::vector<float> loaded;
      Status s = train::load_hf_weights(spec, a.path(), &loaded);
      ASSERT_TRUE(s.ok()) << s.message();
      expect_same_bits(table, params, loaded);
      // b first holds the other kind of export: its files must not survive this one.
      const uint64_t other = shard == train::kHfShardBytes ? 20000 : train::kHfShardBytes;
      ASSERT_TRUE(train::export_hf(spec, loaded.data(), b.path(), other).ok());
      ASSERT_TRUE(train::export_hf(spec, loaded.data(), b.path(), shard).ok());
      const std::vector<std::string> names = files_in(a.path());
      EXPECT_EQ(names, files_in(b.path()));
      const bool sharded = shard < train::kHfShardBytes;
      EXPECT_EQ(path_exists(a.file("model.safetensors.index.json")), sharded);
      EXPECT_EQ(names.size() > 3, sharded) << names.size() << " files";
      for (const std::string& n : names)
        EXPECT_EQ(test::read_text(a.file(n)), test::read_text(b.file(n))) << n;
      // config.json is the spec back.
      auto again = train::hf_dir_spec(a.path());
      ASSERT_TRUE(again.ok()) << again.status().message();
      EXPECT_TRUE(train::check_same_model(spec, *again, a.path()).ok());
    }
  }
}

// A BF16 checkpoint loads as its values widened to float (exactly).
// A key only the directory's config has is named too (not a key both agree on).
TEST(HfWeights, DifferentModelsNameTheKeyEitherSideLacks) {
  auto given = model::load_model_spec("deepseek_tiny");
  ASSERT_TRUE(given.ok()) << given.status().message();
  model::ModelSpec in_dir = *given;
  in_dir.expert_bias_update_speed = 0;  // written by an export of a run that froze the bias
  const Status s = train::check_same_model(*given, in_dir, "dir");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("(expert_bias_update_speed: (absent) against 0)"), std::string::npos)
      << s.message();
  const Status back = train::check_same_model(in_dir, *given, "dir");
  EXPECT_NE(back.message().find("(expert_bias_update_speed: 0 against (absent))"),
            std::string::npos)
      << back.message();
}

TEST(HfWeights, LoadsBf16Checkpoints) {
  const model::ModelSpec spec = test::hf_test_spec(test::hf_test_models()[1]);
  const std::vector<float> params = test::random_params(spec, 9);
  TempDir a, b;
  ASSERT_TRUE(train::export_hf(spec, params.data(), a.path()).ok());
  auto st = ckpt::read_safetensors(a.file("model.safetensors"));
  ASSERT_TRUE(st.ok());
  std::vector<test::RawTensor> raw;
  std::vector<std::vector<float>> want;
  for (const ckpt::SafeTensor& t : st->tensors) {
    std::vector<uint16_t> h(t.data.size());
    std::vector<float> w(t.data.size());
    for (size_t i = 0; i < h.size(); ++i) {
      uint32_t bits;
      std::memcpy(&bits, &t.data[i], 4);
      h[i] = static_cast<uint16_t>(bits >> 16);  // truncation: exact in bf16
      bits = static_cast<uint32_t>(h[i]) << 16;
      std::memcpy(&w[i], &bits, 4);
    }
    raw.push_back({t.name, "BF16", t.shape, u16_bytes(h)});
    want.push_back(w);
  }
  test::write_raw_safetensors(b.file("model.safetensors"), raw);
  test::write_text(b.file("config.json"), test::read_text(a.file("config.json")));
  std::vector<float> loaded;
  Status s = train::load_hf_weights(spec, b.path(), &loaded);
  ASSERT_TRUE(s.ok()) << s.message();
  // Export the loaded model: every tensor equals the bf16 values.
  TempDir c;
  ASSERT_TRUE(train::export_hf(spec, loaded.data(), c.path()).ok());
  auto back = ckpt::read_safetensors(c.file("model.safetensors"));
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->tensors.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(back->tensors[i].data, want[i]) << back->tensors[i].name;
}

// GPT-2 checkpoints as published name their tensors without GPT2LMHeadModel's "transformer."
// and carry each layer's causal-mask buffers (attn.bias, attn.masked_bias), which are not
// parameters: both load.
TEST(HfWeights, LoadsGpt2NamesWithoutPrefixAndSkipsMaskBuffers) {
  const model::ModelSpec spec = test::hf_test_spec(test::hf_test_models()[0]);
  const std::vector<float> params = test::random_params(spec, 13);
  TempDir a;
  ASSERT_TRUE(train::export_hf(spec, params.data(), a.path()).ok());
  auto st = ckpt::read_safetensors(a.file("model.safetensors"));
  ASSERT_TRUE(st.ok());
  for (ckpt::SafeTensor& t : st->tensors)
    t.name = t.name.substr(std::string("transformer.").size());
  st->tensors.push_back({"h.0.attn.bias", {1, 1, 16, 16}, std::vector<float>(256, 1.0f)});
  st->tensors.push_back({"h.1.attn.masked_bias", {}, {-1e4f}});
  ASSERT_TRUE(ckpt::write_safetensors(a.file("model.safetensors"), *st).ok());
  std::vector<float> loaded;
  Status s = train::load_hf_weights(spec, a.path(), &loaded);
  ASSERT_TRUE(s.ok()) << s.message();
  expect_same_bits(model::build_param_table(spec), params, loaded);
}

// `run --init-from` loads each rank's part under every layout (resharding on load) and
// `--export-hf` gathers it back: with a learning rate too small to move any float (1e-30
// against weights near 0.1 whose ulp is about 1e-8), the exported bytes are the loaded ones.
TEST(MultiProcHfCli, EveryLayoutLoadsAndExportsTheSameBytes) {
  const test::HfTestModel& m = test::hf_test_models()[0];  // gpt2: what the engine trains today
  const model::ModelSpec spec = test::hf_test_spec(m);
  const std::vector<float> params = test::random_params(spec, 11);
  TempDir src, data;
  ASSERT_TRUE(train::export_hf(spec, params.data(), src.path()).ok());
  test::write_token_data(data.path(), 5, 8, 16);
  // A Llama too: its fused q/k/v and gate/up tensors are cut per part over tp.
  TempDir llama_src;
  const model::ModelSpec llama = test::hf_test_spec(test::hf_test_models()[1]);
  ASSERT_TRUE(
      train::export_hf(llama, test::random_params(llama, 12).data(), llama_src.path()).ok());
  // And a dense DeepSeek-V3: latent attention's up projections are cut by heads, its down
  // projections and latent norms replicated.
  TempDir mla_src;
  const model::ModelSpec mla = test::hf_test_spec(test::hf_test_models()[9]);
  ASSERT_EQ(test::hf_test_models()[9].family, "deepseek_v3_dense");
  ASSERT_TRUE(train::export_hf(mla, test::random_params(mla, 14).data(), mla_src.path()).ok());
  for (const std::string& dir : {src.path(), llama_src.path(), mla_src.path()})
    for (const std::string strategy : {"", "tp=2", "pp=2", "dp=2", "dp=2,zero=3"}) {
      SCOPED_TRACE(dir + " " + strategy);
      TempDir out;
      test::RunArgs args;
      args.flag("--init-from", dir).data(data.path()).steps(1).batch_size(8).seq_len(16);
      args.flag("--lr", "1e-30").eval_every(0).sample_tokens(0).quiet().threads(1);
      args.flag("--export-hf", out.path());
      if (!strategy.empty()) args.nproc(2).strategy(strategy);
      const test::CommandResult r = test::run_cann(args, 240);
      ASSERT_EQ(r.exit_code, 0) << r.output;
      EXPECT_EQ(test::read_text(out.file("model.safetensors")),
                test::read_text(dir + "/model.safetensors"));
      EXPECT_EQ(test::read_text(out.file("config.json")), test::read_text(dir + "/config.json"));
    }
  // A checkpoint converts without training: --resume with --steps at its step.
  TempDir ck, converted;
  test::RunArgs first;
  first.flag("--init-from", src.path()).data(data.path()).steps(1).batch_size(8).seq_len(16);
  first.flag("--lr", "1e-30").eval_every(0).sample_tokens(0).quiet().threads(1);
  const test::CommandResult trained = test::run_cann(first.flag("--checkpoint-dir", ck.path()));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  test::RunArgs convert;
  convert.model(src.file("config.json")).data(data.path()).steps(1).batch_size(8).seq_len(16);
  convert.flag("--checkpoint-dir", ck.path())
      .flag("--resume")
      .flag("--export-hf", converted.path());
  const test::CommandResult c = test::run_cann(convert.eval_every(0).sample_tokens(0).quiet());
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_EQ(test::read_text(converted.file("model.safetensors")),
            test::read_text(src.file("model.safetensors")));
  // --model naming the same model is accepted; another model is refused in one line.
  TempDir other;
  test::write_text(other.file("same.json"), m.config);
  std::string wider = m.config;
  wider.replace(wider.find("\"hidden_size\": 32"), 17, "\"hidden_size\": 48");
  test::write_text(other.file("wider.json"), wider);
  test::RunArgs same;
  same.model(other.file("same.json")).flag("--init-from", src.path()).data(data.path());
  same.steps(1).batch_size(8).seq_len(16).eval_every(0).sample_tokens(0).quiet().threads(1);
  const test::CommandResult ok = test::run_cann(same, 120);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  test::RunArgs differ;
  differ.model(other.file("wider.json")).flag("--init-from", src.path()).steps(1).quiet();
  const test::CommandResult bad = test::run_cann(differ, 60);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_EQ(std::count(bad.output.begin(), bad.output.end(), '\n'), 1) << bad.output;
  EXPECT_NE(bad.output.find("describe different models (hidden_size: 48 against 32)"),
            std::string::npos)
      << bad.output;
}

}  // namespace
}  // namespace cann
