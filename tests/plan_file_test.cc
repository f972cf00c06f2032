// Plan files: `search --out` / `simulate --out` write them, `run --plan` trains them and writes
// the measured figures back, `plan diff` compares two; a plan from another model or world is
// refused in one line, or re-planned with --replan; malformed files name the key.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "model/spec.h"
#include "plan/plan_file.h"
#include "run_args.h"
#include "test_util.h"

namespace cann {
namespace {

using test::TempDir;

// A CPU-like fp32 cluster of `devices` single-threaded processes on one node, as the engine
// trains: plans on it pass the engine's own rules.
std::string cpu_cluster(int devices) {
  return "name: cpu\nnodes: 1\ndevices_per_node: " + std::to_string(devices) +
         "\ndevice: {name: cpu-core, peak_tflops: 0.05, memory_gb: 4, "
         "memory_bandwidth_GBps: 10, precision: fp32}\n"
         "intra_node: {bandwidth_GBps: 5, latency_us: 5}\ninter_node: {bandwidth_GBps: 1}\n";
}

plan::PlanFile sample_plan() {
  plan::PlanFile f;
  f.model = "gpt_tiny";
  f.model_name = "gpt_tiny";
  f.model_fingerprint = "0123456789abcdef";
  f.model_params = 1.5e6;
  f.cluster = "cpu.yaml";
  f.nodes = 1;
  f.devices_per_node = 2;
  f.global_batch = 8;
  f.seq_len = 64;
  f.strategy = *plan::parse_strategy("dp=2,mbs=4,gbs=8");
  f.predicted = {{"step_time_s", 0.25},   {"step_time_s_low", 0.2}, {"step_time_s_high", 0.3},
                 {"tokens_per_s", 2048},  {"mfu", 0.41},            {"memory_peak_gb", 0.12},
                 {"comm_ratio", 0.05}};
  f.launch = "cann-train run --plan p.yaml";
  return f;
}

TEST(PlanFileTest, RoundTripsWithAndWithoutMeasuredFigures) {
  TempDir dir;
  plan::PlanFile f = sample_plan();
  ASSERT_TRUE(plan::write_plan_file(dir.file("p.yaml"), f).ok());
  auto back = plan::read_plan_file(dir.file("p.yaml"));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(plan::plan_file_text(*back), plan::plan_file_text(f));
  EXPECT_FALSE(back->measured.has_value());
  f.measured = plan::PlanMeasured{
      2, 10, 0.31, 1651.6, 0.2, 5.6, 4.1, 4.3, "2026-01-01T00:00:00Z", {{"tei", 0.5}, {"mfu", 0.3}}};
  ASSERT_TRUE(plan::write_plan_file(dir.file("p.yaml"), f).ok());
  back = plan::read_plan_file(dir.file("p.yaml"));
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_TRUE(back->measured.has_value());
  EXPECT_EQ(back->measured->steps, 10);
  EXPECT_DOUBLE_EQ(back->measured->step_time_s, 0.31);
  EXPECT_EQ(plan::plan_file_text(*back), plan::plan_file_text(f));
}

TEST(PlanFileTest, MalformedFilesNameTheKey) {
  TempDir dir;
  const std::string good = plan::plan_file_text(sample_plan());
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    const size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return at == std::string::npos ? t : t.replace(at, from.size(), to);
  };
  const struct {
    std::string text, fragment;
  } cases[] = {
      {"", "expected a map"},
      {"format: [1\n", "not YAML"},
      {replace("format: 1", "format: 9"), "format 9"},
      {replace("seq_len: 64\n", ""), "'seq_len'"},
      {replace("nodes: 1", "nodes: many"), "'nodes'"},
      {replace("strategy: ", "strategy: tp=0,"), "strategy"},
      {replace("  mfu: 0.41\n", ""), "'predicted.mfu'"},
      {replace("global_batch: 8", "global_batch: 0"), "positive"},
  };
  for (const auto& c : cases) {
    test::write_text(dir.file("bad.yaml"), c.text);
    auto r = plan::read_plan_file(dir.file("bad.yaml"));
    ASSERT_FALSE(r.ok()) << c.fragment;
    EXPECT_NE(r.status().message().find(c.fragment), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("bad.yaml"), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
  }
  EXPECT_FALSE(plan::read_plan_file(dir.file("none.yaml")).ok());
}

TEST(PlanFileTest, FingerprintFollowsTheShapeNotTheName) {
  auto a = model::load_model_spec("gpt_tiny");
  ASSERT_TRUE(a.ok());
  model::ModelSpec b = *a;
  b.name = "renamed";
  b.source = "elsewhere.yaml";
  EXPECT_EQ(plan::model_fingerprint(*a), plan::model_fingerprint(b));
  b.num_hidden_layers += 1;
  EXPECT_NE(plan::model_fingerprint(*a), plan::model_fingerprint(b));
}

TEST(PlanFileTest, DiffShowsWhatDiffersWithRatios) {
  plan::PlanFile a = sample_plan(), b = sample_plan();
  EXPECT_EQ(plan::plan_diff(a, b, "a", "b"), "the plans are the same\n");
  b.strategy = *plan::parse_strategy("dp=1,tp=2,mbs=8,gbs=8");
  b.predicted["step_time_s"] = 0.5;
  const std::string d = plan::plan_diff(a, b, "a.yaml", "b.yaml");
  EXPECT_NE(d.find("strategy"), std::string::npos) << d;
  EXPECT_NE(d.find("predicted.step_time_s"), std::string::npos) << d;
  EXPECT_NE(d.find("2.000x"), std::string::npos) << d;
  EXPECT_EQ(d.find("predicted.mfu"), std::string::npos) << d;  // equal: not listed
}

// search --out, run --plan, the measured figures written back, plan diff; the refusals.
TEST(MultiProcPlanFileTest, SearchOutRunPlanRoundTrip) {
  TempDir dir;
  test::write_text(dir.file("cpu.yaml"), cpu_cluster(2));
  auto searched = test::run_cann({"search", "--model", "gpt_tiny", "--cluster", dir.file("cpu.yaml"),
                                  "--global-batch", "8", "--seq-len", "64", "--engine-only",
                                  "--out", dir.file("plan.yaml")});
  ASSERT_EQ(searched.exit_code, 0) << searched.output;
  EXPECT_NE(searched.output.find("run --plan " + dir.file("plan.yaml")), std::string::npos);
  auto planned = plan::read_plan_file(dir.file("plan.yaml"));
  ASSERT_TRUE(planned.ok()) << planned.status().message();
  EXPECT_EQ(planned->devices(), 2);
  EXPECT_GT(planned->predicted["step_time_s"], 0);
  std::filesystem::copy_file(dir.file("plan.yaml"), dir.file("before.yaml"));

  const auto trained = test::run_cann(test::RunArgs()
                                          .flag("--plan", dir.file("plan.yaml"))
                                          .steps(6)
                                          .eval_every(0)
                                          .sample_tokens(0)
                                          .threads(1),
                                      240);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_NE(trained.output.find("done: steps 1..6"), std::string::npos) << trained.output;
  EXPECT_NE(trained.output.find("measured figures written"), std::string::npos) << trained.output;
  auto after = plan::read_plan_file(dir.file("plan.yaml"));
  ASSERT_TRUE(after.ok()) << after.status().message();
  ASSERT_TRUE(after->measured.has_value());
  EXPECT_EQ(after->measured->world, 2);
  EXPECT_EQ(after->measured->steps, 6);
  EXPECT_GT(after->measured->step_time_s, 0);
  EXPECT_GT(after->measured->memory_peak_gb, 0);
  EXPECT_EQ(plan::strategy_string(after->strategy), plan::strategy_string(planned->strategy));

  const auto diff =
      test::run_cann({"plan", "diff", dir.file("before.yaml"), dir.file("plan.yaml")});
  ASSERT_EQ(diff.exit_code, 0) << diff.output;
  EXPECT_NE(diff.output.find("measured.step_time_s"), std::string::npos) << diff.output;

  // Another world: refused in one line, or planned again with --replan.
  const auto other = test::run_cann(
      test::RunArgs().flag("--plan", dir.file("plan.yaml")).nproc(1).steps(2), 120);
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_NE(other.output.find("made for 2 devices"), std::string::npos) << other.output;
  EXPECT_NE(other.output.find("--replan"), std::string::npos) << other.output;
  const auto replanned = test::run_cann(test::RunArgs()
                                            .flag("--plan", dir.file("plan.yaml"))
                                            .flag("--replan")
                                            .nproc(1)
                                            .steps(2)
                                            .eval_every(0)
                                            .sample_tokens(0),
                                        120);
  ASSERT_EQ(replanned.exit_code, 0) << replanned.output;
  EXPECT_NE(replanned.output.find("re-planned"), std::string::npos) << replanned.output;
  auto one = plan::read_plan_file(dir.file("plan-1dev.yaml"));
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ(one->devices(), 1);
  ASSERT_TRUE(one->measured.has_value());
  EXPECT_EQ(one->measured->world, 1);

  // Another model, or a flag the plan sets: refused.
  const auto model = test::run_cann(
      test::RunArgs().flag("--plan", dir.file("plan.yaml")).model("llama_tiny").steps(1), 60);
  EXPECT_EQ(model.exit_code, 2) << model.output;
  EXPECT_NE(model.output.find("was made for model 'gpt_tiny'"), std::string::npos)
      << model.output;
  const auto batch = test::run_cann(
      test::RunArgs().flag("--plan", dir.file("plan.yaml")).batch_size(16).steps(1), 60);
  EXPECT_EQ(batch.exit_code, 2) << batch.output;
  EXPECT_NE(batch.output.find("--batch-size 16 disagrees"), std::string::npos) << batch.output;
  const auto lone = test::run_cann(test::RunArgs().flag("--replan").steps(1), 60);
  EXPECT_EQ(lone.exit_code, 2) << lone.output;
  EXPECT_NE(lone.output.find("--replan needs --plan"), std::string::npos) << lone.output;
}

}  // namespace
}  // namespace cann
