// The search: pruning never drops a feasible candidate or the optimum (checked against pricing
// every leaf), the Pareto front is the set of non-dominated candidates, default batch sizes,
// and constraints nothing satisfies come back as errors that name the closest candidate; every
// candidate is a layout `run` trains.
#include <gtest/gtest.h>

#include <set>

#include "plan/engine_support.h"
#include "plan/search.h"

namespace cann::plan {
namespace {

model::ModelSpec small_gpt(int experts = 0) {
  model::ModelSpec m;
  m.name = experts ? "small_moe" : "small_gpt";
  m.hidden_size = 2048;
  m.num_hidden_layers = 12;
  m.num_attention_heads = 16;
  m.num_key_value_heads = 16;
  m.intermediate_size = 8192;
  m.moe_intermediate_size = 8192;
  m.vocab_size = 32000;
  m.seq_length = 2048;
  m.num_local_experts = experts;
  m.num_experts_per_tok = experts ? 2 : 1;
  return m;
}

// 2 nodes x 8 devices of 16 GB: small enough that memory decides much of the space.
ClusterSpec small_cluster() {
  auto c = load_cluster_spec("3072_a100");
  ClusterSpec s = *c;
  s.nodes = 2;
  s.device.memory_gb = 16;
  return s;
}

std::set<std::string> strategies(const SearchResult& r) {
  std::set<std::string> out;
  for (const Candidate& c : r.feasible) out.insert(strategy_string(c.strategy));
  return out;
}

void expect_pruning_is_safe(const model::ModelSpec& m, const ClusterSpec& c, int gbs) {
  auto in = make_plan_input(m, c, 0);
  ASSERT_TRUE(in.ok());
  SearchOptions opt;
  opt.global_batch = gbs;
  opt.top_k = 3;
  opt.engine_only = true;  // every candidate must then be a layout `run` trains (below)
  auto pruned = search(*in, opt);
  opt.prune = false;
  auto brute = search(*in, opt);
  ASSERT_TRUE(pruned.ok()) << pruned.status().message();
  ASSERT_TRUE(brute.ok()) << brute.status().message();
  EXPECT_EQ(pruned->space, brute->space);
  EXPECT_EQ(brute->evaluated, brute->space);
  EXPECT_EQ(brute->pruned, 0);
  EXPECT_GT(pruned->pruned, 0) << "the bound never fired; the test proves nothing";
  EXPECT_EQ(pruned->evaluated + pruned->pruned, pruned->space);
  // The same feasible set, so the same optimum and the same Pareto front.
  EXPECT_EQ(strategies(*pruned), strategies(*brute));
  ASSERT_FALSE(pruned->top.empty());
  EXPECT_EQ(pruned->top[0].strategy, brute->top[0].strategy);
  EXPECT_EQ(pruned->pareto_count, brute->pareto_count);
  // The winner is valid, fits, and no feasible candidate is predicted faster by more than the
  // fast/exact pricing difference.
  const Prediction& w = pruned->top[0];
  EXPECT_TRUE(validate_strategy(w.strategy, m, c).ok());
  EXPECT_TRUE(w.fits);
  for (const Candidate& cand : pruned->feasible)
    EXPECT_LE(cand.tokens_per_s, w.tokens_per_s * 1.05) << strategy_string(cand.strategy);
  // Every candidate is one `run` trains.
  int with_cp = 0;
  for (const Candidate& cand : brute->feasible) {
    const Strategy& s = cand.strategy;
    const Status trains = engine_supports(s, m, EngineShape{});
    EXPECT_TRUE(trains.ok()) << trains.message();
    with_cp += s.cp > 1;
  }
  // Dense models get cp candidates; MoE models none (run refuses cp with MoE layers).
  if (m.is_moe())
    EXPECT_EQ(with_cp, 0);
  else
    EXPECT_GT(with_cp, 0) << "no cp candidate: the check above says nothing about cp";
}

TEST(PlanSearchTest, PruningKeepsEveryFeasibleCandidateDense) {
  expect_pruning_is_safe(small_gpt(), small_cluster(), 64);
}

TEST(PlanSearchTest, PruningKeepsEveryFeasibleCandidateMoe) {
  expect_pruning_is_safe(small_gpt(8), small_cluster(), 32);
}

TEST(PlanSearchTest, ParetoFrontIsTheNonDominatedSet) {
  // (step, memory, goodput): A fast and big, B slow and small, C dominated by A, D ties A on
  // time and memory but has more goodput (so A is dominated by D), E trades goodput.
  auto cand = [](double t, double mem, double g) {
    Candidate c;
    c.step_time_s = t;
    c.memory_peak_bytes = mem;
    c.goodput = g;
    return c;
  };
  std::vector<Candidate> c = {cand(1, 10, 0.9), cand(3, 2, 0.9), cand(2, 11, 0.8),
                              cand(1, 10, 0.95), cand(2, 5, 0.99)};
  mark_pareto(c);
  EXPECT_FALSE(c[0].pareto);
  EXPECT_TRUE(c[1].pareto);
  EXPECT_FALSE(c[2].pareto);
  EXPECT_TRUE(c[3].pareto);
  EXPECT_TRUE(c[4].pareto);
  // Goodput differences under 0.1% do not count.
  std::vector<Candidate> near = {cand(1, 10, 0.9001), cand(2, 10, 0.9004)};
  mark_pareto(near);
  EXPECT_TRUE(near[0].pareto);
  EXPECT_FALSE(near[1].pareto);
  // Against the O(n^2) definition on a larger random set.
  std::vector<Candidate> r;
  for (int i = 0; i < 300; ++i)
    r.push_back(cand(1 + (i * 37) % 101, 1 + (i * 53) % 97, ((i * 29) % 89) / 89.0));
  mark_pareto(r);
  for (size_t i = 0; i < r.size(); ++i) {
    bool dominated = false;
    for (size_t j = 0; j < r.size(); ++j) {
      if (i == j) continue;
      const bool no_worse = r[j].step_time_s <= r[i].step_time_s &&
                            r[j].memory_peak_bytes <= r[i].memory_peak_bytes &&
                            r[j].goodput >= r[i].goodput;
      const bool better = r[j].step_time_s < r[i].step_time_s ||
                          r[j].memory_peak_bytes < r[i].memory_peak_bytes ||
                          r[j].goodput > r[i].goodput;
      dominated |= no_worse && better;
    }
    EXPECT_EQ(r[i].pareto, !dominated) << i;
  }
}

// An engine-only search with the world free to change (EngineShape::elastic_nodes, --elastic
// across nodes): each world size trains the layout planned for it (train/elastic_layouts.h), so
// model-parallel layouts stay candidates, and where one is fastest (here over a slow link
// between the nodes, where splitting the model pays) it still wins.
TEST(PlanSearchTest, ElasticNodesAdmitModelParallelLayouts) {
  ClusterSpec c = small_cluster();
  c.device.memory_gb = 80;
  c.inter_node.bandwidth_GBps = 0.1;
  model::ModelSpec m = small_gpt();
  m.num_hidden_layers = 4;
  auto in = make_plan_input(m, c, 0);
  ASSERT_TRUE(in.ok());
  SearchOptions opt;
  opt.global_batch = 64;
  opt.engine_only = true;
  opt.engine.world = c.num_devices();
  auto fixed = search(*in, opt);
  ASSERT_TRUE(fixed.ok()) << fixed.status().message();
  ASSERT_FALSE(fixed->top.empty());
  EXPECT_TRUE(fixed->top[0].strategy.model_parallel())
      << "the test needs a case where a model-parallel layout wins; got "
      << strategy_string(fixed->top[0].strategy);
  opt.engine.elastic_nodes = true;
  auto elastic = search(*in, opt);
  ASSERT_TRUE(elastic.ok()) << elastic.status().message();
  ASSERT_FALSE(elastic->top.empty());
  EXPECT_EQ(strategy_string(elastic->top[0].strategy), strategy_string(fixed->top[0].strategy));
}

TEST(PlanSearchTest, DefaultGlobalBatchIsAboutFourMillionTokens) {
  model::ModelSpec m = small_gpt();
  for (auto [seq, gbs] : {std::pair{2048, 2048}, {512, 8192}, {8192, 512}, {257, 16384}}) {
    m.seq_length = seq;
    EXPECT_EQ(default_global_batch(m), gbs) << seq;
  }
}

TEST(PlanSearchTest, NothingFitsNamesTheClosestCandidate) {
  auto in = make_plan_input(small_gpt(), small_cluster(), 1.0 * 1073741824.0);  // 1 GB
  ASSERT_TRUE(in.ok());
  SearchOptions opt;
  opt.global_batch = 64;
  auto r = search(*in, opt);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().exit_code(), 2);
  const std::string& msg = r.status().message();
  EXPECT_NE(msg.find("no strategy fits in 1.0 GB per device"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the closest, dp="), std::string::npos) << msg;
  EXPECT_NE(msg.find(" over"), std::string::npos) << msg;
  // The named candidate really needs what the message says.
  const size_t a = msg.find("the closest, ") + 13, b = msg.find(", needs");
  auto s = parse_strategy(msg.substr(a, b - a));
  ASSERT_TRUE(s.ok()) << msg.substr(a, b - a);
  PlanInput unlimited = *in;
  unlimited.memory_limit_bytes = 1e18;
  auto p = predict(unlimited, *s, Fidelity::kFast);
  ASSERT_TRUE(p.ok());
  EXPECT_GT(p->memory_peak_bytes, 1.0 * 1073741824.0);
}

TEST(PlanSearchTest, CommunicationLimitNothingMeetsNamesTheClosest) {
  auto in = make_plan_input(small_gpt(), small_cluster(), 0);
  ASSERT_TRUE(in.ok());
  SearchOptions opt;
  opt.global_batch = 64;
  opt.max_comm_ratio = 1e-6;
  auto r = search(*in, opt);
  ASSERT_FALSE(r.ok());
  const std::string& msg = r.status().message();
  EXPECT_NE(msg.find("keeps exposed communication under --max-comm-overhead 1e-06"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("the closest, dp="), std::string::npos) << msg;
}

}  // namespace
}  // namespace cann::plan
