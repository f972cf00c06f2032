// The gradient inspector: per-layer norms against direct sums over the model's gradient
// buffer and against the optimizer's global norm; the first non-finite layer in backward order
// and its step, with a NaN injected at a known step and tensor (CANN_TRAIN_FAULT_GRAD) in a
// real 2-rank run; --halt-on-nan's line, exit status and dump; `debug grads` on logs.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "debug/grad_inspector.h"
#include "debug/grad_summary.h"
#include "model/model.h"
#include "model/spec.h"
#include "test_util.h"
#include "train/grad_watch.h"
#include "train/trainer.h"

namespace cann {
namespace {

const char kTinyGpt[] =
    "architecture: gpt\nhidden_size: 32\nnum_hidden_layers: 2\nnum_attention_heads: 2\n"
    "vocab_size: 256\nseq_length: 32\n";

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(GradInspectorTest, NormsAndFirstNonFiniteInBackwardOrder) {
  // Layers in backward order: "top" (offsets 4..5), "bottom" (0..3).
  debug::GradInspector insp({{"top", {{"top.w", 4, 2}}}, {"bottom", {{"bottom.w", 0, 4}}}});
  std::vector<float> g = {3, 4, 0, 0, 5, 12};
  EXPECT_EQ(insp.inspect(g.data()), -1);
  EXPECT_DOUBLE_EQ(insp.norms()[0], 13.0);
  EXPECT_DOUBLE_EQ(insp.norms()[1], 5.0);
  EXPECT_EQ(insp.norms_json(), "{\"bottom\":5,\"top\":13}");  // forward order
  g[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(insp.inspect(g.data()), 1);
  g[5] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(insp.inspect(g.data()), 0);  // both bad: the one backward reaches first
  const auto s = debug::tensor_grad_stats({"bottom.w", 0, 4}, g.data());
  EXPECT_EQ(s.nan, 1u);
  EXPECT_EQ(s.inf, 0u);
  EXPECT_DOUBLE_EQ(s.finite_norm, 3.0);
  const auto dump = nlohmann::json::parse(insp.dump_json(0, g.data(), 7, 1));
  EXPECT_EQ(dump["layer"], "top");
  EXPECT_EQ(dump["step"], 7);
  EXPECT_EQ(dump["tensors"][0]["inf"], 1);
}

// The trainer's per-layer norms against sums written out over the ParamTable, after a real
// forward and backward.
TEST(GradInspectorTest, LayerNormsMatchTheGradientBuffer) {
  test::TempDir dir;
  test::write_text(dir.file("m.yaml"), kTinyGpt);
  auto spec = model::load_model_spec(dir.file("m.yaml"));
  ASSERT_TRUE(spec.ok());
  auto m = model::Model::create(*spec, 2, 16);
  ASSERT_TRUE(m.ok());
  (*m)->init_params(7);
  std::vector<int> in(32), tg(32);
  for (int i = 0; i < 32; ++i) {
    in[i] = (i * 37) % 256;
    tg[i] = (i * 11 + 3) % 256;
  }
  (*m)->zero_grads();
  (*m)->forward(in.data(), tg.data(), 2, 16);
  (*m)->backward();
  std::map<std::string, double> direct;
  for (const auto& t : (*m)->table().tensors()) {
    const std::string layer = t.layer < 0                          ? "embed"
                              : t.layer == spec->num_hidden_layers ? "ln_f"
                                                                   : "h." + std::to_string(t.layer);
    for (size_t i = 0; i < t.numel; ++i) {
      const double g = (*m)->grads()[t.offset + i];
      direct[layer] += g * g;
    }
  }
  train::GradWatch watch((*m)->table(), false, dir.path(), 0);
  ASSERT_FALSE(watch.inspect((*m)->grads(), 1));
  const auto norms = nlohmann::json::parse(watch.norms_json());
  ASSERT_EQ(norms.size(), direct.size());
  for (const auto& [layer, sq] : direct) {
    ASSERT_TRUE(norms.contains(layer)) << layer;
    EXPECT_NEAR(norms[layer].get<double>(), std::sqrt(sq), 1e-9 * std::sqrt(sq) + 1e-12) << layer;
    EXPECT_GT(sq, 0.0) << layer;
  }
}

// Over a run, the per-layer norms combine to the global norm AdamW computed (before clipping).
TEST(GradInspectorTest, LoggedLayerNormsCombineToTheGlobalNorm) {
  test::TempDir dir;
  test::write_text(dir.file("m.yaml"), kTinyGpt);
  train::TrainConfig c;
  c.model = dir.file("m.yaml");
  c.steps = 5;
  c.batch_size = 4;
  c.seq_len = 16;
  c.threads = 2;
  c.quiet = true;
  c.eval_every = 0;
  c.sample_tokens = 0;
  c.monitor = false;
  c.grad_norms = true;
  c.log_json = dir.file("log.jsonl");
  auto t = train::Trainer::create(c);
  ASSERT_TRUE(t.ok()) << t.status().message();
  train::RunSummary s;
  ASSERT_TRUE((*t)->run(&s).ok());
  const auto lines = read_jsonl(c.log_json);
  ASSERT_EQ(lines.size(), 5u);
  for (const auto& l : lines) {
    ASSERT_TRUE(l.contains("grad_norms")) << l.dump();
    double sq = 0.0;
    std::vector<std::string> names;
    for (const auto& [layer, v] : l["grad_norms"].items()) {
      sq += v.get<double>() * v.get<double>();
      names.push_back(layer);
    }
    EXPECT_EQ(names, (std::vector<std::string>{"embed", "h.0", "h.1", "ln_f"}));
    // AdamW sums in float over the buffer: agree to float precision.
    EXPECT_NEAR(std::sqrt(sq), l["grad_norm"].get<double>(), 1e-5 * l["grad_norm"].get<double>());
  }
}

// NaNs injected at step 3 into h.0 and h.1 (and at step 5 into embed): the report names step 3
// and h.1, the layer backward reaches first; with --halt-on-nan both ranks stop there.
TEST(MultiProcGradInspectorTest, HaltNamesFirstLayerAndStepAndDumps) {
  test::TempDir dir;
  test::write_text(dir.file("m.yaml"), kTinyGpt);
  const auto r =
      test::run_command({CANN_TRAIN_BINARY,  "run",
                         "--model",          dir.file("m.yaml"),
                         "--steps",          "10",
                         "--batch-size",     "8",
                         "--seq-len",        "16",
                         "--sample-tokens",  "0",
                         "--eval-every",     "0",
                         "--monitor",        "off",
                         "--nproc-per-node", "2",
                         "--grad-norms",     "--halt-on-nan",
                         "--log-json",       dir.file("log.jsonl")},
                        120, {"CANN_TRAIN_FAULT_GRAD=3:h.0.mlp.fc.w,3:h.1.attn.qkv.w,5:wte"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("non-finite gradient at step 3, first in layer h.1 (backward order)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("h.1.attn.qkv.w (1 NaN, 0 Inf)"), std::string::npos) << r.output;
  const auto lines = read_jsonl(dir.file("log.jsonl"));
  ASSERT_EQ(lines.size(), 4u);  // steps 1-3 and the event
  EXPECT_TRUE(lines[1]["grad_norms"]["h.1"].is_number());
  EXPECT_TRUE(lines[2]["grad_norms"]["h.1"].is_null());
  EXPECT_TRUE(lines[2]["grad_norms"]["h.0"].is_null());
  EXPECT_TRUE(lines[2]["grad_norms"]["ln_f"].is_number());
  EXPECT_EQ(lines[3]["event"], "nonfinite_grad");
  EXPECT_EQ(lines[3]["layer"], "h.1");
  EXPECT_EQ(lines[3]["step"], 3);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string dump = dir.file("nonfinite-step3-rank" + std::to_string(rank) + ".json");
    const auto d = nlohmann::json::parse(test::read_text(dump));
    EXPECT_EQ(d["layer"], "h.1");
    int nan = 0;
    for (const auto& t : d["tensors"]) {
      nan += t["nan"].get<int>();
      if (t["name"] == "h.1.attn.qkv.w") {
        EXPECT_EQ(t["nan"], 1);
      }
    }
    EXPECT_EQ(nan, 1);
  }
  // `debug grads` reads the same story back from the log.
  const auto g = test::run_cann({"debug", "grads", dir.file("log.jsonl")}, 30);
  EXPECT_EQ(g.exit_code, 0) << g.output;
  EXPECT_NE(g.output.find("first non-finite gradient: step 3, layer h.1"), std::string::npos)
      << g.output;
}

// Without --halt-on-nan the detection is a warning and a log event; the run goes on (and then
// fails on the non-finite loss the optimizer's NaN update causes).
TEST(GradInspectorTest, WithoutHaltTheDetectionIsAnEvent) {
  test::TempDir dir;
  test::write_text(dir.file("m.yaml"), kTinyGpt);
  const auto r = test::run_command({CANN_TRAIN_BINARY,
                                    "run",
                                    "--model",
                                    dir.file("m.yaml"),
                                    "--steps",
                                    "6",
                                    "--batch-size",
                                    "4",
                                    "--seq-len",
                                    "16",
                                    "--sample-tokens",
                                    "0",
                                    "--eval-every",
                                    "0",
                                    "--monitor",
                                    "off",
                                    "--threads",
                                    "1",
                                    "--grad-norms",
                                    "--log-json",
                                    dir.file("log.jsonl")},
                                   60, {"CANN_TRAIN_FAULT_GRAD=2:h.0.attn.proj.w"});
  EXPECT_NE(r.output.find("warning: rank 0: non-finite gradient at step 2, first in layer h.0"),
            std::string::npos)
      << r.output;
  bool event = false;
  for (const auto& l : read_jsonl(dir.file("log.jsonl"))) {
    if (l.contains("event")) event = l["step"] == 2 && l["layer"] == "h.0";
  }
  EXPECT_TRUE(event);
}

TEST(GradSummaryTest, StatisticsSpikesAndFirstNonFinite) {
  std::string log;
  for (int step = 1; step <= 40; ++step) {
    const double a = step == 30 ? 50.0 : 1.0 + 0.01 * step;  // a spike at 30
    const std::string b = step >= 35 ? "null" : "0.5";       // non-finite from 35
    const std::string c = step >= 36 ? "null" : "2";
    log += "{\"step\":" + std::to_string(step) +
           ",\"loss\":1,\"grad_norms\":{\"embed\":" + std::to_string(a) + ",\"h.0\":" + c +
           ",\"h.1\":" + b + "}}\n";
  }
  auto s = debug::summarize_grad_log(log, "log");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->lines, 40);
  ASSERT_EQ(s->layers.size(), 3u);
  EXPECT_EQ(s->layers[0].name, "embed");
  EXPECT_EQ(s->layers[0].spike_steps, std::vector<int>{30});
  EXPECT_DOUBLE_EQ(s->layers[0].max, 50.0);
  EXPECT_NEAR(s->layers[0].min, 1.01, 1e-9);
  EXPECT_GT(s->layers[0].trend, 1.0);
  EXPECT_EQ(s->layers[2].steps, 34);
  EXPECT_EQ(s->first_nonfinite_step, 35);
  EXPECT_EQ(s->first_nonfinite_layer, "h.1");
  const std::string text = debug::format_grad_summary(*s, "log");
  EXPECT_NE(text.find("first non-finite gradient: step 35, layer h.1"), std::string::npos) << text;
}

TEST(GradSummaryTest, MalformedLogsAreErrorsNamingTheLine) {
  auto bad = debug::summarize_grad_log("{\"step\":1,\"grad_norms\":{}}\n{oops\n", "x.jsonl");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("x.jsonl:2:"), std::string::npos);
  auto none = debug::summarize_grad_log("{\"step\":1,\"loss\":2}\n", "y.jsonl");
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("--grad-norms"), std::string::npos);
  auto nostep = debug::summarize_grad_log("{\"grad_norms\":{\"a\":1}}\n", "z.jsonl");
  EXPECT_EQ(nostep.status().code(), StatusCode::kInvalidArgument);
  test::TempDir dir;
  test::write_text(dir.file("bad.jsonl"), "\x01\x02 not json\n");
  const auto r = test::run_cann({"debug", "grads", dir.file("bad.jsonl")}, 30);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("bad.jsonl:1: not a JSON object"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace cann
