// The planner on today's model families: the layouts Llama 3 405B and DeepSeek-V3 were trained
// with are predicted to fit their 80 GB devices, the search puts fine-grained experts on
// expert-parallel ranks, a fused attention core keeps no s x s tensor (activations grow
// linearly with the sequence), and each family's blocks are priced as they run (SwiGLU's third
// GEMM, MLA's projections, shared experts on every token, fp8's GEMMs at the fp8 peak).
#include <gtest/gtest.h>

#include <cmath>

#include "model/flops.h"
#include "plan/plan_input.h"
#include "plan/report_text.h"
#include "plan/search.h"

namespace cann::plan {
namespace {

Prediction simulate(const std::string& model, const std::string& cluster,
                    const std::string& strategy, const PlanOverrides& o = {}) {
  auto in = load_plan_input(model, cluster, o);
  EXPECT_TRUE(in.ok()) << in.status().message();
  auto parsed = parse_strategy(strategy);
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  auto s = resolve_strategy(*parsed, in->model, in->cluster, 0);
  EXPECT_TRUE(s.ok()) << s.status().message();
  auto p = predict(*in, *s, Fidelity::kExact);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return p.ok() ? *p : Prediction{};
}

TEST(PlanFamiliesTest, Llama3_405bFitsWithItsPublishedLayout) {
  // Dubey et al. 2024, Table 4: 16,384 H100 at sequence 8192, tp 8, pp 16, dp 128, sequence
  // parallelism, a 16M-token batch (2048 sequences, micro-batch 1), optimizer state sharded
  // over the data-parallel group, no activation recomputation (section 3.3.2).
  const Prediction p = simulate("llama3_405b", "16384_h100",
                                "tp=8,pp=16,dp=128,sp=on,mbs=1,gbs=2048,zero=1,recompute=none");
  EXPECT_TRUE(p.fits) << p.memory_peak_bytes / 1073741824.0 << " GB";
  EXPECT_LE(p.memory_peak_bytes, 80 * 1073741824.0);
  // The stage that holds the most: 8 layers with 15 micro-batches in flight.
  EXPECT_GT(p.memory_peak_bytes, 60 * 1073741824.0);
}

TEST(PlanFamiliesTest, DeepseekV3FitsWithItsPublishedLayout) {
  // DeepSeek-AI 2024, section 3.2: 2048 H800, pp 16, ep 64 over 8 nodes, ZeRO-1 data
  // parallelism, no tensor parallelism; FP8 training (section 3.3) with RMSNorm and MLA
  // up-projections recomputed (section 3.2.3); sequence 4096, final batch 15360.
  PlanOverrides fp8;
  fp8.precision = "fp8";
  const Prediction p =
      simulate("deepseek_v3", "2048_h800",
               "pp=16,ep=64,dp=128,zero=1,mbs=1,gbs=15360,recompute=selective", fp8);
  EXPECT_TRUE(p.fits) << p.memory_peak_bytes / 1073741824.0 << " GB";
  // The same layout in bf16 without recomputation does not fit: the recipe is what fits it.
  const Prediction bf16 =
      simulate("deepseek_v3", "2048_h800", "pp=16,ep=64,dp=128,zero=1,mbs=1,gbs=15360");
  EXPECT_FALSE(bf16.fits);
  // fp8 runs the linear layers at twice the bf16 peak: the step is faster.
  EXPECT_LT(p.step_time_s, bf16.step_time_s);
}

TEST(PlanFamiliesTest, FineGrainedExpertsGoToExpertParallelRanks) {
  // DeepSeek-V3 on its 2048 H800, Qwen3-30B-A3B on 512 H100: the search's winner spreads the
  // experts over expert-parallel ranks (on a single node Qwen3-30B-A3B is priced faster with
  // every expert on every rank and pipeline stages instead: no all-to-all at all).
  const struct {
    const char* model;
    const char* cluster;
    int nodes;
  } cases[] = {{"deepseek_v3", "2048_h800", 0}, {"qwen3_30b_a3b", "16384_h100", 64}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.model);
    PlanOverrides o;
    o.nodes = c.nodes;
    auto in = load_plan_input(c.model, c.cluster, o);
    ASSERT_TRUE(in.ok()) << in.status().message();
    SearchOptions opt;
    opt.top_k = 3;
    auto r = search(*in, opt);
    ASSERT_TRUE(r.ok()) << r.status().message();
    ASSERT_FALSE(r->top.empty());
    EXPECT_GT(r->top[0].strategy.ep, 1) << strategy_string(r->top[0].strategy);
  }
}

TEST(PlanFamiliesTest, FusedAttentionActivationsGrowLinearlyInTheSequence) {
  auto base = load_plan_input("llama3_8b", "16384_h100", PlanOverrides{});
  ASSERT_TRUE(base.ok());
  Strategy s;
  s.gbs = 1;
  auto layer_bytes = [&](int seq, AttentionKernel kind) {
    PlanInput in = *base;
    in.model.seq_length = seq;
    in.cluster.device.attention = kind;
    return block_costs(make_cost_context(in.model, in.cluster, in.shape, s)).dense.activation_bytes;
  };
  const double f1 = layer_bytes(2048, AttentionKernel::kFused);
  const double f2 = layer_bytes(4096, AttentionKernel::kFused);
  EXPECT_NEAR(f2 / f1, 2.0, 1e-9);
  // Materialized scores grow with the square of the sequence.
  const double m1 = layer_bytes(2048, AttentionKernel::kMaterialized);
  const double m2 = layer_bytes(4096, AttentionKernel::kMaterialized);
  EXPECT_GT(m2 / m1, 2.5);
  EXPECT_GT(m1, f1);
}

TEST(PlanFamiliesTest, EachBlockIsPricedAsItRuns) {
  auto in = load_plan_input("llama3_8b", "16384_h100", PlanOverrides{});
  ASSERT_TRUE(in.ok());
  Strategy s;
  s.gbs = 1;
  const BlockCosts b = block_costs(make_cost_context(in->model, in->cluster, in->shape, s));
  const model::ModelSpec& m = in->model;
  const double T = m.seq_length, h = m.hidden_size, f = m.intermediate_size;
  // Forward matmul FLOPs of a layer: QKV (GQA), output, SwiGLU's three matrices, and the
  // causal attention core a fused kernel executes (half the square, plus the diagonal).
  const double linear = 2 * T * model::attention_matmul_params(m) + 2 * T * 3 * h * f;
  const double core = 2 * m.num_attention_heads * T * (T + 1) / 2 * 2 * m.head_size();
  EXPECT_NEAR(b.dense.fwd.flops, linear + core, 1e-9 * (linear + core));
  // The head is untied: its parameters are the head's own.
  EXPECT_NEAR(b.head.params, m.hidden_size + static_cast<double>(m.vocab_size) * h, 1);

  // DeepSeek-V3: shared experts run on every token; fp8 halves what the linear layers keep.
  auto v3 = load_plan_input("deepseek_v3", "2048_h800", PlanOverrides{});
  ASSERT_TRUE(v3.ok());
  Strategy e;
  e.ep = 8;
  e.dp = 8;
  e.gbs = 8;
  ClusterSpec fp8 = v3->cluster;
  fp8.device.precision = Precision::kFp8;
  const BlockCosts bf = block_costs(make_cost_context(v3->model, v3->cluster, v3->shape, e));
  const BlockCosts f8 = block_costs(make_cost_context(v3->model, fp8, v3->shape, e));
  EXPECT_LT(f8.moe.activation_bytes, bf.moe.activation_bytes);
  EXPECT_LT(f8.moe.fwd.gemm_s, bf.moe.fwd.gemm_s);
  EXPECT_EQ(f8.moe.fwd.flops, bf.moe.fwd.flops);
  EXPECT_GT(bf.mtp.params, 0);
}

TEST(PlanFamiliesTest, RefusalsAreOneLine) {
  PlanOverrides o;
  o.precision = "fp8";
  auto a100 = load_plan_input("llama3_8b", "3072_a100", o);
  ASSERT_FALSE(a100.ok());
  EXPECT_EQ(a100.status().exit_code(), 2);
  EXPECT_NE(a100.status().message().find("fp8"), std::string::npos);
  o.precision = "int4";
  EXPECT_FALSE(load_plan_input("llama3_8b", "16384_h100", o).ok());
  PlanOverrides a;
  a.attention = "sparse";
  auto bad = load_plan_input("llama3_8b", "16384_h100", a);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--attention"), std::string::npos);
  PlanOverrides seq;
  seq.seq_len = 4096;
  auto gpt2 = load_plan_input("gpt2_124m", "16384_h100", seq);
  ASSERT_FALSE(gpt2.ok());
  EXPECT_NE(gpt2.status().message().find("position table"), std::string::npos);
}

TEST(PlanFamiliesTest, SummaryNamesWhatThePlannerRead) {
  auto in = load_plan_input("deepseek_v3", "2048_h800", PlanOverrides{});
  ASSERT_TRUE(in.ok());
  const std::string s = model_summary(*in);
  for (const char* part :
       {"671,026,404,352 parameters", "11,610,067,968", "MLA", "256 experts", "1 shared",
        "at most 4 of 8 groups", "dropless", "sequence 4096", "attention fused", "fp8 e4m3"})
    EXPECT_NE(s.find(part), std::string::npos) << part << " in: " << s;
}

}  // namespace
}  // namespace cann::plan
