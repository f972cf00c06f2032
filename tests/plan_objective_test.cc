// Objectives, constraints and the baseline of the search (objective.h, baseline.h): under each
// objective the winner is the best of the feasible set on that objective, computed here from
// exact predictions of every feasible strategy with the definitions written out again; the
// goodput constraint removes exactly the candidates below it; the default baseline is pure
// data parallelism at the smallest ZeRO stage that fits.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "plan/baseline.h"
#include "plan/search.h"

namespace cann::plan {
namespace {

model::ModelSpec small_gpt() {
  model::ModelSpec m;
  m.name = "small_gpt";
  m.hidden_size = 2048;
  m.num_hidden_layers = 12;
  m.num_attention_heads = 16;
  m.num_key_value_heads = 16;
  m.intermediate_size = 8192;
  m.vocab_size = 32000;
  m.seq_length = 2048;
  return m;
}

// 2 nodes x 8 A100s of 24 GB: memory decides part of the space, so the objectives disagree.
PlanInput small_input(double memory_gb = 24) {
  ClusterSpec c = *load_cluster_spec("3072_a100");
  c.nodes = 2;
  c.device.memory_gb = memory_gb;
  return *make_plan_input(small_gpt(), c, 0);
}

SearchOptions every_candidate_exact(Objective o) {
  SearchOptions opt;
  opt.global_batch = 64;
  opt.objective = o;
  opt.top_k = 3;
  opt.exact_rerank = 1 << 20;  // every feasible candidate priced exactly: the set is exact
  return opt;
}

// The objective's figure from a prediction, from the definitions (docs/planner.md), not from
// objective.cc.
double figure(const PlanInput& in, Objective o, const Prediction& p) {
  const double n = in.cluster.num_devices();
  switch (o) {
    case Objective::kThroughput:
      return p.tokens_per_s;
    case Objective::kCost:  // $ per million tokens
      return n * in.cluster.device.hourly_cost_usd / (p.tokens_per_s * 3600) * 1e6;
    case Objective::kEnergy:  // joules per token
      return n * in.cluster.device.tdp_watts * p.step_time_s /
             (static_cast<double>(p.strategy.gbs) * in.model.seq_length);
    case Objective::kGoodput:
      return p.tokens_per_s * p.goodput.ratio;
    case Objective::kTei:
      return p.tei;
  }
  return 0;
}

TEST(PlanObjectiveTest, TheWinnerIsTheBestFeasibleCandidateOnEachObjective) {
  const PlanInput in = small_input();
  std::map<Objective, std::string> winners;
  for (Objective o : {Objective::kThroughput, Objective::kCost, Objective::kEnergy,
                      Objective::kGoodput, Objective::kTei}) {
    SCOPED_TRACE(std::string(objective_name(o)));
    auto r = search(in, every_candidate_exact(o));
    ASSERT_TRUE(r.ok()) << r.status().message();
    ASSERT_GE(r->feasible.size(), 20u);
    ASSERT_FALSE(r->top.empty());
    EXPECT_EQ(r->objective, o);
    const bool lower = o == Objective::kCost || o == Objective::kEnergy;
    double best = lower ? INFINITY : -INFINITY;
    for (const Candidate& c : r->feasible) {
      auto p = predict(in, c.strategy, Fidelity::kExact);
      ASSERT_TRUE(p.ok() && p->fits);
      const double v = figure(in, o, *p);
      best = lower ? std::min(best, v) : std::max(best, v);
    }
    const double top = figure(in, o, r->top[0]);
    EXPECT_NEAR(top, best, 1e-9 * std::abs(best));
    // The listed strategies are in the objective's order.
    for (size_t i = 1; i < r->top.size(); ++i) {
      const double a = figure(in, o, r->top[i - 1]), b = figure(in, o, r->top[i]);
      EXPECT_TRUE(lower ? a <= b * (1 + 1e-12) : a >= b * (1 - 1e-12)) << i;
    }
    winners[o] = strategy_string(r->top[0].strategy);
  }
  // Cost and energy per token follow throughput (every strategy uses every device at its TDP);
  // TEI prefers another layout here, so the objective changes the answer.
  EXPECT_EQ(winners[Objective::kCost], winners[Objective::kThroughput]);
  EXPECT_EQ(winners[Objective::kEnergy], winners[Objective::kThroughput]);
  EXPECT_NE(winners[Objective::kTei], winners[Objective::kThroughput]);
}

TEST(PlanObjectiveTest, GoodputConstraintRemovesExactlyTheCandidatesBelowIt) {
  const PlanInput in = small_input();
  auto all = search(in, every_candidate_exact(Objective::kThroughput));
  ASSERT_TRUE(all.ok());
  // A threshold inside the widest gap between goodputs (fast and exact pricing differ far less
  // than the gap, so the two stages agree on every candidate's side).
  std::vector<double> g;
  for (const Candidate& c : all->feasible) g.push_back(c.goodput);
  std::sort(g.begin(), g.end());
  g.erase(std::unique(g.begin(), g.end()), g.end());
  ASSERT_GE(g.size(), 2u) << "every candidate has the same goodput: nothing to filter";
  size_t gap = 0;
  for (size_t i = 1; i < g.size(); ++i)
    if (g[i] - g[i - 1] > g[gap + 1] - g[gap]) gap = i - 1;
  const double threshold = (g[gap] + g[gap + 1]) / 2;
  std::set<std::string> expected;
  for (const Candidate& c : all->feasible)
    if (c.goodput >= threshold) expected.insert(strategy_string(c.strategy));
  SearchOptions opt = every_candidate_exact(Objective::kThroughput);
  opt.min_goodput = threshold;
  auto kept = search(in, opt);
  ASSERT_TRUE(kept.ok()) << kept.status().message();
  std::set<std::string> got;
  for (const Candidate& c : kept->feasible) got.insert(strategy_string(c.strategy));
  EXPECT_EQ(got, expected);
  EXPECT_EQ(kept->removed_by_goodput,
            static_cast<long long>(all->feasible.size() - expected.size()));
  EXPECT_EQ(kept->removed_by_cost, 0);
  EXPECT_EQ(kept->within_limits, all->within_limits);

  // Above every candidate: nothing passes, and the error says which constraint removed how
  // many (exit 1, not a usage error).
  opt.min_goodput = 0.99999;
  auto none = search(in, opt);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().exit_code(), 1);
  std::string count = std::to_string(all->within_limits);  // with thousands separators
  for (int i = static_cast<int>(count.size()) - 3; i > 0; i -= 3) count.insert(i, ",");
  EXPECT_NE(none.status().message().find("of " + count + " that fit memory"), std::string::npos)
      << none.status().message();
  EXPECT_NE(none.status().message().find("--min-goodput 0.99999 removed " + count + " "),
            std::string::npos)
      << none.status().message();
  // The cost is the cluster's: a limit under it removes everything, above it nothing.
  opt.min_goodput = 0;
  opt.max_usd_per_hour = usd_per_hour(in.cluster) * 0.99;
  none = search(in, opt);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("--max-cost-per-hour"), std::string::npos);
  opt.max_usd_per_hour = usd_per_hour(in.cluster) * 1.01;
  auto cheap = search(in, opt);
  ASSERT_TRUE(cheap.ok());
  EXPECT_EQ(cheap->feasible.size(), all->feasible.size());
  EXPECT_DOUBLE_EQ(usd_per_hour(in.cluster), 16 * 1.79);  // the preset's A100 hour
}

