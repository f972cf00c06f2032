// Expert parallelism inside the model, ranks as threads over shared-memory groups: every data
// rank routes its own micro-batch and the experts are sharded over the expert group, with
// counts then rows exchanged by all-to-all(v). Each rank's loss equals the one-process loss of
// its micro-batch, and the gradients, combined as the trainer's reduction does (dense tensors
// averaged over the data ranks; each expert's gradient summed by its owner over the expert
// group, then averaged over the expert groups and divided by dp/#groups), equal one process
// accumulating the same micro-batches, tensor by tensor.
//
// ep need not divide the experts (model/expert_placement.h): 8 experts over 3 ranks hold 3, 3
// and 2, and the same identity holds.
//
// Tolerance: 2e-5 of each tensor's largest gradient (summation order only; observed ~1e-7).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <mutex>

#include "comm_test_util.h"
#include "core/rng.h"
#include "core/threads.h"
#include "model/expert_placement.h"
#include "model/model.h"
#include "model/param_table.h"
#include "parallel/mesh.h"
#include "parallel/tp_comm.h"
#include "test_util.h"

namespace cann {
namespace {

const char kMoeBert[] =
    "architecture: bert\nhidden_size: 32\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
    "vocab_size: 65\nseq_length: 16\nnum_local_experts: 4\nnum_experts_per_tok: 2\n"
    "moe_layer_freq: 1\n";
const char kMoeGpt[] =
    "architecture: gpt\nhidden_size: 32\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
    "vocab_size: 64\nseq_length: 16\nnum_local_experts: 8\nnum_experts_per_tok: 2\n"
    "capacity_factor: 1.0\n";

constexpr int kB = 2, kT = 16;

void expect_ep_matches(const char* yaml, int dp, int ep) {
  set_num_threads(1);
  auto parsed = model::parse_model_spec(yaml, "test.yaml");
  ASSERT_TRUE(parsed.ok());
  const model::ModelSpec s = *parsed;
  Rng rng(17);
  std::vector<std::vector<int>> inputs(dp), targets(dp);
  for (int r = 0; r < dp; ++r)
    for (int i = 0; i < kB * kT; ++i) {
      inputs[r].push_back(static_cast<int>(rng.below(s.vocab_size)));
      int t = static_cast<int>(rng.below(s.vocab_size));
      if (s.architecture == model::Architecture::kBert && rng.uniform() < 0.6f) t = -1;
      targets[r].push_back(t);
    }
  auto single = model::Model::create(s, kB, kT);
  ASSERT_TRUE(single.ok());
  (*single)->init_params(5);
  (*single)->zero_grads();
  std::vector<double> ref_loss;
  for (int r = 0; r < dp; ++r) {
    ref_loss.push_back((*single)->forward(inputs[r].data(), targets[r].data(), kB, kT).loss);
    (*single)->backward(1.0f / dp);
  }
  const model::ParamTable full = model::build_param_table(s);
  const std::vector<float> ref((*single)->grads(), (*single)->grads() + full.total_floats());

  parallel::MeshShape shape;
  shape.dp = dp;
  shape.ep = ep;
  std::vector<float> got(full.total_floats(), 0.0f);
  std::vector<double> losses(dp);
  std::mutex mu;
  test::run_group("shm", dp, [&](int rank, comm::Group& world) {
    auto mesh = parallel::ProcessMesh::build(world, shape);
    ASSERT_TRUE(mesh.ok()) << mesh.status().message();
    parallel::GroupExpertParallelComm comm((*mesh)->ep());
    const int ep_rank = (*mesh)->coords().ep;
    auto m = model::Model::create(s, kB, kT, {}, {}, {ep_rank, ep, &comm});
    ASSERT_TRUE(m.ok()) << m.status().message();
    (*m)->init_params(5);
    (*m)->zero_grads();
    losses[rank] = (*m)->forward(inputs[rank].data(), targets[rank].data(), kB, kT).loss;
    (*m)->backward(1.0f);
    ASSERT_TRUE((*m)->tp_status().ok()) << (*m)->tp_status().message();
    std::lock_guard<std::mutex> lock(mu);
    const model::ParamTable& table = (*m)->table();
    for (const auto& t : table.tensors()) {
      const auto& whole = full.at(*full.find(t.name));
      const float* g = (*m)->grads() + t.offset;
      // Dense: the mean over data ranks. Experts: this rank's slots, summed over its expert
      // group already; the expert groups' sums add up to dp times the mean. An empty slot
      // (ep does not divide the experts) has no gradient.
      if (!t.expert) {
        for (size_t k = 0; k < t.numel; ++k) got[whole.offset + k] += g[k] / dp;
        continue;
      }
      const int slots = static_cast<int>(t.shape[0]);
      const size_t per = t.numel / slots;
      for (int j = 0; j < slots; ++j) {
        const int e = model::identity_expert(s.num_local_experts, ep, ep_rank, j);
        for (size_t k = 0; k < per; ++k) {
          const float v = g[j * per + k];
          if (e == model::kNoExpert)
            EXPECT_EQ(v, 0.0f) << t.name << " empty slot " << j;
          else
            got[whole.offset + e * per + k] += v / dp;
        }
      }
    }
  });
  const std::string what = "dp=" + std::to_string(dp) + " ep=" + std::to_string(ep);
  for (int r = 0; r < dp; ++r) EXPECT_NEAR(losses[r], ref_loss[r], 1e-5) << what;
  const double worst = test::expect_tensors_close(full, ref, got, 2e-5, what);
  std::printf("expert parallel %-10s max gradient deviation %.2e\n", what.c_str(), worst);
}

TEST(ExpertParallelTest, MatchesOneProcess) {
  expect_ep_matches(kMoeBert, 2, 2);
  expect_ep_matches(kMoeBert, 4, 2);
  expect_ep_matches(kMoeBert, 4, 4);
  expect_ep_matches(kMoeGpt, 2, 2);  // capacity 1.0: tokens are dropped
  expect_ep_matches(kMoeGpt, 4, 4);
}

TEST(ExpertParallelTest, UnevenExpertsMatchOneProcess) {
  // ep need not divide the experts: 8 over 3 ranks hold 3, 3 and 2; 4 over 3 hold 2, 1, 1;
  // 8 over 6 hold 2, 2, 1, 1, 1, 1. The empty slots get no rows and no gradient.
  expect_ep_matches(kMoeGpt, 3, 3);
  expect_ep_matches(kMoeBert, 3, 3);
  expect_ep_matches(kMoeGpt, 6, 3);
  expect_ep_matches(kMoeGpt, 6, 6);
  expect_ep_matches(kMoeGpt, 5, 5);
}

}  // namespace
}  // namespace cann
