// Experts changing ranks under expert parallelism (`run --expert-rebalance`): the placement
// rule, the move of parameters and optimizer moments between ranks, and that a moved expert
// computes what it computed before, so a rebalanced run trains exactly as one without.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
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

TEST(ExpertPlacementTest, UnevenSpreadsGiveTheFirstRanksOneMore) {
  const int E = 8;
  // 8 experts over 3 ranks: 3, 3, 2, the last slot of rank 2 empty.
  EXPECT_EQ(model::slots_per_rank(E, 3), 3);
  EXPECT_EQ(model::identity_slots(E, 3), (model::ExpertSlots{0, 1, 2, 3, 4, 5, 6, 7, -1}));
  // 4 over 3: 2, 1, 1.
  EXPECT_EQ(model::identity_slots(4, 3), (model::ExpertSlots{0, 1, 2, -1, 3, -1}));
  // Dividing: no empty slot, the old blocks.
  EXPECT_EQ(model::identity_slots(E, 4), model::identity_slots(E));
  EXPECT_EQ(model::experts_in(model::identity_slots(E, 6)), E);
  EXPECT_TRUE(model::is_placement(model::identity_slots(E, 6), E, 6));
  EXPECT_FALSE(model::is_placement(model::identity_slots(E, 6), E, 5));
  EXPECT_FALSE(model::is_placement({0, 1, 2, 3, 4, 5, 6, 6, -1}, E, 3));
  for (int ep = 1; ep <= E; ++ep) {
    const model::ExpertSlots at = model::identity_slots(E, ep);
    const int El = model::slots_per_rank(E, ep);
    for (int r = 0; r < ep; ++r) {
      int held = 0;
      for (int j = 0; j < El; ++j) {
        EXPECT_EQ(model::identity_expert(E, ep, r, j), at[r * El + j]);
        held += at[r * El + j] != model::kNoExpert;
      }
      EXPECT_TRUE(held == E / ep || held == E / ep + 1) << ep << " ranks, rank " << r;
    }
  }
}

TEST(ExpertPlacementTest, UnevenPlacementBalancesIntoTheEmptySlots) {
  // 8 experts over 3 ranks, experts 0 and 1 hot on rank 0: one of them moves, possibly into
  // rank 2's empty slot, and the spread stays a placement. The best largest rank load is 40
  // (a hot expert and two cold ones, or the two hot ones apart).
  const std::vector<double> load = {30, 30, 5, 5, 5, 5, 5, 5};
  const model::ExpertSlots now = model::identity_slots(8, 3);
  const model::ExpertSlots to = model::balanced_slots(load, now, 3);
  EXPECT_TRUE(model::is_placement(to, 8, 3));
  const std::vector<double> r = model::rank_loads(load, to, 3);
  EXPECT_DOUBLE_EQ(*std::max_element(r.begin(), r.end()), 40.0);
  EXPECT_GT(max_over_mean(load, now, 3), max_over_mean(load, to, 3));
  EXPECT_GE(model::experts_moved(now, to, 3), 1);
}