TEST(PlanObjectiveTest, DefaultBaselineIsPureDataParallelAtTheSmallestZeroThatFits) {
  const PlanInput in = small_input();
  auto base = default_baseline(in, 64);
  ASSERT_TRUE(base.ok()) << base.status().message();
  const Strategy& b = base->strategy;
  EXPECT_EQ(b.dp, 16);
  EXPECT_FALSE(b.model_parallel());
  EXPECT_TRUE(base->fits);
  // No smaller ZeRO stage fits with any micro-batch and recomputation; at its own stage it is
  // the fastest that fits.
  for (int z = 0; z <= b.zero; ++z)
    for (int mbs : {1, 2, 4})
      for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
        Strategy s = b;
        s.zero = z;
        s.mbs = mbs;
        s.recompute = rc;
        auto p = predict(in, s, Fidelity::kExact);
        ASSERT_TRUE(p.ok());
        if (z < b.zero) {
          EXPECT_FALSE(p->fits) << strategy_string(s);
        }
        if (z == b.zero && p->fits) {
          EXPECT_GE(p->step_time_s, base->step_time_s);
        }
      }
  // The speed-up is the baseline's step time over the candidate's.
  auto r = search(in, every_candidate_exact(Objective::kThroughput));
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(estimated_speedup(*base, r->top[0]), base->step_time_s / r->top[0].step_time_s);
  EXPECT_DOUBLE_EQ(estimated_speedup(*base, *base), 1.0);
  // A batch pure data parallelism cannot split, and a baseline that does not fit.
  EXPECT_EQ(default_baseline(in, 24).status().code(), StatusCode::kNotFound);
  // About 0.67B parameters at 18 bytes each do not fit 8 GB unsharded.
  auto big = baseline_of(small_input(8), "zero=0", 64);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().exit_code(), 2);
  EXPECT_NE(big.status().message().find("over the 8.0 GB limit"), std::string::npos)
      << big.status().message();
  auto tight = default_baseline(small_input(8), 64);
  ASSERT_TRUE(tight.ok()) << tight.status().message();
  EXPECT_GE(tight->strategy.zero, 1);
  EXPECT_EQ(baseline_of(in, "tp=two", 64).status().exit_code(), 2);
  EXPECT_EQ(baseline_of(in, "gbs=32", 64).status().exit_code(), 2);
}

}  // namespace
}  // namespace cann::plan
