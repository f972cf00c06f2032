// The planner against published measurements: Korthikanti et al. (2022), "Reducing Activation
// Recomputation in Large Transformer Models", Table 5: iteration time of GPT models on A100
// 80GB (NVIDIA Selene), sequence 2048, vocabulary 51200, with full recomputation and with
// selective recomputation + sequence parallelism. Configurations from their Table 3 (micro-
// batch 4 for 22B, 1 otherwise; one data-parallel replica).
//
// Nothing here is fitted: the cluster is the shipped 3072_a100 preset (cut down to the GPUs
// each row used), whose constants come from datasheets and independent measurements
// (configs/clusters/3072_a100.yaml); the cost model's byte counts and formulas are derived in
// src/plan. The acceptance bound is 15% per row.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "plan/predict.h"

namespace cann::plan {
namespace {

struct Row {
  const char* model;
  int hidden, layers, heads, tp, pp, gpus, batch, micro_batch;
  double full_s, selective_sp_s;  // published iteration time
};

// Korthikanti et al. 2022, Table 5 (and Table 3 for the shapes).
const Row kTable5[] = {
    {"22B", 6144, 48, 64, 8, 1, 8, 4, 4, 1.42, 1.10},
    {"175B", 12288, 96, 96, 8, 8, 64, 64, 1, 18.13, 13.75},
    {"530B", 20480, 105, 128, 8, 35, 280, 280, 1, 49.05, 37.83},
    {"1T", 25600, 128, 160, 8, 64, 512, 512, 1, 94.42, 71.49},
};

model::ModelSpec gpt(const Row& r) {
  model::ModelSpec m;
  m.name = r.model;
  m.architecture = model::Architecture::kGpt;
  m.hidden_size = r.hidden;
  m.num_hidden_layers = r.layers;
  m.num_attention_heads = r.heads;
  m.num_key_value_heads = r.heads;
  m.intermediate_size = 4 * r.hidden;
  m.moe_intermediate_size = 4 * r.hidden;
  m.vocab_size = 51200;
  m.seq_length = 2048;
  // Megatron-LM's GPT as these runs trained it: dropout 0.1 in attention and on the residuals.
  m.attention_dropout = 0.1;
  m.hidden_dropout = 0.1;
  return m;
}

// The 2022 runs kept the attention scores in memory (Megatron's fused softmax kernel, before
// FlashAttention): the materialized core.
ClusterSpec selene(int gpus) {
  auto preset = load_cluster_spec("3072_a100");
  EXPECT_TRUE(preset.ok());
  ClusterSpec c = *preset;
  c.nodes = gpus / c.devices_per_node;
  c.device.attention = AttentionKernel::kMaterialized;
  return c;
}

double predicted(const Row& r, bool selective_sp) {
  auto in = make_plan_input(gpt(r), selene(r.gpus), 0);
  EXPECT_TRUE(in.ok());
  Strategy s;
  s.tp = r.tp;
  s.pp = r.pp;
  s.dp = r.gpus / (r.tp * r.pp);
  s.mbs = r.micro_batch;
  s.gbs = r.batch;
  s.sp = selective_sp;
  s.recompute = selective_sp ? Recompute::kSelective : Recompute::kFull;
  auto p = predict(*in, s, Fidelity::kExact);
  EXPECT_TRUE(p.ok()) << p.status().message();
  if (!p.ok()) return 0;
  EXPECT_TRUE(p->fits) << r.model << " needs " << p->memory_peak_bytes / 1073741824.0 << " GB";
  return p->step_time_s;
}

TEST(PlanValidationTest, Korthikanti2022Table5WithinFifteenPercent) {
  std::printf("%-5s %-22s %10s %10s %8s\n", "model", "recomputation", "published", "predicted",
              "error");
  double worst = 0;
  for (const Row& r : kTable5) {
    for (bool sel : {false, true}) {
      const double published = sel ? r.selective_sp_s : r.full_s;
      const double p = predicted(r, sel);
      const double err = p / published - 1;
      worst = std::max(worst, std::fabs(err));
      std::printf("%-5s %-22s %9.2fs %9.2fs %+7.1f%%\n", r.model,
                  sel ? "selective + seq. par." : "full", published, p, 100 * err);
      EXPECT_LT(std::fabs(err), 0.15) << r.model << (sel ? " selective+sp" : " full");
    }
  }
  std::printf("worst error %.1f%%\n", 100 * worst);
}

TEST(PlanValidationTest, RecomputationSavingsHaveThePublishedDirection) {
  // Selective + sp beats full recomputation on every row, as published (22-29% faster), and
  // the predicted saving is within 10 points of the published one.
  for (const Row& r : kTable5) {
    const double full = predicted(r, false), sel = predicted(r, true);
    const double published = 1 - r.selective_sp_s / r.full_s, ours = 1 - sel / full;
    EXPECT_GT(ours, 0) << r.model;
    EXPECT_NEAR(ours, published, 0.10) << r.model;
  }
}

TEST(PlanValidationTest, FastPricingAgreesWithTheSimulation) {
  // The search ranks with the closed-form pipeline; on these rows it must agree with the
  // event simulation to within 2%.
  for (const Row& r : kTable5) {
    auto in = make_plan_input(gpt(r), selene(r.gpus), 0);
    ASSERT_TRUE(in.ok());
    Strategy s;
    s.tp = r.tp, s.pp = r.pp, s.dp = r.gpus / (r.tp * r.pp), s.mbs = r.micro_batch;
    s.gbs = r.batch, s.sp = true, s.recompute = Recompute::kSelective;
    auto fast = predict(*in, s, Fidelity::kFast);
    auto exact = predict(*in, s, Fidelity::kExact);
    ASSERT_TRUE(fast.ok() && exact.ok());
    EXPECT_NEAR(fast->step_time_s / exact->step_time_s, 1.0, 0.02) << r.model;
  }
}

}  // namespace
}  // namespace cann::plan
