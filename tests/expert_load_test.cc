// Expert load in the step log: the counts add up to every token's k assignments less the dropped
// ones, summed over the data-parallel ranks, and expert parallelism (which moves the tokens to
// their experts' ranks) reports the same global counts as plain data parallelism of one seed,
// also combined with tensor or pipeline parallelism.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <sstream>

#include "model/spec.h"
#include "run_args.h"
#include "test_util.h"
#include "train/expert_load.h"

namespace cann {
namespace {

TEST(ExpertLoadTest, BalanceIsMeanOverMax) {
  EXPECT_DOUBLE_EQ(train::expert_balance({10, 10, 10, 10}), 1.0);
  EXPECT_DOUBLE_EQ(train::expert_balance({40, 0, 0, 0}), 0.25);
  EXPECT_DOUBLE_EQ(train::expert_balance({30, 10, 20, 20}), 20.0 / 30.0);
  EXPECT_DOUBLE_EQ(train::expert_balance({0, 0}), 1.0);
  EXPECT_DOUBLE_EQ(train::expert_balance({}), 1.0);
  EXPECT_EQ(train::expert_load_json({120, 98, 0}), "[120,98,0]");
  EXPECT_EQ(train::expert_load_json({}), "[]");
}

std::vector<nlohmann::json> step_lines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::stringstream in(test::read_text(path));
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("step") && !j.contains("event")) lines.push_back(j);
  }
  return lines;
}

std::vector<nlohmann::json> train_moe(const test::TempDir& dir, const std::string& strategy,
                                      const std::string& nproc = "2") {
  const std::string log = dir.file(strategy + ".jsonl");
  auto r = test::run_cann(test::RunArgs()
                              .model("moe_bert_tiny")
                              .flag("--nproc-per-node", nproc)
                              .threads(1)
                              .strategy(strategy)
                              .steps(3)
                              .flag("--seed", 7)
                              .eval_every(0)
                              .quiet()
                              .log_json(log),
                          240);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return step_lines(log);
}

TEST(MultiProcExpertLoadTest, GlobalCountsAddUpAndMatchBetweenEpOneAndTwo) {
  auto spec = model::load_model_spec("moe_bert_tiny");
  ASSERT_TRUE(spec.ok());
  const int E = spec->num_local_experts, K = spec->num_experts_per_tok;
  const int moe_layers = spec->num_hidden_layers / spec->moe_layer_freq;
  test::TempDir dir("cann-expert-load");
  const auto dp = train_moe(dir, "dp=2,ep=1");
  const auto ep = train_moe(dir, "dp=2,ep=2");
  const auto ep_tp = train_moe(dir, "dp=2,tp=2,ep=2", "4");
  // Under a pipeline each stage counts its own MoE layers: the row still covers them all.
  const auto dp_mbs2 = train_moe(dir, "dp=2,mbs=2");
  const auto ep_pp = train_moe(dir, "dp=2,pp=2,ep=2,mbs=2", "4");
  for (const auto* run : {&dp, &ep, &ep_tp, &dp_mbs2, &ep_pp}) ASSERT_EQ(run->size(), 3u);
  for (size_t s = 0; s < dp.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s + 1));
    for (const auto* line : {&dp[s], &ep[s], &ep_tp[s], &dp_mbs2[s], &ep_pp[s]}) {
      ASSERT_TRUE(line->contains("expert_load")) << line->dump();
      ASSERT_TRUE(line->contains("expert_balance")) << line->dump();
      const auto load = (*line)["expert_load"].get<std::vector<int64_t>>();
      ASSERT_EQ(static_cast<int>(load.size()), E);
      int64_t kept = 0, max = 0;
      for (int64_t c : load) {
        kept += c;
        max = std::max(max, c);
      }
      // Every token of the global batch makes K assignments in each MoE layer.
      const int64_t assignments = (*line)["tokens"].get<int64_t>() * K * moe_layers;
      EXPECT_EQ(kept + (*line)["dropped_assignments"].get<int64_t>(), assignments);
      EXPECT_NEAR((*line)["expert_balance"].get<double>(),
                  static_cast<double>(kept) / E / static_cast<double>(max), 1e-9);
    }
    // Same seed, same routing: ep only changes where the experts compute.
    EXPECT_EQ(dp[s]["expert_load"], ep[s]["expert_load"]);
    EXPECT_EQ(dp[s]["dropped_assignments"], ep[s]["dropped_assignments"]);
    EXPECT_EQ(dp[s]["expert_load"], ep_tp[s]["expert_load"]);
    EXPECT_EQ(dp[s]["dropped_assignments"], ep_tp[s]["dropped_assignments"]);
    EXPECT_EQ(dp_mbs2[s]["expert_load"], ep_pp[s]["expert_load"]);
    EXPECT_EQ(dp_mbs2[s]["dropped_assignments"], ep_pp[s]["dropped_assignments"]);
  }
}

}  // namespace
}  // namespace cann
