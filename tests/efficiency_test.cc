// Efficiency measured live: the meter's figures by the planner's definitions, their way
// through the snapshot JSON and the Prometheus exposition beside the plan's predictions, and a
// `run --plan` whose step log carries them next to what the plan predicted.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/efficiency.h"
#include "monitor/hub.h"
#include "plan/plan_file.h"
#include "run_args.h"
#include "test_util.h"
#include "train/efficiency_meter.h"

namespace cann {
namespace {

TEST(EfficiencyTest, TheMeterFollowsTheDefinitions) {
  train::TrainConfig config;
  config.devices = {0.05, 200.0, 1.5, "test"};
  train::EfficiencyMeter meter(config, 4);
  // 0.5 s step, 0.1 s of it exposed communication, 0.3 s forward and backward.
  const auto e = meter.step(0.5, 0.3, 0.1, 0.02);
  EXPECT_DOUBLE_EQ(e.scaling_efficiency, 0.3 / 0.4);
  EXPECT_DOUBLE_EQ(e.comm_ratio, 0.2);
  EXPECT_GT(e.goodput, 0.0);
  EXPECT_LE(e.goodput, 1.0);
  EXPECT_DOUBLE_EQ(e.tei, training_efficiency_index(0.75, 0.2, e.goodput));
  EXPECT_DOUBLE_EQ(e.mfu, 0.02 / 0.05);  // no plan: achieved over the device peak
  EXPECT_DOUBLE_EQ(e.cost_usd_per_hour, 6.0);
  EXPECT_DOUBLE_EQ(e.energy_kwh_per_step, 4 * 200.0 * 0.5 / 3.6e6);
  // With a plan, MFU is the planned one scaled by planned over measured step time.
  config.predicted = {{"mfu", 0.4}, {"step_time_s", 0.25}};
  train::EfficiencyMeter planned(config, 4);
  EXPECT_DOUBLE_EQ(planned.step(0.5, 0.3, 0.1, 0.02).mfu, 0.2);
  // Without device figures, the hardware-dependent three are unknown.
  train::EfficiencyMeter bare(train::TrainConfig{}, 1);
  const auto b = bare.step(0.5, 0.5, 0.0, 0.02);
  EXPECT_LT(b.mfu, 0);
  EXPECT_LT(b.cost_usd_per_hour, 0);
  EXPECT_LT(b.energy_kwh_per_step, 0);
  EXPECT_DOUBLE_EQ(b.scaling_efficiency, 1.0);
}

TEST(EfficiencyTest, SnapshotsAndMetricsCarryMeasuredAndPlanned) {
  monitor::RankSnapshot s;
  s.rank = 0;
  s.host = "h0";
  s.step = 7;
  s.efficiency = {0.8, 0.1, 0.9, 0.648, 0.35, 3.0, 1e-4};
  s.predicted = {{"tei", 0.7}, {"mfu", 0.4}};
  auto back = monitor::RankSnapshot::from_json(s.to_json());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_DOUBLE_EQ(back->efficiency.tei, 0.648);
  EXPECT_DOUBLE_EQ(back->efficiency.mfu, 0.35);
  EXPECT_DOUBLE_EQ(back->predicted.at("tei"), 0.7);
  monitor::Hub hub("job-eff", 1);
  hub.update(*back);
  const std::string text = hub.prometheus_text();
  EXPECT_NE(text.find("cann_train_tei{job=\"job-eff\",rank=\"0\",host=\"h0\"} 0.648"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("cann_train_mfu{job=\"job-eff\",rank=\"0\",host=\"h0\"} 0.35"),
            std::string::npos);
  EXPECT_NE(text.find("cann_train_predicted{job=\"job-eff\",figure=\"tei\"} 0.7"),
            std::string::npos)
      << text;
  EXPECT_NE(hub.status_json().find("\"predicted\""), std::string::npos);
}

// A plan with its cluster's power and price, trained: every step line has the measured figures,
// and the plan the predicted ones of the same names.
TEST(MultiProcEfficiencyTest, RunPlanMeasuresWhatThePlanPredicted) {
  test::TempDir dir;
  test::write_text(dir.file("cpu.yaml"),
                   "name: cpu\nnodes: 1\ndevices_per_node: 2\n"
                   "device: {name: cpu-core, peak_tflops: 0.05, memory_gb: 4, "
                   "memory_bandwidth_GBps: 10, precision: fp32, tdp_watts: 200, "
                   "hourly_cost_usd: 1.5}\n"
                   "intra_node: {bandwidth_GBps: 5, latency_us: 5}\ninter_node: {bandwidth_GBps: 1}\n");
  auto searched = test::run_cann({"search", "--model", "gpt_tiny", "--cluster", dir.file("cpu.yaml"),
                                  "--global-batch", "8", "--seq-len", "64", "--engine-only",
                                  "--out", dir.file("plan.yaml")});
  ASSERT_EQ(searched.exit_code, 0) << searched.output;
  auto plan = plan::read_plan_file(dir.file("plan.yaml"));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  for (const char* k : {"tei", "goodput", "scaling_efficiency", "cost_usd_per_hour",
                        "energy_kwh_per_step"})
    EXPECT_TRUE(plan->predicted.count(k)) << k;
  EXPECT_DOUBLE_EQ(plan->predicted["cost_usd_per_hour"], 3.0);
  const auto trained = test::run_cann(test::RunArgs()
                                          .flag("--plan", dir.file("plan.yaml"))
                                          .steps(5)
                                          .eval_every(0)
                                          .sample_tokens(0)
                                          .threads(1)
                                          .log_json(dir.file("log.jsonl")),
                                      240);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  std::ifstream f(dir.file("log.jsonl"));
  int steps = 0;
  for (std::string line; std::getline(f, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (!j.contains("loss")) continue;
    ++steps;
    const double step = j["step_time_s"].get<double>();
    EXPECT_GT(j["tei"].get<double>(), 0.0);
    EXPECT_LE(j["tei"].get<double>(), 1.0);
    EXPECT_GT(j["scaling_efficiency"].get<double>(), 0.0);
    EXPECT_LE(j["scaling_efficiency"].get<double>(), 1.0);
    EXPECT_NEAR(j["mfu"].get<double>(),
                plan->predicted["mfu"] * plan->predicted["step_time_s"] / step, 1e-9);
    EXPECT_DOUBLE_EQ(j["cost_usd_per_hour"].get<double>(), 3.0);
    EXPECT_NEAR(j["energy_kwh_per_step"].get<double>(), 2 * 200.0 * step / 3.6e6, 1e-12);
  }
  EXPECT_EQ(steps, 5);
  // The run's figures are written into the plan beside the predicted ones.
  auto after = plan::read_plan_file(dir.file("plan.yaml"));
  ASSERT_TRUE(after.ok()) << after.status().message();
  ASSERT_TRUE(after->measured.has_value());
  for (const char* k : {"tei", "mfu", "scaling_efficiency", "comm_ratio", "goodput"})
    EXPECT_TRUE(after->measured->efficiency.count(k)) << k;
  const auto& m = after->measured->efficiency;
  EXPECT_GT(m.at("tei"), 0.0);
  EXPECT_LE(m.at("tei"), 1.0);
  EXPECT_NEAR(m.at("tei"),
              training_efficiency_index(m.at("scaling_efficiency"), m.at("comm_ratio"),
                                        m.at("goodput")),
              1e-5);
}

}  // namespace
}  // namespace cann
