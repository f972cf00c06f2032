// The pieces block_costs (layer_cost.h) assembles, internal to plan/: a pass accumulating the
// kernels it runs, the dimensions of one micro-batch on one device, and the two sublayers,
// attention (layer_cost_attention.cc) and the feed-forward, dense or MoE
// (layer_cost_mlp.cc). Each sublayer adds its forward and backward kernels, the kernels
// selective recomputation repeats, and the bytes it keeps for the backward pass.
#pragma once

#include "plan/layer_cost.h"

namespace cann::plan::cost {

// Accumulates one pass's kernels.
struct Pass {
  const DeviceSpec& dev;
  const DeviceSpec& linear_dev;  // the linear layers' GEMMs: dev, or dev at its fp8 peak
  PassCost cost;
  double stream_scale = 1;  // element bytes / 2: every stream below is written in bf16 bytes
  void gemm(double m, double n, double k, double batch = 1);
  // Backward of C(m,n) = A(m,k) B(k,n): dA = dC B^T is (m,n,k)->(m,k,n); dB = A^T dC is (k,n,m).
  void gemm_bwd(double m, double n, double k, double batch = 1);
  // A linear layer's GEMM (in fp8 under that precision; attention scores, the router and the
  // head stay in bf16).
  void linear(double m, double n, double k, double batch = 1);
  void linear_bwd(double m, double n, double k, double batch = 1);
  void stream(double bf16_bytes);
  // A fused attention kernel doing `flops` on sequences of `seq` queries: at the speed measured
  // for the device's kernel (fused_attention_tflops), else at `fraction` of its GEMM ceiling.
  void fused_attention(double flops, double fraction, double seq);
};

struct Dims {
  double b, s, sq, T, Tsp, h, q, kvl, d, dv, f, fm, fs, E, topk, cf, tp, ep;
  double keys;  // keys a query attends to, on average (causal, window): fused attention only
  double rot;   // rotary dimensions per query/key head (0: learned positions)
  double imbalance = 1;  // dropless routing: the busiest rank's expert rows over the mean
  double e;              // bytes per activation element
  // Stored bytes of a linear layer's input relative to bf16 (fp8: 0.5), of the attention
  // output (fp8: a 12-bit format, 0.75), and bytes per element of the dispatch all-to-all.
  double lin = 1, attn_out = 1, dispatch_e = 2;
  bool engine;  // fp32 and a spec the engine builds: the engine's buffers
  bool sp, glu, fused, qk_norm, mla, attn_dropout, hidden_dropout, dropless;
  bool op;  // torchtitan's per-operator recomputation (Recompute::kOp): `rc` holds its kernels
};

// The micro-batch's dimensions under the context's strategy, for layers whose attention
// window is `window` tokens (0: full).
Dims dims(const CostContext& c, int window);

Pass pass(const CostContext& c, const Dims& x);

struct Comm {
  double ag = 0, rs = 0, ar = 0;  // one tensor-parallel collective on `bytes`
};
Comm tp_comm(const CostContext& c, double bytes);
// Tensor-parallel traffic of one sublayer: with sp an all-gather before and a reduce-scatter
// after in forward, the reverse in backward; without sp one all-reduce after (forward) and one
// before (backward). Korthikanti et al. (2022), section 4.2.
double tp_sublayer(const Comm& t, bool sp);

// Bytes one sublayer keeps from forward to backward for one micro-batch (bf16 bytes), without
// recomputation, under selective recomputation and under the per-operator policy.
struct Stored {
  double none = 0;
  double selective = 0;
  double op = 0;
};

// Attention sublayer, its norm and residual add: forward and backward kernels, the kernels
// selective recomputation repeats (`rc`), and what it stores.
Stored attention(const CostContext& c, const Dims& x, Pass& fwd, Pass& bwd, Pass& rc);
// Dense feed-forward (GeLU or SwiGLU), or MoE (router, dispatch, routed and shared experts,
// combine), with its norm and residual add.
Stored dense_mlp(const CostContext& c, const Dims& x, Pass& fwd, Pass& bwd, Pass& rc);
Stored moe_mlp(const CostContext& c, const Dims& x, Pass& fwd, Pass& bwd, Pass& rc);

// On a device without a measured fused kernel (fused_attention_tflops): the fractions of its GEMM
// ceiling FlashAttention-2 reaches on the A100, 73% of peak in its forward pass and 63% in its
// backward (Dao 2023, section 4.1), against 85.9% for the A100's best large GEMM (Bekman 2024,
// "maximum achievable matmul FLOPS"): 0.73/0.859 and 0.63/0.859.
inline constexpr double kFusedAttentionForward = 0.73 / 0.859;
inline constexpr double kFusedAttentionBackward = 0.63 / 0.859;

}  // namespace cann::plan::cost
