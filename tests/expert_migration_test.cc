// Experts changing ranks under expert parallelism (`run --expert-rebalance`): the placement
// rule, the move of parameters and optimizer moments between ranks, and that a moved expert
// computes what it computed before, so a rebalanced run trains exactly as one without.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <numeric>

#include "comm_test_util.h"
#include "core/rng.h"
#include "core/threads.h"
#include "model/expert_placement.h"
#include "model/model.h"
#include "model/param_table.h"
#include "parallel/mesh.h"
#include "parallel/tp_comm.h"
#include "plan/cluster.h"
#include "train/expert_rebalance.h"

namespace cann {
namespace {

double max_over_mean(const std::vector<double>& load, const model::ExpertSlots& at, int ep) {
  const std::vector<double> r = model::rank_loads(load, at, ep);
  const double mean = std::accumulate(r.begin(), r.end(), 0.0) / ep;
  return *std::max_element(r.begin(), r.end()) / mean;
}

TEST(ExpertPlacementTest, SpreadsTwoHotExpertsAndMovesOnlyWhatChangesRank) {
  // Two hot experts on rank 0 of 2: rank 0 carries 80% of the rows.
  const std::vector<double> load = {35, 35, 5, 5, 5, 5, 5, 5};
  const model::ExpertSlots now = model::identity_slots(8);
  EXPECT_DOUBLE_EQ(max_over_mean(load, now, 2), 1.6);
  const model::ExpertSlots to = model::balanced_slots(load, now, 2);
  EXPECT_DOUBLE_EQ(max_over_mean(load, to, 2), 1.0);
  // One hot expert goes to rank 1 and one cold expert comes back: two change rank.
  EXPECT_EQ(model::experts_moved(now, to, 2), 2);
  // Every expert is placed once, and those that stay keep their slot.
  std::vector<int> sorted = to;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, model::identity_slots(8));
  const std::vector<int> was = model::slot_of(now), will = model::slot_of(to);
  for (int e = 0; e < 8; ++e) {
    if (was[e] / 4 != will[e] / 4) continue;
    EXPECT_EQ(was[e], will[e]) << "expert " << e;
  }
}

TEST(ExpertPlacementTest, FourRanksAndAnEvenLoadThatStaysPut) {
  const std::vector<double> skewed = {40, 30, 2, 2, 10, 2, 2, 12};
  const model::ExpertSlots now = model::identity_slots(8);
  const model::ExpertSlots to = model::balanced_slots(skewed, now, 4);
  EXPECT_GT(max_over_mean(skewed, now, 4), 2.3);
  // Two slots per rank: the best placement puts 40 and 30 apart; 40 + 2 is then the largest.
  EXPECT_NEAR(max_over_mean(skewed, to, 4), 42.0 / 25.0, 1e-12);
  const std::vector<double> even(8, 7.0);
  const model::ExpertSlots kept = model::balanced_slots(even, to, 4);
  EXPECT_EQ(kept, to);
  EXPECT_EQ(model::experts_moved(to, kept, 4), 0);
}

TEST(ExpertRebalanceFlagTest, ParsesAndNamesWhatIsWrong) {
  auto ok = train::parse_expert_rebalance("every=20,cooldown=3");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->every, 20);
  EXPECT_EQ(ok->cooldown, 3);
  EXPECT_EQ(train::parse_expert_rebalance("every=5")->cooldown, 1);
  for (const char* bad : {"", "every", "every=0", "every=x", "cooldown=2", "every=5,often=2",
                          "every=5,cooldown=-1"}) {
    auto r = train::parse_expert_rebalance(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--expert-rebalance"), std::string::npos) << bad;
    EXPECT_NE(r.status().message().find("hint:"), std::string::npos) << bad;
  }
}

// A calibrated-looking device: 100 GFLOP/s, 10 GB/s links.
std::shared_ptr<const plan::ClusterSpec> test_cluster() {
  auto c = std::make_shared<plan::ClusterSpec>();
  c->nodes = 1;
  c->devices_per_node = 8;
  c->device.peak_tflops = 0.1;
  c->device.gemm_efficiency = 1.0;
  c->device.memory_bandwidth_GBps = 20;
  c->device.memory_efficiency = 1.0;
  c->device.compute_units = 1;
  c->intra_node.bandwidth_GBps = 10;
  c->intra_node.efficiency = 1.0;
  c->intra_node.latency_us = 20;
  return c;
}

model::ModelSpec moe_spec() {
  auto parsed = model::parse_model_spec(
      "architecture: gpt\nhidden_size: 32\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
      "vocab_size: 64\nseq_length: 16\nnum_local_experts: 8\nnum_experts_per_tok: 2\n"
      "capacity_factor: 1.0\n",
      "test.yaml");
  CANN_CHECK(parsed.ok()) << parsed.status().message();
  return *parsed;
}

TEST(ExpertRebalancerTest, MovesWhenTheSavedComputeOutweighsTheMoveAndThenCoolsDown) {
  const model::ModelSpec spec = moe_spec();
  train::RunLayout layout;
  layout.strategy.dp = 2;
  layout.strategy.ep = 2;
  train::ExpertRebalance config;
  config.every = 10;
  config.cooldown = 1;
  config.cluster = test_cluster();
  train::ExpertRebalancer rb(config, spec, layout);
  // Layer 1 (both are MoE) skewed onto experts 0 and 1, the rest even.
  std::vector<float> step(2 * 8, 100.0f);
  step[8 + 0] = step[8 + 1] = 5000.0f;
  const std::map<int, model::ExpertSlots> now = {{0, model::identity_slots(8)},
                                                 {1, model::identity_slots(8)}};
  for (int i = 0; i < 10; ++i) rb.add(step);
  EXPECT_TRUE(rb.due(10));
  train::ExpertMove move = rb.decide(now);
  ASSERT_EQ(move.to.size(), 1u);
  ASSERT_TRUE(move.to.count(1));
  ASSERT_EQ(move.layers.size(), 1u);
  const train::LayerMove& m = move.layers[0];
  EXPECT_EQ(m.layer, 1);
  EXPECT_EQ(m.experts, 2);
  EXPECT_GT(m.before, 1.8);
  EXPECT_LT(m.after, 1.05);
  EXPECT_GT(m.saved_s * config.every, m.cost_s);
  const std::string line = train::describe_moves(move.layers);
  EXPECT_NE(line.find("2 expert(s) of layer(s) 1 moved"), std::string::npos) << line;
  // Told to the other stages through floats, and back.
  const auto back = train::unpack_moves(train::pack_moves(move.layers, 2));
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].layer, 1);
  EXPECT_EQ(back[0].experts, 2);
  EXPECT_FLOAT_EQ(back[0].before, m.before);
  // The next decision keeps the placement (cooldown 1), the one after may move again.
  for (int i = 0; i < 10; ++i) rb.add(step);
  EXPECT_TRUE(rb.decide(now).to.empty());
  for (int i = 0; i < 10; ++i) rb.add(step);
  EXPECT_FALSE(rb.decide(now).to.empty());
  // A window too short to pay for the move: 20 rows a step on a slow link.
  auto slow = std::make_shared<plan::ClusterSpec>(*test_cluster());
  slow->intra_node.bandwidth_GBps = 1e-4;
  config.cluster = slow;
  train::ExpertRebalancer cheap(config, spec, layout);
  std::vector<float> few(2 * 8, 0.0f);
  few[8 + 0] = few[8 + 1] = 10.0f;
  cheap.add(few);
  EXPECT_TRUE(cheap.decide(now).to.empty());
}

