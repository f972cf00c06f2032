// Pipeline schedules and layer partition: the 1F1B bubble (p-1)/(m+p-1) with equal stages,
// interleaving shrinking it, in-flight activations per stage, the closed form against the
// event simulation on uneven stages, the DP partition against bisection and brute force, and
// the Chrome trace of a simulated step.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <functional>
#include <set>

#include "core/rng.h"
#include "plan/partition.h"
#include "plan/pipeline.h"
#include "plan/plan_input.h"
#include "plan/trace.h"

namespace cann::plan {
namespace {

PipelineInput uniform(int p, int v, int m, double f, double b, double act = 1) {
  PipelineInput in;
  in.pp = p;
  in.vpp = v;
  in.micro_batches = m;
  in.chunks.assign(p, std::vector<ChunkCost>(v, ChunkCost{f / v, b / v, act / v}));
  return in;
}

TEST(PlanScheduleTest, OneFOneBBubbleMatchesTheFormula) {
  for (int p : {1, 2, 3, 4, 8}) {
    for (int m : {1, 2, 5, 8, 16, 33}) {
      const PipelineResult r = simulate_pipeline(uniform(p, 1, m, 1.0, 2.0), false);
      // (m + p - 1) slots of F + B; the idle share is (p - 1) / (m + p - 1).
      EXPECT_NEAR(r.makespan_s, (m + p - 1) * 3.0, 1e-9) << "p=" << p << " m=" << m;
      EXPECT_NEAR(r.bubble_ratio, (p - 1.0) / (m + p - 1.0), 1e-9) << "p=" << p << " m=" << m;
      const PipelineResult e = estimate_pipeline(uniform(p, 1, m, 1.0, 2.0));
      EXPECT_NEAR(e.makespan_s, r.makespan_s, 1e-9);
      EXPECT_NEAR(e.bubble_ratio, r.bubble_ratio, 1e-9);
    }
  }
}

TEST(PlanScheduleTest, InterleavingShrinksTheBubble) {
  // p = 4, m = 8, F = 1, B = 2 per stage: 33 without interleaving (pipeline.h worked example),
  // (8 + 3/2) * 3 = 28.5 with two chunks per device.
  const PipelineResult plain = simulate_pipeline(uniform(4, 1, 8, 1, 2), false);
  EXPECT_NEAR(plain.makespan_s, 33, 1e-9);
  for (int v : {2, 3, 4}) {
    const PipelineResult inter = simulate_pipeline(uniform(4, v, 8, 1, 2), false);
    EXPECT_LT(inter.bubble_ratio, plain.bubble_ratio) << "vpp=" << v;
    EXPECT_NEAR(inter.makespan_s, 8 * 3 + 3 * 3.0 / v, 1e-9) << "vpp=" << v;
    EXPECT_NEAR(estimate_pipeline(uniform(4, v, 8, 1, 2)).makespan_s, inter.makespan_s, 1e-9);
  }
}

TEST(PlanScheduleTest, InFlightActivationsPerStage) {
  // 1F1B: stage i holds min(m, p - i) micro-batches at its first backward.
  for (int m : {2, 8}) {
    const PipelineResult r = simulate_pipeline(uniform(4, 1, m, 1, 2, 10), false);
    for (int i = 0; i < 4; ++i)
      EXPECT_NEAR(r.peak_activation_bytes[i], 10.0 * std::min(m, 4 - i), 1e-9) << i;
    const PipelineResult e = estimate_pipeline(uniform(4, 1, m, 1, 2, 10));
    for (int i = 0; i < 4; ++i)
      EXPECT_NEAR(e.peak_activation_bytes[i], r.peak_activation_bytes[i], 1e-9);
  }
  // Interleaved, p = 4, v = 2, m = 8: stage 0 runs (4-1)*2 + (2-1)*4 = 10 warm-up forwards
  // plus one, 11 chunks of 5 bytes: the (1 + (p-1)/(p*v)) factor of Korthikanti et al. 2022.
  const PipelineResult r = simulate_pipeline(uniform(4, 2, 8, 1, 2, 10), false);
  EXPECT_NEAR(r.peak_activation_bytes[0], 11 * 5.0, 1e-9);
  EXPECT_NEAR(r.peak_activation_bytes[3], 5 * 5.0, 1e-9);
}

TEST(PlanScheduleTest, UnevenStagesAndSendsClosedFormTracksTheSimulation) {
  Rng rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const int p = 2 + trial % 7, m = p * (1 + trial % 5);
    PipelineInput in = uniform(p, 1, m, 1, 2);
    for (auto& dev : in.chunks)
      for (auto& c : dev) {
        c.fwd_s = 0.5 + rng.uniform();
        c.bwd_s = 2 * c.fwd_s;
      }
    in.p2p_s = 0.05 * rng.uniform();
    const PipelineResult sim = simulate_pipeline(in, false);
    const PipelineResult est = estimate_pipeline(in);
    // No schedule beats m times the slowest stage.
    double slowest = 0;
    for (const auto& dev : in.chunks) slowest = std::max(slowest, dev[0].fwd_s + dev[0].bwd_s);
    EXPECT_GE(sim.makespan_s, m * slowest - 1e-9);
    EXPECT_NEAR(est.makespan_s / sim.makespan_s, 1.0, 0.08) << "p=" << p << " m=" << m;
  }
}

TEST(PlanScheduleTest, RecordedEventsRespectDependencies) {
  PipelineInput in = uniform(3, 2, 6, 1, 2);
  in.p2p_s = 0.1;
  const PipelineResult r = simulate_pipeline(in, true);
  // 3 devices x 2 chunks x 6 micro-batches x (forward + backward), plus the sends.
  int compute = 0;
  for (const PipelineEvent& e : r.events)
    compute += e.op == PipeOp::kForward || e.op == PipeOp::kBackward;
  EXPECT_EQ(compute, 3 * 2 * 6 * 2);
  // Per device, ops never overlap.
  for (int d = 0; d < 3; ++d) {
    double last = 0;
    for (const PipelineEvent& e : r.events)
      if (e.device == d) {
        EXPECT_GE(e.start_s, last - 1e-12);
        last = e.end_s;
      }
  }
}

TEST(PlanPartitionTest, WorkedExampleAndAgreement) {
  const std::vector<double> costs = {4, 1, 1, 1, 1, 1, 1, 4};
  const std::vector<int> b = partition_dp(costs, 4);
  EXPECT_EQ(bottleneck(costs, b), 4);
  EXPECT_EQ(bottleneck(costs, {0, 2, 4, 6, 8}), 5);  // equal layer counts
  EXPECT_NEAR(bottleneck(costs, partition_bisect(costs, 4)), 4, 1e-6);

  // Brute force over every split on small cases; the DP is exact, bisection matches it.
  Rng rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + trial % 9, parts = 1 + trial % n;
    std::vector<double> c(n);
    for (double& x : c) x = 0.1 + rng.uniform();
    double best = 1e30;
    std::vector<int> cuts(parts + 1, 0);
    cuts[parts] = n;
    std::function<void(int, int)> rec = [&](int j, int start) {
      if (j == parts) {
        best = std::min(best, bottleneck(c, cuts));
        return;
      }
      for (int k = start + 1; k <= n - (parts - j); ++k) {
        cuts[j] = k;
        rec(j + 1, k);
      }
    };
    if (parts == 1) {
      best = bottleneck(c, {0, n});
    } else {
      cuts[0] = 0;
      rec(1, 0);
    }
    const std::vector<int> dp = partition_dp(c, parts), bi = partition_bisect(c, parts);
    ASSERT_EQ(dp.size(), static_cast<size_t>(parts + 1));
    ASSERT_EQ(bi.size(), static_cast<size_t>(parts + 1));
    for (int j = 0; j < parts; ++j) {
      EXPECT_LT(dp[j], dp[j + 1]);  // every part non-empty
      EXPECT_LT(bi[j], bi[j + 1]);
    }
    EXPECT_NEAR(bottleneck(c, dp), best, 1e-12) << "n=" << n << " parts=" << parts;
    EXPECT_NEAR(bottleneck(c, bi), best, 1e-8 * best) << "n=" << n << " parts=" << parts;
  }
}