TEST(ExpertRebalanceFlagTest, ParsesAndNamesWhatIsWrong) {
  auto ok = train::parse_expert_rebalance("every=20,cooldown=3");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->every, 20);
  EXPECT_EQ(ok->cooldown, 3);
  EXPECT_EQ(train::parse_expert_rebalance("every=5")->cooldown, 1);
  EXPECT_EQ(train::parse_expert_rebalance("every=5")->replicas, 0);
  EXPECT_EQ(train::parse_expert_rebalance("every=5,replicas=2")->replicas, 2);
  for (const char* bad : {"", "every", "every=0", "every=x", "cooldown=2", "every=5,often=2",
                          "every=5,cooldown=-1", "every=5,replicas=-1"}) {
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

// Ranks as threads over shared-memory groups, dp = ep = P: body(rank, its expert-parallel
// setting) on each.
void on_expert_group(int P, const std::function<void(int, const model::ExpertParallel&)>& body) {
  parallel::MeshShape shape;
  shape.dp = P;
  shape.ep = P;
  test::run_group("shm", P, [&](int rank, comm::Group& world) {
    auto mesh = parallel::ProcessMesh::build(world, shape);
    ASSERT_TRUE(mesh.ok()) << mesh.status().message();
    parallel::GroupExpertParallelComm comm((*mesh)->ep());
    body(rank, {(*mesh)->coords().ep, P, &comm});
  });
}

// The expert tensors of mdl's buffer `buf` in the whole model's layout, each expert where mdl
// holds it; zero elsewhere.
std::vector<float> experts_in_full(const model::ParamTable& full, const model::Model& mdl,
                                   const float* buf, const model::ExpertParallel& ep) {
  std::vector<float> out(full.total_floats(), 0.0f);
  model::ShardPlace at{0, 1, ep.rank, ep.size, mdl.expert_locator()};
  model::place_into_full(
      mdl.table(), buf, full, at, [](const model::TensorInfo& t) { return t.expert; }, out.data());
  return out;
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
  // Over ranks that do not divide the experts the empty slots are shuffled too: a rank may
  // end with more experts than it started with.
  model::ExpertSlots shuffled = model::identity_slots(8, P);
  Rng rng(3);
  for (int i = static_cast<int>(shuffled.size()) - 1; i > 0; --i)
    std::swap(shuffled[i], shuffled[rng.below(i + 1)]);
  // The expert tensors of the whole model, summed over the ranks (each holds its own experts):
  // a's gradients, b's, a's parameters, b's.
  std::mutex mu;
  std::vector<std::vector<float>> sums(4, std::vector<float>(full.total_floats(), 0.0f));
  on_expert_group(P, [&](int rank, const model::ExpertParallel& ep) {
    auto a = model::Model::create(s, kB, kT, {}, {}, ep);
    auto b = model::Model::create(s, kB, kT, {}, {}, ep);
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
    EXPECT_EQ((*b)->expert_slots(0), model::identity_slots(8, P));

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
      return experts_in_full(full, mdl, buf, ep);
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
    // The state moved with the experts: m = 2 params, v = params + 1 wherever they are; a
    // slot left empty holds zeros in every array.
    for (size_t i = 0; i < n; ++i) {
      if ((*b)->params()[i] == 0.0f && m[i] == 0.0f && v[i] == 0.0f) continue;
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

TEST(ExpertMigrationTest, MovedExpertsComputeTheSameOverRanksThatDoNotDivideThem) {
  expect_moved_experts_compute_the_same(3);
  expect_moved_experts_compute_the_same(5);
}

// Replicated experts (replicas=R): model b of each rank holds copies of experts 0 and 5 of
// layer 1 (and of expert 3 of layer 0 on a moved placement), computing them for its own tokens.
// Two micro-batches accumulate, held in two activation slots as a pipeline holds them (both
// forwards, then the backwards in reverse), and the weights change between two steps (the
// copies refresh): the losses, every rank's own gradients and the experts' gradients summed at
// their owners agree with the model without copies to float rounding (only the order of the
// additions differs).
void expect_replicated_experts_compute_the_same(int P) {
  set_num_threads(1);
  const model::ModelSpec s = moe_spec();
  constexpr int kB = 2, kT = 16;
  const model::ParamTable full = model::build_param_table(s);
  model::ExpertSlots moved = model::identity_slots(8, P);
  std::swap(moved[1], moved[6]);
  std::mutex mu;
  std::vector<std::vector<float>> sums(2, std::vector<float>(full.total_floats(), 0.0f));
  on_expert_group(P, [&](int rank, const model::ExpertParallel& ep) {
    model::PipelineStage two_slots;
    two_slots.slots = 2;
    auto a = model::Model::create(s, kB, kT, {}, two_slots, ep);
    auto b = model::Model::create(s, kB, kT, {}, two_slots, ep);
    ASSERT_TRUE(a.ok() && b.ok());
    (*a)->init_params(5);
    (*b)->init_params(5);
    for (auto* m : {&**a, &**b}) {
      const size_t n = m->num_floats();
      std::vector<float> none_m(n), none_v(n);
      ASSERT_TRUE(m->move_experts({{0, moved}}, {none_m.data(), none_v.data()}).ok());
    }
    (*b)->reserve_expert_shadows(2);
    const size_t reserved = (*b)->activation_bytes();
    EXPECT_GT(reserved, (*a)->activation_bytes());
    (*b)->set_expert_shadows(1, {5, 0});
    (*b)->set_expert_shadows(0, {3});
    EXPECT_EQ((*b)->expert_shadows(1), (std::vector<int>{0, 5}));
    Rng data(11 + rank);
    auto batch = [&](std::vector<int>* in, std::vector<int>* tg) {
      in->resize(kB * kT);
      tg->resize(kB * kT);
      for (int i = 0; i < kB * kT; ++i) {
        (*in)[i] = static_cast<int>(data.below(s.vocab_size));
        (*tg)[i] = static_cast<int>(data.below(s.vocab_size));
      }
    };
    std::vector<double> step_loss;
    for (int step = 0; step < 2; ++step) {
      if (step == 1) {
        // An update of every weight, the same on both models: b's copies are stale until told.
        for (auto* m : {&**a, &**b})
          for (size_t i = 0; i < m->num_floats(); ++i) m->params()[i] -= 0.05f * m->grads()[i];
        (*b)->expert_weights_changed();
      }
      (*a)->zero_grads();
      (*b)->zero_grads();
      for (auto* m : {&**a, &**b}) {
        Rng again(100 * step + 11 + rank);  // the same two micro-batches for both models
        std::swap(again, data);
        std::vector<double> loss;
        for (int micro = 0; micro < 2; ++micro) {
          std::vector<int> in, tg;
          batch(&in, &tg);
          m->use_slot(micro);
          loss.push_back(m->forward(in.data(), tg.data(), kB, kT).loss);
        }
        for (int micro = 1; micro >= 0; --micro) {
          m->use_slot(micro);
          m->backward(0.5f);
        }
        std::swap(again, data);
        ASSERT_TRUE(m->tp_status().ok());
        if (m == &**a) {
          step_loss = loss;
        } else {
          for (int micro = 0; micro < 2; ++micro)
            EXPECT_NEAR(step_loss[micro], loss[micro], 1e-6 * std::abs(step_loss[micro]))
                << "rank " << rank << " step " << step << " micro-batch " << micro;
        }
      }
    }
    EXPECT_EQ((*b)->activation_bytes(), reserved) << "the copies outgrew their reserved room";
    // Every rank's own (non-expert) gradients agree; the experts' are compared where they live.
    for (const model::TensorInfo& t : (*a)->table().tensors()) {
      if (t.expert) continue;
      for (size_t i = 0; i < t.numel; ++i)
        ASSERT_NEAR((*a)->grads()[t.offset + i], (*b)->grads()[t.offset + i],
                    1e-5f + 1e-4f * std::abs((*a)->grads()[t.offset + i]))
            << t.name << "[" << i << "] rank " << rank;
    }
    const std::vector<float> ga = experts_in_full(full, **a, (*a)->grads(), ep);
    const std::vector<float> gb = experts_in_full(full, **b, (*b)->grads(), ep);
    std::lock_guard<std::mutex> lock(mu);
    for (size_t i = 0; i < ga.size(); ++i) {
      sums[0][i] += ga[i];
      sums[1][i] += gb[i];
    }
  });
  double largest = 0;
  for (const float g : sums[0]) largest = std::max(largest, static_cast<double>(std::abs(g)));
  ASSERT_GT(largest, 0.0);
  for (const model::TensorInfo& t : full.tensors()) {
    if (!t.expert) continue;
    for (size_t i = 0; i < t.numel; ++i)
      ASSERT_NEAR(sums[0][t.offset + i], sums[1][t.offset + i],
                  1e-6 * largest + 1e-4 * std::abs(sums[0][t.offset + i]))
          << P << " ranks: " << t.name << "[" << i << "]";
  }
}

TEST(ExpertMigrationTest, ReplicatedExpertsComputeTheSameOverTwoAndFourRanks) {
  expect_replicated_experts_compute_the_same(2);
  expect_replicated_experts_compute_the_same(4);
}

TEST(ExpertMigrationTest, ReplicatedExpertsComputeTheSameOverThreeRanks) {
  expect_replicated_experts_compute_the_same(3);
}

// One expert with more rows than a rank's fair share: no placement can balance it, a copy on
// every rank can, and is chosen when its per-step traffic is paid for.
TEST(ExpertRebalancerTest, ReplicatesAnExpertNoPlacementCanBalance) {
  const model::ModelSpec spec = moe_spec();
  train::RunLayout layout;
  layout.strategy.dp = 2;
  layout.strategy.ep = 2;
  train::ExpertRebalance config;
  config.every = 10;
  config.cluster = test_cluster();
  std::vector<float> step(2 * 8, 100.0f);
  step[8 + 2] = 20000.0f;  // layer 1, expert 2: 95% of the rows
  const std::map<int, model::ExpertSlots> now = {{1, model::identity_slots(8)}};
  {
    train::ExpertRebalancer moves_only(config, spec, layout);
    for (int i = 0; i < 10; ++i) moves_only.add(step);
    // Moving cannot help: the rank holding expert 2 stays the busiest wherever it is.
    EXPECT_TRUE(moves_only.decide(now).layers.empty());
  }
  config.replicas = 1;
  train::ExpertRebalancer rb(config, spec, layout);
  for (int i = 0; i < 10; ++i) rb.add(step);
  const train::ExpertMove move = rb.decide(now);
  ASSERT_EQ(move.layers.size(), 1u);
  ASSERT_TRUE(move.replicate.count(1));
  EXPECT_EQ(move.replicate.at(1), std::vector<int>{2});
  EXPECT_EQ(move.layers[0].replicated, 1);
  EXPECT_GT(move.layers[0].before, 1.8);
  EXPECT_LT(move.layers[0].after, 1.05);
  EXPECT_NE(train::describe_moves(move.layers).find("1 replicated on every rank"),
            std::string::npos);
  // Packed for the other stages and back, the count travels.
  EXPECT_EQ(train::unpack_moves(train::pack_moves(move.layers, 2))[0].replicated, 1);
  // With room for more, the hot expert is still among them; once replicated, the same load
  // changes nothing (after the cooldown).
  config.replicas = 3;
  train::ExpertRebalancer more(config, spec, layout);
  for (int i = 0; i < 10; ++i) more.add(step);
  const train::ExpertMove wide = more.decide(now);
  ASSERT_TRUE(wide.replicate.count(1));
  const std::vector<int>& copies = wide.replicate.at(1);
  EXPECT_TRUE(std::find(copies.begin(), copies.end(), 2) != copies.end());
  const std::map<int, model::ExpertSlots> placed = {
      {1, wide.to.count(1) ? wide.to.at(1) : now.at(1)}};
  for (int cooled = 0; cooled < 2; ++cooled) {
    for (int i = 0; i < 10; ++i) more.add(step);
    EXPECT_TRUE(more.decide(placed, {{1, copies}}).layers.empty()) << cooled;
  }
}

}  // namespace
}  // namespace cann