// Ranks as threads over shared-memory groups, dp = ep = P: each rank builds the model twice
// from the same seed, moves the second one's experts of layer 1 to a shuffled placement (with
// two state arrays made from the parameters), and runs one forward and backward on both.
// The losses agree bit for bit, and so do the expert gradients and parameters once both models'
// are placed into the whole model's layout by where each expert lives; the state arrays moved
// with their experts.
void expect_moved_experts_compute_the_same(int P) {
  set_num_threads(1);
  const model::ModelSpec s = moe_spec();
  constexpr int kB = 2, kT = 16;
  const model::ParamTable full = model::build_param_table(s);
  model::ExpertSlots shuffled = model::identity_slots(8);
  Rng rng(3);
  for (int i = 7; i > 0; --i) std::swap(shuffled[i], shuffled[rng.below(i + 1)]);
  parallel::MeshShape shape;
  shape.dp = P;
  shape.ep = P;
  // The expert tensors of the whole model, summed over the ranks (each holds its own experts):
  // a's gradients, b's, a's parameters, b's.
  std::mutex mu;
  std::vector<std::vector<float>> sums(4, std::vector<float>(full.total_floats(), 0.0f));
  test::run_group("shm", P, [&](int rank, comm::Group& world) {
    auto mesh = parallel::ProcessMesh::build(world, shape);
    ASSERT_TRUE(mesh.ok()) << mesh.status().message();
    parallel::GroupExpertParallelComm comm((*mesh)->ep());
    const int ep_rank = (*mesh)->coords().ep;
    auto a = model::Model::create(s, kB, kT, {}, {}, {ep_rank, P, &comm});
    auto b = model::Model::create(s, kB, kT, {}, {}, {ep_rank, P, &comm});
    ASSERT_TRUE(a.ok() && b.ok());
    (*a)->init_params(5);
    (*b)->init_params(5);
    const size_t n = (*b)->num_floats();
    std::vector<float> m(n), v(n);
    for (size_t i = 0; i < n; ++i) {
      m[i] = (*b)->params()[i] * 2.0f;
      v[i] = (*b)->params()[i] + 1.0f;
    }
    ASSERT_TRUE((*b)->move_experts({{1, shuffled}}, {m.data(), v.data()}).ok());
    EXPECT_EQ((*b)->expert_slots(1), shuffled);
    EXPECT_EQ((*b)->expert_slots(0), model::identity_slots(8));

    std::vector<int> in(kB * kT), tg(kB * kT);
    Rng data(11 + rank);
    for (int i = 0; i < kB * kT; ++i) {
      in[i] = static_cast<int>(data.below(s.vocab_size));
      tg[i] = static_cast<int>(data.below(s.vocab_size));
    }
    (*a)->zero_grads();
    (*b)->zero_grads();
    const double la = (*a)->forward(in.data(), tg.data(), kB, kT).loss;
    (*a)->backward(1.0f);
    const double lb = (*b)->forward(in.data(), tg.data(), kB, kT).loss;
    (*b)->backward(1.0f);
    ASSERT_TRUE((*a)->tp_status().ok() && (*b)->tp_status().ok());
    EXPECT_EQ(la, lb) << "rank " << rank;

    // Into the whole layout, each expert where its model holds it.
    auto whole = [&](const model::Model& mdl, const float* buf) {
      std::vector<float> out(full.total_floats(), 0.0f);
      model::ShardPlace at{0, 1, ep_rank, P, mdl.expert_locator()};
      model::place_into_full(
          mdl.table(), buf, full, at, [](const model::TensorInfo& t) { return t.expert; },
          out.data());
      return out;
    };
    const std::vector<float> ga = whole(**a, (*a)->grads()), gb = whole(**b, (*b)->grads());
    const std::vector<float> pa = whole(**a, (*a)->params()), pb = whole(**b, (*b)->params());
    {
      std::lock_guard<std::mutex> lock(mu);
      for (size_t i = 0; i < ga.size(); ++i) {
        sums[0][i] += ga[i];
        sums[1][i] += gb[i];
        sums[2][i] += pa[i];
        sums[3][i] += pb[i];
      }
    }
    // The state moved with the experts: m = 2 params, v = params + 1 wherever they are.
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(m[i], (*b)->params()[i] * 2.0f) << i;
      ASSERT_EQ(v[i], (*b)->params()[i] + 1.0f) << i;
    }
  });
  EXPECT_EQ(sums[0], sums[1]) << P << " ranks: gradients";
  EXPECT_EQ(sums[2], sums[3]) << P << " ranks: parameters";
  EXPECT_NE(sums[0], std::vector<float>(full.total_floats(), 0.0f));
}

TEST(ExpertMigrationTest, MovedExpertsComputeTheSameOverTwoAndFourRanks) {
  expect_moved_experts_compute_the_same(2);
  expect_moved_experts_compute_the_same(4);
}

}  // namespace
}  // namespace cann
