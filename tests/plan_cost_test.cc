// Cost-model pieces against hand-computed small cases: the GEMM roofline with tile and wave
// quantization, per-layer FLOPs (Narayanan et al. 2021: 24*b*s*h^2*(1 + s/6h) forward),
// activation bytes (Korthikanti et al. 2022: s*b*h*(34 + 5*a*s/h) and its tensor-parallel,
// sequence-parallel and recomputation variants), MoE capacity, ZeRO memory, goodput, and the
// parameter counts of the shipped models.
#include <gtest/gtest.h>

#include <cmath>

#include "custom_ops.h"
#include "model/flops.h"
#include "model/param_table.h"
#include "plan/gemm_model.h"
#include "plan/goodput.h"
#include "plan/layer_cost.h"
#include "plan/model_shape.h"
#include "plan/predict.h"

namespace cann::plan {
namespace {

DeviceSpec device(double tflops, double eff, int units, double bw_GBps) {
  DeviceSpec d;
  d.peak_tflops = tflops;
  d.gemm_efficiency = eff;
  d.compute_units = units;
  d.memory_bandwidth_GBps = bw_GBps;
  d.memory_efficiency = 1;
  d.memory_gb = 80;
  return d;
}

ClusterSpec one_node(int devices) {
  ClusterSpec c;
  c.name = "node";
  c.nodes = 1;
  c.devices_per_node = devices;
  c.device = device(100, 1, 0, 1e9);  // no quantization, memory never the bound
  c.intra_node.bandwidth_GBps = 100;
  c.inter_node.bandwidth_GBps = 10;
  // Korthikanti's formulas are for an attention core that keeps its scores in memory.
  c.device.attention = AttentionKernel::kMaterialized;
  return c;
}

// h = 1024, a = 16, s = 512, V = 1000: small numbers that keep the formulas readable.
model::ModelSpec gpt() {
  model::ModelSpec m;
  m.name = "small_gpt";
  m.hidden_size = 1024;
  m.num_hidden_layers = 4;
  m.num_attention_heads = 16;
  m.num_key_value_heads = 16;
  m.intermediate_size = 4096;
  m.moe_intermediate_size = 4096;
  m.vocab_size = 1000;
  m.seq_length = 512;
  // Megatron's GPT with dropout, as Korthikanti et al. count its masks.
  m.attention_dropout = 0.1;
  m.hidden_dropout = 0.1;
  return m;
}

// Data parallelism over the four devices of one_node(4), one sequence each, at ZeRO `zero`.
Strategy four_way_data_parallel(int zero) {
  Strategy s;
  s.dp = 4;
  s.gbs = 4;
  s.zero = zero;
  return s;
}

BlockCosts costs(const model::ModelSpec& m, const ClusterSpec& c, Strategy s) {
  return block_costs(make_cost_context(m, c, model_shape(m), s));
}

TEST(PlanGemmTest, TileAndWaveQuantization) {
  const DeviceSpec d = device(100, 0.8, 0, 1e9);
  // m = 2100 pays for 17 tiles of 128 rows: 2100/2176.
  EXPECT_NEAR(gemm_efficiency(d, 2100, 128, 4096), 0.8 * 2100.0 / 2176.0, 1e-12);
  // 24 x 24 = 576 tiles on 108 units: 6 waves, 576/648 useful.
  const DeviceSpec w = device(100, 0.8, 108, 1e9);
  EXPECT_NEAR(gemm_efficiency(w, 3072, 3072, 4096), 0.8 * 576.0 / 648.0, 1e-12);
  // 540 tiles fill 5 waves exactly.
  EXPECT_NEAR(gemm_efficiency(w, 128 * 27, 128 * 20, 4096), 0.8, 1e-12);
  // Time of a compute-bound GEMM: 2*m*n*k / (peak * efficiency).
  EXPECT_NEAR(gemm_seconds(d, 4096, 4096, 4096), 2.0 * 4096 * 4096 * 4096 / (100e12 * 0.8), 1e-15);
}

// A CPU's BLAS: no output tiles, the measured efficiency by the smallest dimension instead,
// piecewise linear in log2 of it and held at both ends.
TEST(PlanGemmTest, UntiledDeviceTakesItsThinGemmTable) {
  DeviceSpec d = device(0.1, 1.0, 1, 20);
  d.gemm_tile = 0;
  // Without a table every shape runs at the ceiling: no 128-row padding of 192 columns.
  EXPECT_NEAR(gemm_efficiency(d, 1024, 192, 192), 1.0, 1e-12);
  EXPECT_NEAR(gemm_efficiency(d, 128, 32, 128), 1.0, 1e-12);
  d.gemm_efficiency_by_min_dim = {{16, 0.5}, {64, 0.9}, {256, 1.0}};
  EXPECT_NEAR(gemm_efficiency(d, 128, 8, 128), 0.5, 1e-12);       // below the table
  EXPECT_NEAR(gemm_efficiency(d, 128, 128, 32), 0.7, 1e-12);      // halfway in log2(16..64)
  EXPECT_NEAR(gemm_efficiency(d, 4096, 4096, 4096), 1.0, 1e-12);  // above it
  EXPECT_NEAR(gemm_efficiency(d, 2048, 128, 1024), 0.95, 1e-12);
  // The tiled model of the same shape pays a quarter-used tile for 32 columns.
  DeviceSpec tiled = device(0.1, 1.0, 1, 20);
  EXPECT_NEAR(gemm_efficiency(tiled, 128, 32, 128), 0.25, 1e-12);
}

TEST(PlanGemmTest, ThinGemmsAreMemoryBound) {
  // Attention scores with head size 128 at s = 2048 on an A100-like device: 114 FLOP/byte,
  // below the ridge 312e12 / 2039e9 = 153, so bytes / bandwidth sets the time.
  const DeviceSpec a100 = device(312, 1, 0, 2039);
  const double bytes = 2.0 * (2048 * 128 + 128 * 2048 + 2048.0 * 2048);
  EXPECT_NEAR(gemm_seconds(a100, 2048, 2048, 128), bytes / 2039e9, 1e-15);
  EXPECT_GT(gemm_seconds(a100, 2048, 2048, 128), 2.0 * 2048 * 2048 * 128 / 312e12);
  EXPECT_NEAR(stream_seconds(a100, 2039e9), 1.0, 1e-12);
}

TEST(PlanLayerTest, FlopsMatchTheClosedForm) {
  const model::ModelSpec m = gpt();
  const ClusterSpec c = one_node(8);
  Strategy s;
  s.mbs = 2;
  const double b = 2, sq = 512, h = 1024;
  const double fwd = 24 * b * sq * h * h * (1 + sq / (6 * h));
  for (int tp : {1, 2, 4}) {
    s.tp = tp;
    s.recompute = Recompute::kNone;
    const BlockCosts bc = costs(m, c, s);
    EXPECT_NEAR(bc.dense.fwd.flops, fwd / tp, 1e-6 * fwd) << "tp=" << tp;
    EXPECT_NEAR(bc.dense.bwd.flops, 2 * fwd / tp, 1e-6 * fwd);
    EXPECT_EQ(bc.dense.recompute.flops, 0);
    s.recompute = Recompute::kFull;
    EXPECT_NEAR(costs(m, c, s).dense.recompute.flops, fwd / tp, 1e-6 * fwd);
    // Selective recomputation repeats only Q*K^T and scores*V: 4*b*s^2*h.
    s.recompute = Recompute::kSelective;
    EXPECT_NEAR(costs(m, c, s).dense.recompute.flops, 4 * b * sq * sq * h / tp, 1e-3);
  }
  // Head: 2*b*s*h*V forward, twice that backward.
  s.tp = 1;
  EXPECT_NEAR(costs(m, c, s).head.fwd.flops, 2 * b * sq * h * 1000, 1e-3);
}

TEST(PlanLayerTest, ActivationBytesFollowKorthikanti) {
  const model::ModelSpec m = gpt();
  const ClusterSpec c = one_node(8);
  const double sbh = 512.0 * 2 * 1024, as_h = 16.0 * 512 / 1024;
  Strategy s;
  s.mbs = 2;
  // No parallelism: s*b*h*(34 + 5*a*s/h).
  EXPECT_NEAR(costs(m, c, s).dense.activation_bytes, sbh * (34 + 5 * as_h), 1e-6);
  // Tensor parallel, no sp: s*b*h*(10 + 24/t + 5*a*s/(h*t)).
  s.tp = 4;
  EXPECT_NEAR(costs(m, c, s).dense.activation_bytes, sbh * (10 + 24.0 / 4 + 5 * as_h / 4), 1e-6);
  // With sp everything divides by t.
  s.sp = true;
  EXPECT_NEAR(costs(m, c, s).dense.activation_bytes, sbh * (34 + 5 * as_h) / 4, 1e-6);
  s.recompute = Recompute::kSelective;
  EXPECT_NEAR(costs(m, c, s).dense.activation_bytes, sbh * 34 / 4, 1e-6);
  s.recompute = Recompute::kFull;
  EXPECT_NEAR(costs(m, c, s).dense.activation_bytes, 2 * sbh / 4, 1e-6);
  // Full recomputation rebuilds one layer at a time: its working set is the whole layer.
  EXPECT_NEAR(costs(m, c, s).dense.peak_extra_bytes, sbh * (34 + 5 * as_h) / 4, 1e-6);
}

// torchtitan's per-operator policy on a Llama block (bias-free, GQA, rotary, SwiGLU, fused
// core): backward recomputes the even matmuls of wq, wk, wv, wo, w1, w3, w2, that is wk, wo
// and w3, and keeps the block's input and the outputs of wq, wv, the core, w1 and w2.
TEST(PlanLayerTest, PerOperatorRecomputationRepeatsEveryOtherMatmul) {
  model::ModelSpec m = gpt();
  m.attention_dropout = m.hidden_dropout = 0;
  m.num_key_value_heads = 4;
  m.intermediate_size = 2816;
  m.mlp = model::MlpKind::kSwiGlu;
  m.norm = model::NormKind::kRmsNorm;
  m.positions = model::PositionKind::kRotary;
  m.qkv_bias = m.o_bias = m.mlp_bias = false;
  ClusterSpec c = one_node(8);
  c.device.attention = AttentionKernel::kFused;
  Strategy s;
  s.mbs = 2;
  s.recompute = Recompute::kOp;
  const double T = 2 * 512, h = 1024, d = 64, f = 2816;
  for (int tp : {1, 2}) {
    s.tp = tp;
    s.sp = tp > 1;
    const double q = 16.0 / tp, kv = 4.0 / tp, fl = f / tp, Tsp = T / tp;
    const BlockCosts bc = costs(m, c, s);
    // wk (T x kv*d x h), wo (T x h x q*d), w3 (T x f x h): 2mnk each.
    EXPECT_NEAR(bc.dense.recompute.flops, 2 * T * (kv * d * h + h * q * d + fl * h), 1e-6 * T * h)
        << "tp=" << tp;
    // Kept, bf16: the block input, wq's and wv's outputs, the core's output and its fp32
    // statistics (per query and head), w1's and w2's outputs, and under sp the two
    // reduce-scatters' outputs (saved collectives).
    const double core = 2 * T * q * d + 2 * 2 * q * 512;
    const double kept = 2 * Tsp * h + 2 * T * (q + kv) * d + core + 2 * T * fl + 2 * T * h +
                        (tp > 1 ? 2 * 2 * Tsp * h : 0);
    EXPECT_NEAR(bc.dense.activation_bytes, kept, 1e-6 * kept) << "tp=" << tp;
    // The collective before each sublayer's projections runs again.
    if (tp > 1) EXPECT_GT(bc.dense.recompute.tp_comm_s, 0);
    // Less kept than without recomputation, more than Megatron-Core's selective modules
    // recompute (which repeat no matmul).
    Strategy none = s, selective = s;
    none.recompute = Recompute::kNone;
    selective.recompute = Recompute::kSelective;
    EXPECT_LT(kept, costs(m, c, none).dense.activation_bytes);
    EXPECT_GT(bc.dense.recompute.flops, costs(m, c, selective).dense.recompute.flops);
  }
}

// recompute=full:2: layers 1 and 3 of four are recomputed whole, layers 0 and 2 keep all they
// save, as torchtitan wraps every second block.
TEST(PlanLayerTest, EveryKthLayerRecomputesOnlyThoseLayers) {
  const model::ModelSpec m = gpt();
  const ClusterSpec c = one_node(8);
  Strategy s;
  s.mbs = 2;
  s.recompute = Recompute::kFull;
  const BlockCosts full = costs(m, c, s);
  s.recompute = Recompute::kNone;
  const BlockCosts none = costs(m, c, s);
  s.recompute = Recompute::kFull;
  s.recompute_every = 2;
  const BlockCosts half = costs(m, c, s);
  for (int l = 0; l < 4; ++l) {
    const BlockCost& b = layer_block(half, m, l);
    const BlockCost& want = l % 2 == 1 ? full.dense : none.dense;
    EXPECT_EQ(b.activation_bytes, want.activation_bytes) << "layer " << l;
    EXPECT_EQ(b.recompute.flops, want.recompute.flops) << "layer " << l;
  }
  // The whole model: half the layers' recomputation, memory between the two.
  double act_half = 0, act_full = 0, act_none = 0, rc_half = 0, rc_full = 0;
  for (int l = 0; l < 4; ++l) {
    act_half += layer_block(half, m, l).activation_bytes;
    act_full += layer_block(full, m, l).activation_bytes;
    act_none += layer_block(none, m, l).activation_bytes;
    rc_half += layer_block(half, m, l).recompute.flops;
    rc_full += layer_block(full, m, l).recompute.flops;
  }
  EXPECT_DOUBLE_EQ(rc_half, rc_full / 2);
  EXPECT_DOUBLE_EQ(act_half, (act_full + act_none) / 2);
}

TEST(PlanLayerTest, MoeCostsScaleWithTopKAndCapacity) {
  model::ModelSpec m = gpt();
  m.num_local_experts = 8;
  m.num_experts_per_tok = 2;
  m.capacity_factor = 1.25;
  const ClusterSpec c = one_node(8);
  Strategy s;
  s.mbs = 1;
  const BlockCosts bc = costs(m, c, s);
  const double T = 512, h = 1024, f = 4096;
  // Expert FLOPs: T*k*cf rows through h -> f -> h, plus the router T x E x h.
  const double dense_mlp = 2 * T * h * f * 2;
  const double moe_mlp = T * 2 * 1.25 * 2 * h * f * 2 + 2 * T * h * 8;
  EXPECT_NEAR(bc.moe.fwd.flops - bc.dense.fwd.flops, moe_mlp - dense_mlp, 1e-3);
  // Expert parallelism: each of ep ranks holds E/ep experts; no all-to-all when ep = 1.
  EXPECT_EQ(bc.moe.fwd.ep_comm_s, 0);
  s.ep = 4;
  ClusterSpec wide = c;
  const BlockCosts ep4 = costs(m, wide, s);
  EXPECT_NEAR(ep4.moe.expert_params, 2 * (2 * h * f + f + h), 1e-6);
  EXPECT_GT(ep4.moe.fwd.ep_comm_s, 0);
  EXPECT_NEAR(ep4.moe.fwd.flops, bc.moe.fwd.flops, 1e-3);  // same work, spread over ranks
  // Under tensor parallelism a bf16 device holds 1/tp of each of its experts (Megatron-Core's
  // expert tensor parallelism defaults to the model's tp), as its expert GEMMs are priced.
  s.tp = 2;
  const BlockCosts tp2 = costs(m, wide, s);
  EXPECT_NEAR(tp2.moe.expert_params, ep4.moe.expert_params / 2, 1e-6);
}

// A user activation that needs whole rows under tp (model/custom_op.h) costs the gathers the
// engine makes for it: one all-gather of the hidden rows in forward, two in backward; an
// elementwise one costs nothing more than GeLU.
TEST(PlanLayerTest, UserActivationsOnWholeRowsPayTheirGathers) {
  test::register_test_activations();
  const ClusterSpec c = one_node(8);
  Strategy s;
  s.tp = 2;
  s.dp = 4;
  const model::ModelSpec plain = gpt();
  model::ModelSpec full_row = plain, elementwise = plain;
  full_row.custom_activation = "rms_silu";
  elementwise.custom_activation = "squared_relu";
  const BlockCosts base = costs(plain, c, s), rows = costs(full_row, c, s),
                   elem = costs(elementwise, c, s);
  EXPECT_DOUBLE_EQ(elem.dense.fwd.tp_comm_s, base.dense.fwd.tp_comm_s);
  EXPECT_GT(rows.dense.fwd.tp_comm_s, base.dense.fwd.tp_comm_s);
  EXPECT_NEAR(rows.dense.bwd.tp_comm_s - base.dense.bwd.tp_comm_s,
              2 * (rows.dense.fwd.tp_comm_s - base.dense.fwd.tp_comm_s), 1e-12);
  s.tp = 1;
  s.dp = 8;
  EXPECT_DOUBLE_EQ(costs(full_row, c, s).dense.fwd.tp_comm_s,
                   costs(plain, c, s).dense.fwd.tp_comm_s);
}

TEST(PlanMemoryTest, ZeroStagesShardStateAsStated) {
  const model::ModelSpec m = gpt();
  ClusterSpec c = one_node(4);
  auto in = make_plan_input(m, c, 0);
  ASSERT_TRUE(in.ok());
  const double P = static_cast<double>(model::build_param_table(m).num_parameters());
  Strategy s = four_way_data_parallel(0);
  const double expected[4][3] = {
      {2 * P, 4 * P, 12 * P},          // bf16 weights, fp32 grads, fp32 master + Adam m, v
      {2 * P, 4 * P, 12 * P / 4},      // ZeRO-1 shards the optimizer state
      {2 * P, 4 * P / 4, 12 * P / 4},  // ZeRO-2 also the gradients
      {2 * P / 4, 4 * P / 4, 12 * P / 4}};
  for (int z = 0; z < 4; ++z) {
    s.zero = z;
    auto p = predict(*in, s, Fidelity::kExact);
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_NEAR(p->stages[0].weights_bytes, expected[z][0], 1) << "zero " << z;
    EXPECT_NEAR(p->stages[0].grads_bytes, expected[z][1], 1) << "zero " << z;
    EXPECT_NEAR(p->stages[0].optimizer_bytes, expected[z][2], 1) << "zero " << z;
  }
}

// An optimizer that keeps its state in bf16 (Apex's DistributedFusedAdam with dtype and
// grad_sync_dtype bf16): bf16 gradients, and a bf16 master copy and moments, 2 + 2 + 6 bytes per
// parameter; its step streams 20 bytes per owned parameter instead of 38.
TEST(PlanMemoryTest, Bf16OptimizerStateHalvesGradientsAndState) {
  const model::ModelSpec m = gpt();
  auto in = make_plan_input(m, one_node(4), 0);
  ASSERT_TRUE(in.ok());
  const double P = static_cast<double>(model::build_param_table(m).num_parameters());
  const Strategy s = four_way_data_parallel(1);
  auto fp32_state = predict(*in, s, Fidelity::kExact);
  in->bf16_optimizer_state = true;
  auto bf16_state = predict(*in, s, Fidelity::kExact);
  ASSERT_TRUE(fp32_state.ok() && bf16_state.ok());
  const StageReport& a = fp32_state->stages[0];
  const StageReport& b = bf16_state->stages[0];
  EXPECT_NEAR(b.weights_bytes, 2 * P, 1);
  EXPECT_NEAR(b.grads_bytes, 2 * P, 1);
  EXPECT_NEAR(b.optimizer_bytes, 6 * P / 4, 1);
  EXPECT_NEAR(b.optimizer_s / a.optimizer_s, 20.0 / 38.0, 1e-9);
  EXPECT_LT(b.dp_comm_s, a.dp_comm_s);  // the gradients travel in bf16
}

// ZeRO-3 keeps the gathered bf16 weights of the layer in use and the prefetched one; gathering
// tensor by tensor (DeepSpeed's stage 3 of 2021), of the tensor in use and the next: twice the
// largest tensor instead of twice a layer.
TEST(PlanMemoryTest, Zero3GathersWholeLayersOrSingleTensors) {
  const model::ModelSpec m = gpt();
  auto in = make_plan_input(m, one_node(4), 0);
  ASSERT_TRUE(in.ok());
  const model::ParamTable table = model::build_param_table(m);
  double layer = 0, largest = 0;
  for (const model::TensorInfo& t : table.tensors()) {
    if (t.layer == 0) layer += static_cast<double>(t.numel);
    largest = std::max(largest, static_cast<double>(t.numel));
  }
  ASSERT_LT(largest, layer);
  const Strategy s = four_way_data_parallel(3);
  auto by_layer = predict(*in, s, Fidelity::kExact);
  in->zero3_per_tensor = true;
  auto by_tensor = predict(*in, s, Fidelity::kExact);
  ASSERT_TRUE(by_layer.ok() && by_tensor.ok());
  EXPECT_NEAR(by_layer->stages[0].transient_bytes - by_tensor->stages[0].transient_bytes,
              2 * 2 * (layer - largest), 1);
}

TEST(PlanGoodputTest, DalyWorkedExample) {
  GoodputInput in;
  in.devices = 1024;
  in.device_mtbf_hours = 50677;
  in.checkpoint_bytes_per_node = 60e9;
  in.storage_GBps_per_node = 1;  // 60 s per checkpoint
  in.restart_s = 600;
  const Goodput g = goodput(in);
  EXPECT_NEAR(g.job_mtbf_s, 50677 * 3600.0 / 1024, 1e-6);
  EXPECT_NEAR(g.checkpoint_s, 60, 1e-9);
  EXPECT_NEAR(g.recovery_s, 660, 1e-9);
  EXPECT_NEAR(g.interval_s, std::sqrt(2 * 60 * g.job_mtbf_s) - 60, 1e-6);
  EXPECT_NEAR(g.ratio, 0.9707, 1e-4);
  // Intervals round up to whole steps.
  in.step_time_s = 1000;
  EXPECT_EQ(goodput(in).interval_s, 5000);
  // More devices fail more often: goodput falls.
  in.devices = 16384;
  EXPECT_LT(goodput(in).ratio, g.ratio);
}

TEST(PlanShapeTest, ShippedModelsHaveTheirDocumentedSize) {
  struct Row {
    const char* name;
    double params;  // as documented in configs/models/<name>.yaml
    double tolerance;
  } rows[] = {{"moe_bert", 1.035e12, 0.005e12}, {"gpt_175b", 174.6e9, 0.1e9},
              {"gpt_1t", 1.008e12, 0.001e12},   {"llama3_8b", 8030261248, 0},
              {"llama3_70b", 70553706496, 0},   {"llama3_405b", 405853388800, 0},
              {"mixtral_8x7b", 46702792704, 0}, {"qwen3_30b_a3b", 30532122624, 0},
              {"deepseek_v3", 671026404352, 0}, {"vit_g", 1012611432, 0}};
  for (const Row& r : rows) {
    auto m = model::load_model_spec(r.name);
    ASSERT_TRUE(m.ok()) << r.name << ": " << m.status().message();
    const ModelShape s = model_shape(*m);
    EXPECT_NEAR(s.total_params, r.params, r.tolerance) << r.name;
    if (m->architecture != model::Architecture::kVit) {
      // The planner's per-block counts add up to the trainer's ParamTable.
      const double table = static_cast<double>(model::build_param_table(*m).num_parameters());
      EXPECT_EQ(s.total_params, table) << r.name;
      const double L = m->num_hidden_layers, moe = m->num_moe_layers();
      const double blocks =
          L * (s.attention_params + s.norm_params) + (L - moe) * s.dense_mlp_params +
          moe *
              (m->num_local_experts * s.expert_params + s.router_params + s.shared_expert_params) +
          s.embedding_params + s.final_norm_params + s.head_params;
      EXPECT_NEAR(blocks, table, 0.5) << r.name;
      if (m->num_nextn_predict_layers == 0) {
        EXPECT_EQ(s.flops_per_token, model::train_flops_per_token(*m, m->seq_length));
      }
    }
  }
  // moe_bert: 128 experts, about a trillion parameters, top-2 of them active per token.
  auto moe = model::load_model_spec("moe_bert");
  ASSERT_TRUE(moe.ok());
  EXPECT_EQ(moe->num_local_experts, 128);
  EXPECT_EQ(moe->architecture, model::Architecture::kBert);
  // vit_g without its 1000-class head is the paper's 1011M.
  auto vit = model::load_model_spec("vit_g");
  ASSERT_TRUE(vit.ok());
  const ModelShape vs = model_shape(*vit);
  EXPECT_NEAR((vs.total_params - vs.head_params) / 1e6, 1011, 0.5);
  EXPECT_EQ(vit->seq_length, 257);
}

}  // namespace
}  // namespace cann::plan