TEST(PlanTraceTest, ChromeTraceHasATrackPerStage) {
  auto in = load_plan_input("gpt_175b", "3072_a100", 8, "");
  ASSERT_TRUE(in.ok()) << in.status().message();
  Strategy s;
  s.tp = 8, s.pp = 8, s.dp = 1, s.mbs = 1, s.gbs = 16, s.sp = true;
  s.recompute = Recompute::kSelective;
  auto p = predict(*in, s, Fidelity::kExact, true);
  ASSERT_TRUE(p.ok()) << p.status().message();
  const nlohmann::json j = nlohmann::json::parse(chrome_trace(*in, *p));
  std::set<int> pids;
  int forwards = 0, sends = 0, names = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") ++names;
    if (e["ph"] != "X") continue;
    pids.insert(e["pid"].get<int>());
    EXPECT_GE(e["dur"].get<double>(), 0);
    forwards += e["cat"] == "forward";
    sends += e["cat"] == "p2p";
  }
  EXPECT_EQ(names, 8);
  EXPECT_EQ(pids.size(), 8u);
  EXPECT_EQ(forwards, 8 * 16);
  EXPECT_EQ(sends, 2 * 7 * 16);  // every boundary, both directions, every micro-batch
  EXPECT_NEAR(j["otherData"]["step_time_s"].get<double>(), p->step_time_s, 1e-6);
}

}  // namespace
}  // namespace cann::plan
