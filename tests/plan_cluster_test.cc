// Cluster specs (shipped presets and parse errors) and the alpha-beta collective model, checked
// against hand-computed costs on small clusters with round numbers.
#include <gtest/gtest.h>

#include <algorithm>

#include "plan/cluster.h"
#include "plan/comm_model.h"
#include "plan/gemm_model.h"

namespace cann::plan {
namespace {

// 2 nodes x 8 devices; 100 GB/s inside a node, 10 GB/s per device between nodes; no latency.
ClusterSpec toy(IntraTopology topo = IntraTopology::kSwitch, double intra_GBps = 100) {
  ClusterSpec c;
  c.name = "toy";
  c.nodes = 2;
  c.devices_per_node = 8;
  c.intra_node.bandwidth_GBps = intra_GBps;
  c.intra_node.efficiency = 1;
  c.intra_node.topology = topo;
  c.inter_node.bandwidth_GBps = 10;
  c.inter_node.efficiency = 1;
  return c;
}

TEST(PlanClusterTest, PresetsLoadWithTheirNumbers) {
  const std::vector<std::string> names = shipped_cluster_names();
  for (const char* n : {"1024_ascend910b", "3072_a100", "16384_h100", "2048_h800"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  for (const std::string& n : names) {
    auto c = load_cluster_spec(n);
    ASSERT_TRUE(c.ok()) << n << ": " << c.status().message();
    EXPECT_GT(c->device.peak_tflops, 0) << n;
    EXPECT_GT(c->device.memory_gb, 0) << n;
    EXPECT_GT(c->device.compute_units, 0) << n;
    EXPECT_LE(c->device.gemm_efficiency, 1) << n;
    EXPECT_GT(c->inter_node.bandwidth_GBps, 0) << n;
  }
  auto ascend = load_cluster_spec("1024_ascend910b");
  ASSERT_TRUE(ascend.ok());
  EXPECT_EQ(ascend->num_devices(), 1024);
  EXPECT_EQ(ascend->intra_node.topology, IntraTopology::kFullMesh);
  EXPECT_EQ(ascend->intra_node.bandwidth_GBps, 56);
  EXPECT_EQ(ascend->inter_node.bandwidth_GBps, 25);  // 200 Gb/s RoCE per device
  EXPECT_EQ(ascend->device.memory_gb, 64);
  auto a100 = load_cluster_spec("3072_a100");
  ASSERT_TRUE(a100.ok());
  EXPECT_EQ(a100->num_devices(), 3072);
  EXPECT_EQ(a100->intra_node.bandwidth_GBps, 300);
  EXPECT_EQ(a100->device.peak_tflops, 312);
  auto h100 = load_cluster_spec("16384_h100");
  ASSERT_TRUE(h100.ok());
  EXPECT_EQ(h100->num_devices(), 16384);
  EXPECT_EQ(h100->intra_node.bandwidth_GBps, 450);
  auto h800 = load_cluster_spec("2048_h800");
  ASSERT_TRUE(h800.ok());
  EXPECT_EQ(h800->intra_node.bandwidth_GBps, 160);
  EXPECT_EQ(h800->inter_node.bandwidth_GBps, 50);
}

TEST(PlanClusterTest, UnknownPresetNamesTheAvailableOnes) {
  auto c = load_cluster_spec("4096_tpu");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().exit_code(), 2);
  EXPECT_NE(c.status().message().find("unknown cluster '4096_tpu'"), std::string::npos);
  EXPECT_NE(c.status().message().find("1024_ascend910b"), std::string::npos);
  EXPECT_NE(c.status().message().find("3072_a100"), std::string::npos);
}

TEST(PlanClusterTest, ParseErrorsNameTheKey) {
  const std::string base =
      "nodes: 2\ndevices_per_node: 8\ndevice: {peak_tflops: 100, memory_gb: 40, "
      "memory_bandwidth_GBps: 1000}\nintra_node: {bandwidth_GBps: 100}\n"
      "inter_node: {bandwidth_GBps: 10}\n";
  auto ok = parse_cluster_spec(base, "c.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->name, "c");
  EXPECT_EQ(ok->reliability.device_mtbf_hours, 50677);  // the documented default
  struct Case {
    std::string text, fragment;
  } cases[] = {
      {base + "gpus: 3\n", "key 'gpus': unknown key; hint: the keys here are"},
      {"devices_per_node: 8\ndevice: {peak_tflops: 1, memory_gb: 1, memory_bandwidth_GBps: 1}\n"
       "intra_node: {bandwidth_GBps: 1}\n",
       "key 'nodes': missing"},
      {base + "allow_cross_node_tp: perhaps\n", "expected true or false"},
      {"nodes: two\n", "key 'nodes': expected a number, got 'two'"},
      {"nodes: 2\ndevices_per_node: 8\ndevice: {peak_tflops: 100}\n",
       "key 'device.memory_gb': missing"},
      {"nodes: 2\ndevices_per_node: 8\ndevice: {peak_tflops: 1, memory_gb: 1, "
       "memory_bandwidth_GBps: 1, gemm_efficiency: 1.5}\n",
       "key 'device.gemm_efficiency': is a fraction of peak"},
      {"nodes: 2\ndevices_per_node: 8\ndevice: {peak_tflops: 1, memory_gb: 1, "
       "memory_bandwidth_GBps: 1}\nintra_node: {bandwidth_GBps: 1, topology: ring}\n",
       "unknown topology 'ring'"},
      {"nodes: 2\ndevices_per_node: 8\ndevice: {peak_tflops: 1, memory_gb: 1, "
       "memory_bandwidth_GBps: 1}\nintra_node: {bandwidth_GBps: 1}\n",
       "key 'inter_node': missing"},
      {"nodes: [2\n", "malformed YAML"},
      {"nodes: 2\ndevices_per_node: 8\ndevice: {peak_tflops: 1, memory_gb: 1, "
       "memory_bandwidth_GBps: 1, gemm_efficiency_by_min_dim: {32: 1.2}}\n",
       "key 'device.gemm_efficiency_by_min_dim': is a fraction of peak"},
      {"nodes: 2\ndevices_per_node: 8\ndevice: {peak_tflops: 1, memory_gb: 1, "
       "memory_bandwidth_GBps: 1, bf16_gemm_efficiency_by_min_dim: 0.5}\n",
       "expected {smallest dimension: fraction of peak, ...}"},
      {"nodes: 2\ndevices_per_node: 8\ndevice: {peak_tflops: 1, memory_gb: 1, "
       "memory_bandwidth_GBps: 1, gemm_tile: -1}\n",
       "key 'device.gemm_tile': must be zero or more"},
      {"nodes: 2\ndevices_per_node: 8\ndevice: {peak_tflops: 1, memory_gb: 1, "
       "memory_bandwidth_GBps: 1, huge_pages: often}\n",
       "key 'device.huge_pages': expected true or false"},
      {"nodes: 2\ndevices_per_node: 8\ndevice: {peak_tflops: 1, memory_gb: 1, "
       "memory_bandwidth_GBps: 1, huge_pages: true}\n"
       "intra_node: {bandwidth_GBps: 1}\ninter_node: {bandwidth_GBps: 1}\n",
       "key 'device.huge_pages': prices the CPU engine's fp32 device only"},
      {"nodes: 2\ndevices_per_node: 8\ndevice: {peak_tflops: 1, memory_gb: 1, "
       "memory_bandwidth_GBps: 1, bf16_gemm_efficiency_by_min_dim: {32: 0.5}}\n"
       "intra_node: {bandwidth_GBps: 1}\ninter_node: {bandwidth_GBps: 1}\n",
       "key 'device.bf16_gemm_efficiency_by_min_dim': prices the CPU engine's fp32 device only"},
  };
  for (const Case& c : cases) {
    auto r = parse_cluster_spec(c.text, "c.yaml");
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().exit_code(), 2);
    EXPECT_NE(r.status().message().find("c.yaml"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(c.fragment), std::string::npos) << c.fragment << "\n"
                                                                        << r.status().message();
  }
}

// GPUs and NPUs compute whole 128 x 128 output tiles; an fp32 device (the CPU engine's, also
// one calibrated before the key existed) none; the measured thin-GEMM table is read sorted.
TEST(PlanClusterTest, GemmTileDefaultsByPrecisionAndTheThinTableIsRead) {
  const std::string head =
      "nodes: 1\ndevices_per_node: 2\nintra_node: {bandwidth_GBps: 1}\ndevice: {peak_tflops: "
      "0.1, memory_gb: 8, memory_bandwidth_GBps: 20";
  auto gpu = parse_cluster_spec(head + "}\n", "g.yaml");
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  EXPECT_EQ(gpu->device.gemm_tile, 128);
  EXPECT_TRUE(gpu->device.gemm_efficiency_by_min_dim.empty());
  auto cpu = parse_cluster_spec(head + ", precision: fp32}\n", "c.yaml");
  ASSERT_TRUE(cpu.ok()) << cpu.status().message();
  EXPECT_EQ(cpu->device.gemm_tile, 0);
  EXPECT_FALSE(cpu->device.huge_pages);
  auto paged = parse_cluster_spec(head + ", precision: fp32, huge_pages: true}\n", "p.yaml");
  ASSERT_TRUE(paged.ok()) << paged.status().message();
  EXPECT_TRUE(paged->device.huge_pages);
  auto tiled = parse_cluster_spec(head + ", precision: fp32, gemm_tile: 64}\n", "t.yaml");
  ASSERT_TRUE(tiled.ok()) << tiled.status().message();
  EXPECT_EQ(tiled->device.gemm_tile, 64);
  auto thin = parse_cluster_spec(
      head +
          ", precision: fp32, gemm_tile: 0, gemm_efficiency_by_min_dim: {64: 0.9, 16: 0.5}, "
          "bf16_gemm_efficiency_by_min_dim: {32: 0.25}}\n",
      "t.yaml");
  ASSERT_TRUE(thin.ok()) << thin.status().message();
  const std::vector<std::pair<double, double>> want = {{16, 0.5}, {64, 0.9}};
  EXPECT_EQ(thin->device.gemm_efficiency_by_min_dim, want);
  ASSERT_EQ(thin->device.bf16_gemm_efficiency_by_min_dim.size(), 1u);
  EXPECT_EQ(thin->device.bf16_gemm_efficiency_by_min_dim[0].second, 0.25);
}

TEST(PlanClusterTest, ElementwiseKernelsGoAtTheirOwnRateWhereMeasured) {
  const std::string head =
      "nodes: 1\ndevices_per_node: 2\ndevice: {peak_tflops: 0.2, memory_gb: 8, "
      "memory_bandwidth_GBps: 40, memory_efficiency: 1.0";
  const std::string links = "}\nintra_node: {bandwidth_GBps: 8}\ninter_node: {bandwidth_GBps: 1}\n";
  auto plain = parse_cluster_spec(head + links, "c.yaml");
  auto measured = parse_cluster_spec(head + ", elementwise_GBps: 10" + links, "c.yaml");
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  ASSERT_TRUE(measured.ok()) << measured.status().message();
  EXPECT_EQ(plain->device.elementwise_GBps, 0);
  EXPECT_EQ(measured->device.elementwise_GBps, 10);
  // 1 GB: at the copy rate without the key; at the kernels' own with it, where the optimizer's
  // stream keeps the copy rate.
  EXPECT_DOUBLE_EQ(elementwise_seconds(plain->device, 1e9), 1.0 / 40);
  EXPECT_DOUBLE_EQ(elementwise_seconds(measured->device, 1e9), 1.0 / 10);
  EXPECT_DOUBLE_EQ(stream_seconds(measured->device, 1e9), 1.0 / 40);
  auto negative = parse_cluster_spec(head + ", elementwise_GBps: -1" + links, "c.yaml");
  EXPECT_FALSE(negative.ok());
}

TEST(PlanCommTest, MembersPerNodeFollowTheRankLayout) {
  const ClusterSpec c = toy();
  EXPECT_EQ(members_per_node(c, {8, 1}), 8);
  EXPECT_EQ(members_per_node(c, {4, 2}), 4);
  EXPECT_EQ(members_per_node(c, {4, 4}), 2);
  EXPECT_EQ(members_per_node(c, {4, 8}), 1);
  EXPECT_EQ(members_per_node(c, {16, 1}), 8);
  EXPECT_EQ(members_per_node(c, {2, 1, 4, 2}), 8);  // cp pairs x 4 data-parallel ranks
  EXPECT_EQ(members_per_node(c, {2, 1, 4, 8}), 2);
}

TEST(PlanCommTest, HandComputedCollectives) {
  const ClusterSpec c = toy();
  const double S = 8e8;
  // No latency: each collective costs its bandwidth term (and a launch cost, 0 here).
  const double l = c.collective_launch_us * 1e-6;
  // 8 ranks in one node: ring all-reduce 2 * 7/8 * S / 100 GB/s.
  EXPECT_NEAR(collective_seconds(c, Collective::kAllReduce, S, {8, 1}), 0.014 + l, 1e-12);
  EXPECT_NEAR(collective_seconds(c, Collective::kAllGather, S, {8, 1}), 0.007 + l, 1e-12);
  EXPECT_NEAR(collective_seconds(c, Collective::kReduceScatter, S, {8, 1}), 0.007 + l, 1e-12);
  // 16 ranks over 2 nodes: intra 7/8 * S / 100e9 = 7 ms, inter 1/2 * (S/8) / 10e9 = 5 ms,
  // twice for an all-reduce.
  EXPECT_NEAR(collective_seconds(c, Collective::kAllReduce, S, {16, 1}), 0.024 + l, 1e-12);
  // 2 ranks on different nodes: 2 * 1/2 * S / 10e9.
  EXPECT_NEAR(collective_seconds(c, Collective::kAllReduce, S, {2, 8}), 0.08 + l, 1e-12);
  // All-to-all over 16: 7/16 of S stays (7 ms at 100 GB/s), 8/16 leaves (80 ms at 10 GB/s).
  EXPECT_NEAR(collective_seconds(c, Collective::kAllToAll, 2 * S, {16, 1}), 0.08 + l, 1e-12);
  EXPECT_EQ(collective_seconds(c, Collective::kAllReduce, S, {1, 1}), 0);
  // Point to point.
  EXPECT_NEAR(p2p_seconds(c, 1e9, true), 0.1, 1e-12);
  EXPECT_NEAR(p2p_seconds(c, 1e9, false), 0.01, 1e-12);
}

TEST(PlanCommTest, LatencyTermsCountSteps) {
  ClusterSpec c = toy();
  c.intra_node.latency_us = 10;
  c.inter_node.latency_us = 100;
  c.collective_launch_us = 8.4;  // NCCL's
  const double launch = 8.4e-6;
  // Ring all-gather over 8 local ranks: the launch and 7 steps of 10 us on top of the
  // bandwidth term.
  EXPECT_NEAR(collective_seconds(c, Collective::kAllGather, 8e8, {8, 1}),
              0.007 + launch + 70e-6, 1e-12);
  // Over 2 nodes the ring has 15 steps, 1 of them between the nodes (NCCL's count).
  EXPECT_NEAR(collective_seconds(c, Collective::kAllGather, 8e8, {16, 1}),
              0.007 + 0.005 + launch + 14 * 10e-6 + 100e-6, 1e-12);
  // An all-reduce over 16 ranks on 2 nodes: a ring's 30 steps (28 local, 2 between nodes,
  // 480 us) or a tree's 2 * (7 local + 1 network) steps (340 us): the tree's.
  EXPECT_NEAR(collective_latency_seconds(c, Collective::kAllReduce, {16, 1}),
              launch + 2 * (7 * 10e-6 + 100e-6), 1e-12);
  // 256 ranks on 32 nodes: each all-gather pays 224 local and 31 network steps whatever its
  // size, so 100 of them cost 100 times that.
  c.nodes = 32;
  EXPECT_NEAR(collective_latency_seconds(c, Collective::kAllGather, {256, 1}),
              launch + 224 * 10e-6 + 31 * 100e-6, 1e-12);
  EXPECT_NEAR(p2p_seconds(c, 1e9, true), 0.1 + 100e-6, 1e-12);
}

TEST(PlanCommTest, FullMeshBandwidthGrowsWithLocalPeers) {
  // HCCS-style: 10 GB/s per peer link. Eight local ranks drive 7 links at once.
  const ClusterSpec c = toy(IntraTopology::kFullMesh, 10);
  EXPECT_NEAR(intra_bandwidth(c, 8), 70e9, 1);
  EXPECT_NEAR(intra_bandwidth(c, 2), 10e9, 1);
  // All-gather of 7e8 bytes: 7/8 * 7e8 / 70e9 over 8 ranks, 1/2 * 7e8 / 10e9 over 2.
  EXPECT_NEAR(collective_seconds(c, Collective::kAllGather, 7e8, {8, 1}), 0.00875, 1e-12);
  EXPECT_NEAR(collective_seconds(c, Collective::kAllGather, 7e8, {2, 1}), 0.035, 1e-12);
  // A point-to-point message uses one link.
  EXPECT_NEAR(p2p_seconds(c, 1e9, false), 0.1, 1e-12);
}

}  // namespace
}  // namespace cann::plan
