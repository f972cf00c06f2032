// `cann-train search --objective/--max-cost-per-hour/--min-goodput/--baseline` through the
// real binary: bad input is one line and exit 2, constraints nothing meets one line and exit 1,
// and the table, JSON, plan file and HTML report carry the objective, TEI, cost, energy and the
// speed-up against the baseline.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/fs.h"
#include "plan/plan_file.h"
#include "test_util.h"

namespace cann {
namespace {

using test::run_cann;

// llama3_8b on 4 nodes of 8 H100s: pure data parallelism fits there, so a default baseline
// exists.
const std::vector<std::string> kSearch = {"search",     "--model", "llama3_8b", "--cluster",
                                          "16384_h100", "--nodes", "4"};

std::vector<std::string> with(std::vector<std::string> extra) {
  std::vector<std::string> a = kSearch;
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

void expect_one_line(const test::CommandResult& r, int code,
                     const std::vector<std::string>& parts) {
  test::expect_one_line_error(r, code, parts, "cann-train search: error: ");
}

TEST(PlanObjectiveCliTest, BadInputIsOneLineAndExitTwo) {
  expect_one_line(run_cann(with({"--objective", "speed"}), 60), 2,
                  {"unknown objective 'speed'", "throughput, cost, energy, goodput or tei"});
  expect_one_line(run_cann(with({"--max-cost-per-hour", "-5"}), 60), 2,
                  {"--max-cost-per-hour: expected a cost in USD of 0 or more, got -5"});
  expect_one_line(run_cann(with({"--min-goodput", "1.5"}), 60), 2,
                  {"--min-goodput: expected a fraction in 0..1, got 1.5"});
  expect_one_line(run_cann(with({"--min-goodput", "-0.1"}), 60), 2,
                  {"expected a fraction in 0..1, got -0.1"});
  expect_one_line(run_cann(with({"--baseline", "tp=two"}), 60), 2,
                  {"--baseline 'tp=two'", "expected a positive integer", "hint:"});
  expect_one_line(run_cann(with({"--baseline", "tp=8,pp=7"}), 60), 2,
                  {"--baseline 'tp=8,pp=7'", "does not divide"});
  // 8B parameters unsharded at 18 bytes each are 150 GB: over the 80 GB of an H100.
  expect_one_line(run_cann(with({"--baseline", "zero=0"}), 60), 2,
                  {"--baseline 'zero=0'", "over the 80.0 GB limit", "hint:"});
  expect_one_line(run_cann(with({"--baseline", "gbs=64"}), 60), 2,
                  {"differs from the search's global batch"});
}

TEST(PlanObjectiveCliTest, ClusterWithoutPriceOrPowerRefusesCostAndEnergy) {
  test::TempDir dir;
  std::string yaml = test::read_text(CANN_SOURCE_DIR "/configs/clusters/16384_h100.yaml");
  for (const std::string key : {"hourly_cost_usd:", "tdp_watts:"}) {
    const size_t at = yaml.find(key);
    ASSERT_NE(at, std::string::npos) << key;
    yaml.replace(at, yaml.find('#', at) - at, key + " 0 ");
  }
  const std::string path = dir.file("free.yaml");
  test::write_text(path, yaml);
  const std::vector<std::string> base = {"search", "--model", "llama3_8b", "--cluster",
                                         path,     "--nodes", "4"};
  auto args = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  expect_one_line(run_cann(args({"--max-cost-per-hour", "100"}), 60), 2,
                  {"--max-cost-per-hour: cluster", "has no device price", "hourly_cost_usd"});
  expect_one_line(run_cann(args({"--objective", "cost"}), 60), 2, {"has no device price"});
  expect_one_line(run_cann(args({"--objective", "energy"}), 60), 2,
                  {"has no device power", "tdp_watts"});
  // Throughput still plans, with "-" where a price or power would be.
  auto r = run_cann(args({"--top", "2"}), 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("$/Mtok"), std::string::npos);
}

TEST(PlanObjectiveCliTest, ConstraintsNothingMeetsSayWhichRemovedHowMany) {
  // 32 H100s at $2.99 an hour cost $95.68/h.
  expect_one_line(run_cann(with({"--max-cost-per-hour", "50"}), 60), 1,
                  {"no strategy meets the constraints", "--max-cost-per-hour 50 removed",
                   "every layout uses all 32 devices: $95.68/h", "hint:"});
  expect_one_line(run_cann(with({"--min-goodput", "0.99999"}), 60), 1,
                  {"--min-goodput 0.99999 removed", "the best reaches"});
  // Both, each with its count.
  auto r = run_cann(with({"--min-goodput", "0.99999", "--max-cost-per-hour", "50"}), 60);
  expect_one_line(r, 1, {"--max-cost-per-hour 50 removed", ", --min-goodput 0.99999 removed"});
  // A limit above the cost removes nothing, and the text says so.
  r = run_cann(with({"--max-cost-per-hour", "100", "--min-goodput", "0.5"}), 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("constraints: --max-cost-per-hour removed 0, --min-goodput removed 0"),
            std::string::npos)
      << r.output;
}

TEST(PlanObjectiveCliTest, JsonCarriesObjectiveFiguresAndSpeedups) {
  for (const std::string objective : {"throughput", "cost", "energy", "goodput", "tei"}) {
    SCOPED_TRACE(objective);
    auto r = run_cann(with({"--objective", objective, "--json", "--top", "4"}), 60);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json j = nlohmann::json::parse(r.output);
    EXPECT_EQ(j["objective"], objective);
    ASSERT_TRUE(j["baseline"].is_object()) << j.dump();
    const double base_step = j["baseline"]["step_time_s"];
    ASSERT_GE(j["strategies"].size(), 2u);
    const bool lower = objective == "cost" || objective == "energy";
    double last = lower ? -1 : 1e300;
    for (const auto& s : j["strategies"]) {
      for (const char* key : {"tei", "cost_usd_per_million_tokens", "cost_usd_per_hour",
                              "energy_j_per_token", "objective_value", "estimated_speedup"})
        ASSERT_TRUE(s.contains(key)) << key;
      EXPECT_DOUBLE_EQ(s["estimated_speedup"].get<double>(),
                       base_step / s["step_time_s"].get<double>());
      EXPECT_NEAR(s["cost_usd_per_million_tokens"].get<double>(),
                  32 * 2.99 / (s["tokens_per_s"].get<double>() * 3600) * 1e6, 1e-9);
      EXPECT_NEAR(s["energy_j_per_token"].get<double>(), 32 * 700 / s["tokens_per_s"].get<double>(),
                  1e-9);
      const double v = s["objective_value"];
      EXPECT_TRUE(lower ? v >= last : v <= last) << "not in the objective's order";
      last = v;
    }
    for (const auto& p : j["pareto_front"])
      for (const char* key : {"tei", "cost_usd_per_million_tokens", "energy_j_per_token"})
        EXPECT_TRUE(p.contains(key)) << key;
  }
  // No baseline fits: null, and why.
  auto r =
      run_cann({"search", "--model", "moe_bert", "--cluster", "1024_ascend910b", "--json"}, 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_TRUE(j["baseline"].is_null());
  EXPECT_NE(j["baseline_missing"].get<std::string>().find("no baseline"), std::string::npos);
  EXPECT_FALSE(j["strategies"][0].contains("estimated_speedup"));
}

TEST(PlanObjectiveCliTest, TextPlanFileAndReportShowObjectiveAndBaseline) {
  test::TempDir dir;
  const std::string plan = dir.file("plan.yaml"), report = dir.file("report.html");
  auto r = run_cann(with({"--objective", "tei", "--baseline", "zero=1,recompute=selective", "--out",
                          plan, "--report", report, "--top", "3"}),
                    60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* part : {"Ranked by tei: TEI, highest first", "vs base", "TEI", "$/Mtok", "J/tok",
                           "baseline: dp=32,", "(--baseline)", "error bands on TEI",
                           "Pareto front over TEI", "ranks below it on TEI"})
    EXPECT_NE(r.output.find(part), std::string::npos) << part << "\n" << r.output;
  // No line of the table is wider than 160 columns.
  size_t start = r.output.find("#   strategy");
  ASSERT_NE(start, std::string::npos);
  for (int row = 0; row < 4; ++row) {
    const size_t end = r.output.find('\n', start);
    EXPECT_LE(end - start, 160u) << r.output.substr(start, end - start);
    start = end + 1;
  }
  auto p = plan::read_plan_file(plan);
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_TRUE(p->predicted.count("estimated_speedup"));
  EXPECT_GT(p->predicted["estimated_speedup"], 0);
  EXPECT_EQ(p->baseline.rfind("dp=32,tp=1,pp=1", 0), 0u) << p->baseline;
  // The plan's speed-up is the baseline's step over the winner's, as the JSON states it.
  auto j = run_cann(with({"--objective", "tei", "--baseline", "zero=1,recompute=selective",
                          "--json", "--top", "1"}),
                    60);
  const nlohmann::json js = nlohmann::json::parse(j.output);
  EXPECT_NEAR(p->predicted["estimated_speedup"],
              js["strategies"][0]["estimated_speedup"].get<double>(), 1e-5);
  const std::string html = test::read_text(report);
  for (const char* part :
       {"Objectives: throughput, cost, energy, TEI", "id=\"front_cost\"", "id=\"front_energy\"",
        "id=\"front_tei\"", "id=\"bars_tei\"", "id=\"bars_speedup\"", "\"top\":[[\"#1\"",
        "\"priced\":true", "function bars(", "objectives();"})
    EXPECT_NE(html.find(part), std::string::npos) << part;
}

}  // namespace
}  // namespace cann
