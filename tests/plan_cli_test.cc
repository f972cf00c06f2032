// `cann-train search` and `cann-train simulate` through the real binary: bad input gets one
// line saying what is wrong and what to do (exit 2), and the machine-readable outputs (--json,
// --trace, --report) carry the documented fields.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "test_util.h"

namespace cann {
namespace {

using test::run_cann;

void expect_failure(const std::vector<std::string>& args, const std::vector<std::string>& parts) {
  test::expect_one_line_error(run_cann(args, 120), 2, parts);
}

TEST(PlanCliTest, UnknownNamesListTheAvailableOnes) {
  expect_failure({"search", "--model", "gpt_9t", "--cluster", "1024_ascend910b"},
                 {"unknown model 'gpt_9t'", "moe_bert", "gpt_175b", "llama3_405b", "hint:"});
  expect_failure(
      {"search", "--model", "moe_bert", "--cluster", "1024_tpu"},
      {"unknown cluster '1024_tpu'", "1024_ascend910b", "3072_a100", "16384_h100", "2048_h800"});
  expect_failure({"simulate", "--model", "moe_bert", "--cluster", "nope", "--strategy", "tp=8"},
                 {"unknown cluster 'nope'"});
}

TEST(PlanCliTest, MalformedOrInconsistentStrategies) {
  const std::vector<std::string> base = {"simulate",  "--model",   "gpt_175b",
                                         "--cluster", "3072_a100", "--strategy"};
  auto with = [&](const std::string& s) {
    std::vector<std::string> a = base;
    a.push_back(s);
    return a;
  };
  expect_failure(with("dp=8,tp=4,pp=2"),
                 {"dp*tp*pp*cp = 8*4*2*1 = 64, but cluster 3072_a100 has 3072 devices"});
  expect_failure(with("tp=5"), {"tp=5 does not divide num_attention_heads 96"});
  expect_failure(with("tp=8,pipeline=2"), {"unknown key 'pipeline'", "the keys are"});
  expect_failure(with("tp=8,pp=two"), {"key 'pp': expected a positive integer, got 'two'"});
  expect_failure(with("tp=8,ep=2"), {"ep=2 but model gpt_175b has no experts"});
  expect_failure(with("tp=8,pp=8,gbs=100"), {"gbs=100 is not a multiple of dp*mbs"});
  expect_failure(with("tp=16"), {"does not fit the 8-device nodes", "allow_cross_node_tp"});
  expect_failure({"simulate", "--model", "gpt_175b", "--cluster", "3072_a100"},
                 {"--strategy is required"});
}

// --attention names a fused kernel measured on the device: the model line says which, the
// slower kernel gives the slower step, and a kernel the device has no measurement of is one line.
TEST(PlanCliTest, AttentionKernelsMeasuredOnTheDevice) {
  auto step_of = [](const std::string& attention) {
    auto r = run_cann({"simulate", "--model", "llama3_8b", "--cluster", "16384_h100", "--nodes",
                       "1", "--strategy", "cp=2,dp=4,gbs=128", "--attention", attention, "--json"},
                      120);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')), nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.output;
    if (j.is_discarded()) return std::pair(std::string(), 0.0);
    return std::pair(j.value("attention_kernel", std::string()), j.value("step_time_s", 0.0));
  };
  const auto [cudnn_name, cudnn_s] = step_of("fused");
  const auto [flash2_name, flash2_s] = step_of("flash2");
  EXPECT_EQ(cudnn_name, "cudnn");  // the device's default: what Transformer Engine runs there
  EXPECT_EQ(flash2_name, "flash2");
  EXPECT_GT(flash2_s, cudnn_s * 1.02);  // FlashAttention-2 reaches about 60% of cuDNN's speed
  auto text = run_cann({"simulate", "--model", "llama3_8b", "--cluster", "16384_h100", "--nodes",
                        "1", "--strategy", "cp=2,dp=4,gbs=128", "--attention", "flash2"},
                       120);
  EXPECT_NE(text.output.find("attention fused (flash2)"), std::string::npos) << text.output;
  expect_failure({"simulate", "--model", "llama3_8b", "--cluster", "16384_h100", "--nodes", "1",
                  "--strategy", "cp=2,dp=4,gbs=128", "--attention", "flash3"},
                 {"--attention: unknown attention kernel 'flash3' on device h100-sxm-80gb",
                  "(cudnn, flash2)"});
  expect_failure({"simulate", "--model", "gpt_175b", "--cluster", "1024_ascend910b", "--strategy",
                  "tp=8,pp=8,gbs=1024", "--attention", "cudnn"},
                 {"unknown attention kernel 'cudnn'", "fused (FlashAttention)"});
}

TEST(PlanCliTest, UnsatisfiableConstraintsExplainTheClosest) {
  expect_failure(
      {"search", "--model", "moe_bert", "--cluster", "1024_ascend910b", "--max-memory-per-device",
       "8GB"},
      {"no strategy fits in 8.0 GB per device", "the closest, dp=", "GB (", "over", "hint:"});
  expect_failure({"search", "--model", "mixtral_8x7b", "--cluster", "2048_h800", "--nodes", "4",
                  "--max-comm-overhead", "0.000001"},
                 {"keeps exposed communication under --max-comm-overhead", "the closest"});
  expect_failure({"search", "--model", "moe_bert", "--cluster", "1024_ascend910b",
                  "--max-memory-per-device", "lots"},
                 {"--max-memory-per-device", "expected a positive size like 32GB"});
}

TEST(PlanCliTest, SearchJsonHasTheDocumentedFields) {
  const test::CommandResult r =
      run_cann({"search", "--model", "moe_bert", "--cluster", "1024_ascend910b", "--json"}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_GT(j["candidates_evaluated"].get<long long>(), 0);
  EXPECT_GT(j["candidates_in_space"].get<long long>(), j["candidates_evaluated"].get<long long>());
  EXPECT_GT(j["search_time_s"].get<double>(), 0);
  ASSERT_GE(j["strategies"].size(), 2u);
  EXPECT_EQ(j["pareto_front"].size(), j["pareto"].get<size_t>());
  EXPECT_GT(j["pareto_front"].size(), 1u);
  double last = 1e30;
  for (const auto& s : j["strategies"]) {
    for (const char* key : {"strategy", "step_time_s", "tokens_per_s", "model_tflops_per_device",
                            "mfu", "memory_peak_bytes", "fits", "comm_ratio", "bubble_ratio",
                            "goodput", "tei", "energy_kwh_per_step", "cost_usd_per_day",
                            "step_time_s_low", "step_time_s_high", "within_band_of_best"})
      EXPECT_TRUE(s.contains(key)) << key;
    // The error band (docs/planner.md, "Error bands"): a non-empty interval near the step. It
    // need not contain the prediction: where the planner is too fast on every published run of
    // a kind, both ends lie above it.
    const double t = s["step_time_s"].get<double>();
    EXPECT_GT(s["step_time_s_low"].get<double>(), 0.5 * t);
    EXPECT_LT(s["step_time_s_low"].get<double>(), s["step_time_s_high"].get<double>());
    EXPECT_LT(s["step_time_s_high"].get<double>(), 3 * t);
    EXPECT_TRUE(s["fits"].get<bool>());
    EXPECT_LE(s["memory_peak_bytes"].get<double>(), 64.0 * 1073741824.0);
    EXPECT_LE(s["tokens_per_s"].get<double>(), last);  // best first
    last = s["tokens_per_s"].get<double>();
    const double tei = s["tei"].get<double>();
    EXPECT_GT(tei, 0);
    EXPECT_LE(tei, 1);
    EXPECT_GT(s["mfu"].get<double>(), 0.05);
    EXPECT_LT(s["mfu"].get<double>(), 0.9);
  }
}

TEST(PlanCliTest, SearchTextExplainsAndGivesLaunchArguments) {
  const test::CommandResult r = run_cann(
      {"search", "--model", "moe_bert", "--cluster", "1024_ascend910b", "--top", "3"}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* part : {"candidates/s",
                           "strategy",
                           "step s",
                           "tokens/s",
                           "MFU",
                           "mem peak",
                           "comm",
                           "bubble",
                           "goodput",
                           "TEI",
                           "$/Mtok",
                           "J/tok",
                           "likely s",
                           "Ranked by throughput: tokens/s, highest first",
                           "What limits it:",
                           "Runner-up",
                           "--strategy dp=",
                           "--tensor-model-parallel-size",
                           "--expert-model-parallel-size",
                           "\"zero_optimization\""})
    EXPECT_NE(r.output.find(part), std::string::npos) << part << "\n" << r.output;
}

TEST(PlanCliTest, SimulateJsonTraceAndReport) {
  test::TempDir dir;
  const std::string trace = dir.file("t.json"), report = dir.file("r.html");
  test::CommandResult r = run_cann(
      {"simulate", "--model", "gpt_175b", "--cluster", "3072_a100", "--nodes", "8", "--strategy",
       "tp=8,pp=8,mbs=1,gbs=64,sp=on,recompute=selective", "--json", "--trace", trace},
      120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["strategy"],
            "dp=1,tp=8,pp=8,ep=1,cp=1,sp=on,mbs=1,gbs=64,zero=0,"
            "recompute=selective,vpp=1");
  EXPECT_EQ(j["stages"].size(), 8u);
  const nlohmann::json t = nlohmann::json::parse(test::read_text(trace));
  EXPECT_GT(t["traceEvents"].size(), 8u * 64 * 2);

  r = run_cann({"search", "--model", "mixtral_8x7b", "--cluster", "2048_h800", "--nodes", "4",
                "--report", report},
               120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string html = test::read_text(report);
  EXPECT_NE(html.find("<!DOCTYPE html>"), std::string::npos);
  EXPECT_NE(html.find("id=\"data\""), std::string::npos);
  EXPECT_NE(html.find("Pareto front"), std::string::npos);
  EXPECT_NE(html.find("per-stage allocation"), std::string::npos);
  // Self-contained: nothing to fetch when viewed (the SVG namespace is a name, not a fetch).
  EXPECT_EQ(html.find("<script src"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  size_t pos = 0;
  while ((pos = html.find("http", pos)) != std::string::npos) {
    EXPECT_EQ(html.compare(pos, 26, "http://www.w3.org/2000/svg"), 0) << html.substr(pos, 60);
    ++pos;
  }
}

}  // namespace
}  // namespace cann
