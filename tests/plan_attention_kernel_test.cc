// Fused attention priced at the speed measured for the kernel a framework runs on the device
// (device.fused_attention_tflops): the curve read from YAML, interpolated in log2 of the
// sequence and held at its ends, the kernel picked by name, and a layer's attention time that
// follows the curve while every other part of the layer stays put.
#include <gtest/gtest.h>

#include <cmath>

#include "model/spec.h"
#include "plan/cluster.h"
#include "plan/layer_cost.h"
#include "plan/model_shape.h"
#include "plan/strategy.h"

namespace cann::plan {
namespace {

std::string spec_yaml(const std::string& attention_keys) {
  return "name: t\nnodes: 1\ndevices_per_node: 8\n"
         "device: {name: gpu, peak_tflops: 1000, memory_gb: 80, memory_bandwidth_GBps: 3000, "
         "compute_units: 132, gemm_efficiency: 0.8" +
         attention_keys +
         "}\n"
         "intra_node: {bandwidth_GBps: 400, latency_us: 3}\n";
}

ClusterSpec measured(double cudnn_4k, double cudnn_16k) {
  auto c = parse_cluster_spec(
      spec_yaml(", fused_attention_kernel: cudnn, fused_attention_tflops: {cudnn: {4096: " +
                std::to_string(cudnn_4k) + ", 16384: " + std::to_string(cudnn_16k) +
                "}, flash2: {2048: 250, 8192: 300}}"),
      "t.yaml");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return *c;
}

TEST(PlanAttentionKernelTest, CurvesInterpolateInLog2OfTheSequenceAndHoldAtTheEnds) {
  ClusterSpec c = measured(400, 600);
  EXPECT_EQ(c.device.fused_kernel, "cudnn");
  EXPECT_EQ(c.device.attention, AttentionKernel::kFused);
  EXPECT_DOUBLE_EQ(fused_attention_tflops(c.device, 4096), 400);
  EXPECT_DOUBLE_EQ(fused_attention_tflops(c.device, 8192), 500);  // half way in log2
  EXPECT_DOUBLE_EQ(fused_attention_tflops(c.device, 16384), 600);
  EXPECT_DOUBLE_EQ(fused_attention_tflops(c.device, 1024), 400);   // held below
  EXPECT_DOUBLE_EQ(fused_attention_tflops(c.device, 65536), 600);  // and above
  ASSERT_TRUE(select_attention(&c.device, "flash2", "").ok());
  EXPECT_DOUBLE_EQ(fused_attention_tflops(c.device, 4096), 275);
  // A device without a measured kernel has no curve: the cost model falls back to Dao's
  // fractions of the GEMM ceiling.
  auto bare = parse_cluster_spec(spec_yaml(""), "bare.yaml");
  ASSERT_TRUE(bare.ok()) << bare.status().message();
  EXPECT_EQ(fused_attention_tflops(bare->device, 4096), 0.0);
}

TEST(PlanAttentionKernelTest, KernelsAreChosenByNameAndBadOnesRefused) {
  ClusterSpec c = measured(400, 600);
  ASSERT_TRUE(select_attention(&c.device, "materialized", "").ok());
  EXPECT_EQ(c.device.attention, AttentionKernel::kMaterialized);
  ASSERT_TRUE(select_attention(&c.device, "fused", "").ok());
  EXPECT_EQ(c.device.attention, AttentionKernel::kFused);
  EXPECT_EQ(c.device.fused_kernel, "cudnn");
  const Status bad = select_attention(&c.device, "flash3", "--attention: ");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.message().rfind("--attention: unknown attention kernel 'flash3'", 0), 0u)
      << bad.message();
  EXPECT_NE(bad.message().find("(cudnn, flash2)"), std::string::npos) << bad.message();
  // The default must be one of the measured kernels; curves must be maps of numbers.
  for (const std::string keys :
       {", fused_attention_kernel: fa3, fused_attention_tflops: {cudnn: {4096: 400}}",
        ", fused_attention_tflops: {cudnn: {4096: 400}}",
        ", fused_attention_kernel: cudnn, fused_attention_tflops: {cudnn: {4096: fast}}",
        ", fused_attention_kernel: cudnn, fused_attention_tflops: {cudnn: 400}"}) {
    auto c2 = parse_cluster_spec(spec_yaml(keys), "bad.yaml");
    ASSERT_FALSE(c2.ok()) << keys;
    EXPECT_EQ(c2.status().message().rfind("bad.yaml", 0), 0u) << c2.status().message();
    EXPECT_NE(c2.status().message().find("fused_attention"), std::string::npos)
        << c2.status().message();
  }
}

TEST(PlanAttentionKernelTest, AttentionTimeFollowsTheMeasuredSpeed) {
  // A decoder layer at sequence 4096, causal, head dim 128.
  model::ModelSpec m;
  m.name = "layer";
  m.hidden_size = 2048;
  m.num_hidden_layers = 2;
  m.num_attention_heads = 16;
  m.num_key_value_heads = 16;
  m.intermediate_size = 8192;
  m.vocab_size = 1000;
  m.seq_length = 4096;
  Strategy s;
  s.mbs = 1;
  s.gbs = 8;
  s.dp = 8;
  auto gemm_s = [&](double tflops) {
    const ClusterSpec c = measured(tflops, tflops);
    const BlockCosts b = block_costs(make_cost_context(m, c, model_shape(m), s));
    return std::pair(b.dense.fwd.gemm_s + b.dense.bwd.gemm_s,
                     b.dense.fwd.flops + b.dense.bwd.flops);
  };
  const auto [t1, f1] = gemm_s(100);
  const auto [t2, f2] = gemm_s(200);
  const auto [t4, f4] = gemm_s(400);
  EXPECT_DOUBLE_EQ(f1, f2);  // the same work, only its speed changes
  EXPECT_DOUBLE_EQ(f2, f4);
  // Only the core's time scales with 1/speed: t(100) - t(200) = F/200, t(200) - t(400) = F/400.
  EXPECT_NEAR(t1 - t2, 2 * (t2 - t4), 1e-12 * t1);
  // F is the fused core's forward and backward FLOPs: 4 * a * d * keys per query forward,
  // 2.5 times that backward; causal keys average (s + 1) / 2.
  const double a = 16, d = 128, sq = 4096, keys = (sq + 1) / 2;
  const double core = 3.5 * 4 * a * d * sq * keys;
  EXPECT_NEAR((t1 - t2) * 200e12, core, 1e-6 * core);
}

}  // namespace
}  // namespace cann::plan
