// The layout each world size of a multi-node elastic job trains under model parallelism
// (train/elastic_layouts.h): the launch's split where a world admits it, else its experts spread
// over the ranks left, else the planner's choice on the given spec, else none; and the leader forms
// only the sizes that have one.
#include <gtest/gtest.h>

#include "elastic/node_membership.h"
#include "model/spec.h"
#include "plan/cluster.h"
#include "plan/strategy.h"
#include "test_util.h"
#include "train/config.h"
#include "train/elastic_layouts.h"

namespace cann::train {
namespace {

const char kSpec[] =
    "name: local\nnodes: 1\ndevices_per_node: 2\n"
    "device: {name: cpu-core, peak_tflops: 0.1, memory_gb: 8, memory_bandwidth_GBps: 20, "
    "compute_units: 1, gemm_efficiency: 1.0, memory_efficiency: 1.0, precision: fp32}\n"
    "intra_node: {bandwidth_GBps: 8, latency_us: 20, topology: switch, efficiency: 1.0}\n"
    "inter_node: {bandwidth_GBps: 1.5, latency_us: 50, efficiency: 1.0}\n";

TrainConfig config_for(const std::string& strategy, int batch) {
  TrainConfig c;
  c.model = "gpt_tiny";
  c.batch_size = batch;
  c.seq_len = 32;
  c.strategy = *plan::parse_strategy(strategy);
  return c;
}

struct Priced {
  int asked = 0;
  StatusOr<plan::ClusterSpec> operator()(int) {
    ++asked;
    return plan::parse_cluster_spec(kSpec, "test");
  }
};

plan::Strategy layout(const ElasticLayouts& l, int nodes) {
  const auto it = l.layouts.find(nodes);
  EXPECT_NE(it, l.layouts.end()) << "no layout for " << nodes << " nodes";
  if (it == l.layouts.end()) return {};
  StatusOr<plan::Strategy> s = plan::parse_strategy(it->second);
  EXPECT_TRUE(s.ok()) << it->second;
  return s.ok() ? *s : plan::Strategy{};
}

// Plans `strategy` at batch `batch` for min_nodes..max_nodes nodes of 2 on the test spec; *asked
// counts the planner's calls for a spec.
ElasticLayouts planned(const std::string& strategy, int batch, int min_nodes, int max_nodes,
                       int* asked) {
  Priced priced;
  ElasticLayouts l =
      plan_elastic_layouts(config_for(strategy, batch), *model::load_model_spec("gpt_tiny"), 2,
                           min_nodes, max_nodes, [&](int n) { return priced(n); });
  *asked = priced.asked;
  return l;
}

std::string joined(const ElasticLayouts& l) {
  std::string s;
  for (const std::string& line : l.lines) s += line + "\n";
  return s;
}

// tp=2 fits 1 and 2 nodes of 2: it stands, dp follows the world, and the micro-batch is the
// largest world's (8 over dp=2: 4), so one node accumulates 2 micro-steps of 4. The planner is
// never asked.
TEST(ElasticLayoutsTest, TheLaunchSplitStandsWhereTheWorldAdmitsIt) {
  int asked = 0;
  const ElasticLayouts l = planned("tp=2", 8, 1, 2, &asked);
  EXPECT_EQ(asked, 0);
  ASSERT_EQ(l.layouts.size(), 2u) << joined(l);
  for (int n : {1, 2}) {
    const plan::Strategy s = layout(l, n);
    EXPECT_EQ(s.tp, 2);
    EXPECT_EQ(s.dp, n);
    EXPECT_EQ(s.mbs, 4);
    EXPECT_EQ(s.gbs, 8);
  }
  EXPECT_NE(joined(l).find("the launch's split"), std::string::npos) << joined(l);
}

// pp=4 needs 4 ranks: on one node of 2 the planner picks a layout of 2 ranks that the engine
// trains at the same global batch; the line says why and what it predicts.
TEST(ElasticLayoutsTest, AWorldTheSplitDoesNotFitIsReplanned) {
  int asked = 0;
  const ElasticLayouts l = planned("pp=4", 8, 1, 2, &asked);
  EXPECT_EQ(asked, 1);
  const plan::Strategy two = layout(l, 2);
  EXPECT_EQ(two.pp, 4);
  EXPECT_EQ(two.dp, 1);
  const plan::Strategy one = layout(l, 1);
  EXPECT_EQ(one.dp * one.tp * one.pp * one.cp, 2);
  EXPECT_EQ(one.gbs, 8);
  EXPECT_NE(joined(l).find("re-planned"), std::string::npos) << joined(l);
  EXPECT_NE(joined(l).find("s/step"), std::string::npos) << joined(l);
}

// Without a spec to price on, a world the split does not fit has no layout, and says why; the
// leader then forms only the sizes that have one.
TEST(ElasticLayoutsTest, NoSpecLeavesTheWorldWithoutALayout) {
  const TrainConfig c = config_for("pp=4", 8);
  const ElasticLayouts l = plan_elastic_layouts(
      c, *model::load_model_spec("gpt_tiny"), 2, 1, 2,
      [](int) -> StatusOr<plan::ClusterSpec> { return NotFound("no calibrated spec"); });
  EXPECT_EQ(l.layouts.count(1), 0u);
  EXPECT_EQ(l.layouts.count(2), 1u);
  EXPECT_NE(joined(l).find("no calibrated spec"), std::string::npos) << joined(l);
  elastic::NodeBounds b;
  b.min_nodes = 1;
  b.max_nodes = 2;
  EXPECT_EQ(elastic::smallest_admissible(b, 2, 8, l.layouts), 2);
  // Both nodes live: both stay; one lost: no generation of one node.
  EXPECT_EQ(elastic::next_members({0, 1}, {}, b, 2, 8, l.layouts)->size(), 2u);
  EXPECT_FALSE(elastic::next_members({0}, {}, b, 2, 8, l.layouts));
}

// A batch of 3 does not divide over tp=2's two data-parallel ranks on 2 nodes of 2: the planner
// finds a layout of 4 ranks whose data-parallel ranks do share it; with no spec there is none.
TEST(ElasticLayoutsTest, ABatchTheSplitCannotShareIsReplanned) {
  int asked = 0;
  const ElasticLayouts l = planned("tp=2", 3, 2, 2, &asked);
  const TrainConfig c = config_for("tp=2", 3);
  const model::ModelSpec spec = *model::load_model_spec("gpt_tiny");
  const plan::Strategy s = layout(l, 2);
  EXPECT_EQ(s.dp * s.tp * s.pp * s.cp, 4) << joined(l);
  EXPECT_EQ(3 % s.dp, 0) << joined(l);
  const ElasticLayouts none = plan_elastic_layouts(
      c, spec, 2, 2, 2,
      [](int) -> StatusOr<plan::ClusterSpec> { return NotFound("no calibrated spec"); });
  EXPECT_TRUE(none.layouts.empty());
  ASSERT_EQ(none.lines.size(), 1u);
  EXPECT_NE(none.lines[0].find("none"), std::string::npos) << none.lines[0];
}

// ep=4 over four nodes of one rank (deepseek_tiny's 8 experts, 2 a rank): one node lost leaves
// three ranks, which ep=4 does not fit; the split stands with its experts spread over the
// three (3, 3 and 2 a rank) rather than re-planned, and two nodes take ep=2. The planner is
// never asked.
TEST(ElasticLayoutsTest, ExpertsSpreadOverTheRanksAWorldKeeps) {
  TrainConfig c = config_for("ep=4", 12);
  c.model = "deepseek_tiny";
  Priced priced;
  const ElasticLayouts l = plan_elastic_layouts(c, *model::load_model_spec("deepseek_tiny"), 1, 2,
                                                4, [&](int n) { return priced(n); });
  EXPECT_EQ(priced.asked, 0) << joined(l);
  for (const auto& [nodes, ep] : std::vector<std::pair<int, int>>{{4, 4}, {3, 3}, {2, 2}}) {
    const plan::Strategy s = layout(l, nodes);
    EXPECT_EQ(s.dp, nodes) << joined(l);
    EXPECT_EQ(s.ep, ep) << joined(l);
    EXPECT_EQ(s.gbs, 12);
  }
  EXPECT_NE(joined(l).find("experts 3, 3, 2 a rank"), std::string::npos) << joined(l);
  // The largest world's micro-batch (12 over 4: 3) where it divides a world's share, as for
  // the launch's split: two nodes accumulate 2 of 3; three take 4 (3 does not divide 12 / 3).
  EXPECT_EQ(layout(l, 2).mbs, 3) << joined(l);
  EXPECT_EQ(layout(l, 3).mbs, 4) << joined(l);
}

// The membership record carries the generation's layout.
TEST(ElasticLayoutsTest, TheRecordCarriesTheLayout) {
  elastic::NodeRecord r;
  r.nodes = {0};
  r.nproc_per_node = 2;
  r.strategy = "dp=1,tp=2";
  StatusOr<elastic::NodeRecord> back = elastic::parse_node_record(elastic::node_record_json(r));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->strategy, "dp=1,tp=2");
  r.strategy.clear();
  EXPECT_EQ(elastic::node_record_json(r).find("strategy"), std::string::npos);
}

}  // namespace
}  // namespace cann::train
