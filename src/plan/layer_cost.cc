// Block costs: the kernel lists of a transformer layer, MoE layer, embedding and head, priced
// by the GEMM roofline, the streaming model and the alpha-beta collectives (see layer_cost.h).
//
// Notation (one micro-batch, one device): b = mbs, s = sequence, sq = s/cp local queries,
// T = b*sq tokens, Tsp = T/tp in the sequence-parallel regions (T without sp), q = heads/tp,
// kvl = kv heads on this device, d = head size, f = MLP width.
//
// Bytes of the elementwise kernels, per element, bf16 unless noted: layernorm forward reads x
// and writes y (4), backward reads x and dy and writes dx (6); fused scale-mask-softmax 4
// forward, 6 backward; dropout reads, writes and stores a 1-byte mask (5 both ways);
// bias-dropout-add reads x and the residual, writes y and the mask (7), backward 5; bias-GeLU
// 4 forward, 6 backward.
//
// Activation bytes follow Korthikanti et al. (2022), section 4: per layer
// s*b*h*(34 + 5*a*s/h) without parallelism. With tensor parallelism 24 of the 34 and the
// attention terms divide by t, the other 10 only with sequence parallelism:
//   attention: layernorm input 2, QKV input 2, Q K V 6/t, scores 5*a*s/(h*t) (softmax 2,
//              dropout mask 1, dropout output 2), projection input 2/t, dropout mask 1
//   MLP:       layernorm input 2, fc input 2, GeLU input 8/t, fc2 input 8/t, dropout mask 1
// Written here for any kv-head count and MLP width, these reduce to Korthikanti's 34 when
// kv = a and f = 4h (the tests check that). Selective recomputation drops the score terms;
// full recomputation keeps only the layer input (2sbh, /t with sp).
//
// fp32 devices (cann-train's engine): every byte count above that is an element size doubles
// (streams scale by e/2 with e = 4 bytes, the 1-byte masks included: the engine has no dropout,
// and its kernels' bytes are modelled, not measured); parameters and activations are the
// engine's own buffers (engine_memory.h) for gpt and bert. vit, which the engine does not
// build, keeps the formulas above with e = 4.
#include "plan/layer_cost.h"

#include <algorithm>

#include "plan/engine_memory.h"
#include "plan/gemm_model.h"

namespace cann::plan {

PassCost& PassCost::operator+=(const PassCost& o) {
  gemm_s += o.gemm_s;
  stream_s += o.stream_s;
  tp_comm_s += o.tp_comm_s;
  ep_comm_s += o.ep_comm_s;
  cp_comm_s += o.cp_comm_s;
  flops += o.flops;
  return *this;
}

namespace {

// Accumulates one pass's kernels.
struct Pass {
  const DeviceSpec& dev;
  PassCost cost;
  double stream_scale = 1;  // element bytes / 2
  void gemm(double m, double n, double k, double batch = 1) {
    cost.gemm_s += gemm_seconds(dev, m, n, k, batch);
    cost.flops += 2 * m * n * k * batch;
  }
  // Backward of C(m,n) = A(m,k) B(k,n): dA = dC B^T is (m,n,k)->(m,k,n); dB = A^T dC is (k,n,m).
  void gemm_bwd(double m, double n, double k, double batch = 1) {
    gemm(m, k, n, batch);
    gemm(k, n, m, batch);
  }
  void stream(double bytes) { cost.stream_s += stream_seconds(dev, bytes * stream_scale); }
};

struct Dims {
  double b, s, sq, T, Tsp, h, q, kvl, d, f, fm, E, topk, cf, tp, ep;
  double e;     // bytes per activation element
  bool engine;  // fp32 gpt/bert: the engine's buffers
  bool sp;
};

Dims dims(const CostContext& c) {
  const model::ModelSpec& m = *c.model;
  const Strategy& st = c.strategy;
  Dims x;
  x.b = st.mbs;
  x.s = c.seq_len > 0 ? c.seq_len : m.seq_length;
  x.sq = x.s / st.cp;
  x.T = x.b * x.sq;
  x.sp = st.sp && st.tp > 1;
  x.Tsp = x.sp ? x.T / st.tp : x.T;
  x.h = m.hidden_size;
  x.q = static_cast<double>(m.num_attention_heads) / st.tp;
  x.kvl = std::max(1.0, static_cast<double>(m.num_key_value_heads) / st.tp);
  x.d = m.head_size();
  x.f = m.intermediate_size;
  x.fm = m.moe_intermediate_size;
  x.E = std::max(1, m.num_local_experts);
  x.topk = m.num_experts_per_tok;
  x.cf = m.capacity_factor;
  x.tp = st.tp;
  x.ep = st.ep;
  const Precision p = c.cluster->device.precision;
  x.e = element_bytes(p);
  x.engine = p == Precision::kFp32 && m.architecture != model::Architecture::kVit;
  return x;
}

Pass pass(const DeviceSpec& dev, const Dims& x) {
  return Pass{dev, {}, x.e / 2};
}

// The attention core (scores, softmax, dropout, scores x V): what selective recomputation
// repeats. Scores are sq x s per head: with context parallelism each rank meets every KV block
// over the ring.
void core_fwd(Pass& p, const Dims& x) {
  const double scores = x.b * x.q * x.sq * x.s;
  p.gemm(x.sq, x.s, x.d, x.b * x.q);
  p.stream(4 * scores);
  p.stream(5 * scores);
  p.gemm(x.sq, x.d, x.s, x.b * x.q);
}

void core_bwd(Pass& p, const Dims& x) {
  const double scores = x.b * x.q * x.sq * x.s;
  p.gemm_bwd(x.sq, x.d, x.s, x.b * x.q);
  p.stream(5 * scores);
  p.stream(6 * scores);
  p.gemm_bwd(x.sq, x.s, x.d, x.b * x.q);
}

struct Comm {
  double ag = 0, rs = 0, ar = 0;  // one tensor-parallel collective on a T x h activation
};

Comm tp_comm(const CostContext& c, double bytes) {
  Comm t;
  t.ag = collective_seconds(*c.cluster, Collective::kAllGather, bytes, c.tp_group);
  t.rs = collective_seconds(*c.cluster, Collective::kReduceScatter, bytes, c.tp_group);
  t.ar = collective_seconds(*c.cluster, Collective::kAllReduce, bytes, c.tp_group);
  return t;
}

// Tensor-parallel traffic of one sublayer (attention or MLP): with sp an all-gather before and
// a reduce-scatter after in forward, the reverse in backward; without sp one all-reduce after
// (forward) and one before (backward). Korthikanti et al. (2022), section 4.2.
double tp_sublayer(const Comm& t, bool sp) {
  return sp ? t.ag + t.rs : t.ar;
}

// Attention sublayer, forward and backward, including its layernorm and bias-dropout-add.
void attention(const CostContext& c, const Dims& x, Pass& fwd, Pass& bwd, double* core_fwd_s,
               double* core_bwd_s) {
  const double qkv_n = (x.q + 2 * x.kvl) * x.d;
  fwd.stream(4 * x.Tsp * x.h);
  fwd.gemm(x.T, qkv_n, x.h);
  const double g0 = fwd.cost.gemm_s, s0 = fwd.cost.stream_s;
  core_fwd(fwd, x);
  *core_fwd_s = fwd.cost.gemm_s - g0 + fwd.cost.stream_s - s0;
  fwd.gemm(x.T, x.h, x.q * x.d);
  fwd.stream(7 * x.Tsp * x.h);

  bwd.stream(5 * x.Tsp * x.h);
  bwd.gemm_bwd(x.T, x.h, x.q * x.d);
  const double g1 = bwd.cost.gemm_s, s1 = bwd.cost.stream_s;
  core_bwd(bwd, x);
  *core_bwd_s = bwd.cost.gemm_s - g1 + bwd.cost.stream_s - s1;
  bwd.gemm_bwd(x.T, qkv_n, x.h);
  bwd.stream(6 * x.Tsp * x.h);

  const double t = tp_sublayer(tp_comm(c, x.T * x.h * x.e), x.sp);
  fwd.cost.tp_comm_s += t;
  bwd.cost.tp_comm_s += t;

  // Context parallelism as the engine runs it (Llama 3's form, model/context_parallel.cc):
  // forward all-gathers every position's K and V (kvl heads) over the cp group, backward
  // reduce-scatters their gradients. Neither hides behind compute: attention needs every key
  // before it starts, and the key gradients are complete only when it ends.
  if (c.strategy.cp > 1) {
    const double kv_bytes = 2 * x.b * x.s * x.kvl * x.d * x.e;  // gathered, per rank
    fwd.cost.cp_comm_s +=
        collective_seconds(*c.cluster, Collective::kAllGather, kv_bytes, c.cp_group);
    bwd.cost.cp_comm_s +=
        collective_seconds(*c.cluster, Collective::kReduceScatter, kv_bytes, c.cp_group);
  }
}

double attention_activation(const Dims& x, Recompute r) {
  const double qkv_n = (x.q + 2 * x.kvl) * x.d;
  const double scores = x.b * x.q * x.sq * x.s;
  double a =
      2 * x.Tsp * x.h + 2 * x.Tsp * x.h + 2 * x.T * qkv_n + 2 * x.T * x.q * x.d + x.Tsp * x.h;
  if (r == Recompute::kNone) a += 5 * scores;
  return a;
}

void dense_mlp(const CostContext& c, const Dims& x, Pass& fwd, Pass& bwd) {
  const double fl = x.f / x.tp;
  fwd.stream(4 * x.Tsp * x.h);
  fwd.gemm(x.T, fl, x.h);
  fwd.stream(4 * x.T * fl);
  fwd.gemm(x.T, x.h, fl);
  fwd.stream(7 * x.Tsp * x.h);

  bwd.stream(5 * x.Tsp * x.h);
  bwd.gemm_bwd(x.T, x.h, fl);
  bwd.stream(6 * x.T * fl);
  bwd.gemm_bwd(x.T, fl, x.h);
  bwd.stream(6 * x.Tsp * x.h);

  const double t = tp_sublayer(tp_comm(c, x.T * x.h * x.e), x.sp);
  fwd.cost.tp_comm_s += t;
  bwd.cost.tp_comm_s += t;
}

// MoE feed-forward: router on the device's tokens, permute, all-to-all to the experts' ranks,
// (with sp) all-gather of the received tokens inside the tensor group so each rank runs its
// slice of its E/ep experts on them, expert MLPs as grouped GEMMs, then the mirror image back.
// Capacity-factor padding is computed: each expert processes k*cf of its fair share (on bf16
// devices, as Megatron does; cann-train's fp32 engine computes the routed rows only).
void moe_mlp(const CostContext& c, const Dims& x, Pass& fwd, Pass& bwd) {
  // cann-train's engine (x.engine) keeps each expert whole on every tensor-parallel rank, so
  // its expert GEMMs are not split (model/param_table.cc). Without sp it runs the MoE block on
  // the full input on every rank and needs no tensor-parallel collective; with sp every rank
  // routes all T gathered tokens but computes the experts for its own Tsp only
  // (model/moe_layer.h).
  const double fl = x.engine ? x.fm : x.fm / x.tp;
  const double routed = x.engine ? x.T : x.Tsp;  // tokens this device routes
  // Megatron pads every expert to its capacity. cann-train's engine runs each expert on the
  // rows routed to it only (expert_count rows, exchanged by all-to-all-v of those counts), so
  // with the balanced routing a planner must assume it computes k rows per token, none padded.
  const double pad = x.engine ? 1.0 : x.cf;
  const double slots = x.Tsp * x.topk * pad;  // expert slots it sends
  // Expert rows it computes: Megatron's after the gather, the engine's its own tokens'.
  const double rows = (x.engine ? x.Tsp : x.T) * x.topk * pad;
  const double local_experts = x.E / x.ep;
  const double rows_per_expert = rows / local_experts;
  const double a2a =
      collective_seconds(*c.cluster, Collective::kAllToAll, slots * x.h * x.e, c.ep_group);
  const Comm t = tp_comm(c, rows * x.h * x.e);

  fwd.stream(4 * x.Tsp * x.h);
  fwd.gemm(routed, x.E, x.h);
  fwd.stream(8 * routed * x.E);
  fwd.stream(4 * slots * x.h);
  fwd.gemm(rows_per_expert, fl, x.h, local_experts);
  fwd.stream(4 * rows * fl);
  fwd.gemm(rows_per_expert, x.h, fl, local_experts);
  fwd.stream(4 * slots * x.h);
  fwd.stream(7 * x.Tsp * x.h);

  bwd.stream(5 * x.Tsp * x.h);
  bwd.stream(4 * slots * x.h);
  bwd.gemm_bwd(rows_per_expert, x.h, fl, local_experts);
  bwd.stream(6 * rows * fl);
  bwd.gemm_bwd(rows_per_expert, fl, x.h, local_experts);
  bwd.stream(4 * slots * x.h);
  bwd.gemm_bwd(routed, x.E, x.h);
  bwd.stream(8 * routed * x.E);
  bwd.stream(6 * x.Tsp * x.h);

  fwd.cost.ep_comm_s += 2 * a2a;
  bwd.cost.ep_comm_s += 2 * a2a;
  if (x.tp > 1 && !x.engine) {
    fwd.cost.tp_comm_s += tp_sublayer(t, x.sp);
    bwd.cost.tp_comm_s += tp_sublayer(t, x.sp);
  }
  if (x.engine && x.sp) {
    // The engine under sp: forward gathers the layernorm output; backward gathers it again
    // for the router, reduce-scatters the input gradient, and all-reduces the router's and
    // experts' weight gradients (each rank's cover its own tokens only).
    const Comm g = tp_comm(c, x.T * x.h * x.e);
    const double grads = (x.E * x.h + x.E / x.ep * (2 * x.h * x.fm + x.fm + x.h)) * x.e;
    fwd.cost.tp_comm_s += g.ag;
    bwd.cost.tp_comm_s += g.ag + g.rs + tp_comm(c, grads).ar;
  }
}

double mlp_activation(const Dims& x, bool moe) {
  if (!moe) return 2 * x.Tsp * x.h + 2 * x.Tsp * x.h + 4 * x.T * x.f / x.tp + x.Tsp * x.h;
  const double slots = x.Tsp * x.topk * x.cf, rows = x.T * x.topk * x.cf;
  return 2 * x.Tsp * x.h + 4 * x.Tsp * x.E + 2 * slots * x.h + 4 * rows * x.fm / x.tp + x.Tsp * x.h;
}

// The engine's buffers for the context (fp32 gpt/bert only).
struct EngineBlocks {
  EngineArena arena;
  EngineParams params;
};

// Stored and recomputed bytes of a block from its full activation, its part selective
// recomputation drops, its part full recomputation keeps and the part full recomputation
// rebuilds (the engine keeps an MoE layer's expert counts and also recomputes them).
void set_activation(BlockCost* b, Recompute r, double full, double selective_drop, double kept,
                    double rebuilt) {
  if (r == Recompute::kFull) {
    b->activation_bytes = kept;
    b->peak_extra_bytes = rebuilt;
  } else if (r == Recompute::kSelective) {
    b->activation_bytes = full - selective_drop;
    b->peak_extra_bytes = selective_drop;
  } else {
    b->activation_bytes = full;
  }
}

BlockCost layer(const CostContext& c, const Dims& x, bool moe, const EngineBlocks* eng) {
  const model::ModelSpec& m = *c.model;
  const DeviceSpec& dev = c.cluster->device;
  Pass fwd = pass(dev, x), bwd = pass(dev, x);
  double core_f = 0, core_b = 0;
  attention(c, x, fwd, bwd, &core_f, &core_b);
  if (moe) {
    moe_mlp(c, x, fwd, bwd);
  } else {
    dense_mlp(c, x, fwd, bwd);
  }
  BlockCost b;
  b.fwd = fwd.cost;
  b.bwd = bwd.cost;
  const Recompute r = c.strategy.recompute;
  if (r == Recompute::kSelective) {
    Pass rc = pass(dev, x);
    core_fwd(rc, x);
    b.recompute = rc.cost;
  } else if (r == Recompute::kFull) {
    b.recompute = b.fwd;
  }
  // Parameters: column- and row-split matrices and column biases divide by tp; row biases and
  // layernorms are replicated.
  const double h = x.h, qkv = m.qkv_size();
  b.params = (h * qkv + qkv + h * h) / x.tp + h + 4 * h;
  if (moe) {
    const double fm = x.fm;
    b.params += c.shape.router_params;
    b.expert_params = (x.E / x.ep) * ((2 * h * fm + fm) / x.tp + h);
  } else {
    const double f = x.f;
    b.params += (2 * h * f + f) / x.tp + h;
  }
  if (eng != nullptr) {
    b.params = moe ? eng->params.moe_layer : eng->params.dense_layer;
    b.expert_params = moe ? eng->params.moe_experts : 0;
    // Full recomputation keeps the output (and an MoE layer's expert counts, for the load
    // metrics) and rebuilds everything else of one layer while its backward runs.
    const EngineArena& a = eng->arena;
    const double full = moe ? a.moe_layer : a.dense_layer;
    const double kept = a.layer_output + (moe ? a.expert_counts : 0);
    set_activation(&b, r, 4 * full, 4 * a.attention_probs, 4 * kept, 4 * (full - a.layer_output));
    if (r == Recompute::kFull && moe) {
      b.peak_extra_bytes -= 4 * a.moe_routing;
      b.peak_extra_index_bytes = 4 * a.moe_routing;
    }
    return b;
  }
  const double full = attention_activation(x, Recompute::kNone) + mlp_activation(x, moe);
  if (r == Recompute::kFull) {
    b.activation_bytes = 2 * x.Tsp * h;
    b.peak_extra_bytes = full;
  } else if (r == Recompute::kSelective) {
    b.activation_bytes = attention_activation(x, r) + mlp_activation(x, moe);
    b.peak_extra_bytes = full - b.activation_bytes;
  } else {
    b.activation_bytes = full;
  }
  // Formulas in bf16 bytes; an fp32 device doubles them.
  b.activation_bytes *= x.e / 2;
  b.peak_extra_bytes *= x.e / 2;
  return b;
}

BlockCost embedding(const CostContext& c, const Dims& x, const EngineBlocks* eng) {
  const model::ModelSpec& m = *c.model;
  Pass fwd = pass(c.cluster->device, x), bwd = pass(c.cluster->device, x);
  BlockCost b;
  if (m.architecture == model::Architecture::kVit) {
    // Patch projection on the patches (not the class token), replicated over the tensor group.
    const double patches = x.b * (x.s - 1) / c.strategy.cp;
    const double in = static_cast<double>(m.num_channels) * m.patch_size * m.patch_size;
    fwd.stream(2 * patches * in);  // unfold the image into patch rows
    fwd.gemm(patches, x.h, in);
    fwd.stream(6 * x.T * x.h);   // class token, position add
    bwd.gemm(in, x.h, patches);  // weight gradient only: the image needs none
    bwd.stream(6 * x.T * x.h);
    b.params = c.shape.embedding_params;
  } else {
    // Vocab-parallel lookup: each rank gathers its vocabulary slice, then the partial rows are
    // summed over the tensor group (reduce-scatter with sp, all-reduce without).
    fwd.stream(6 * x.T * x.h);
    bwd.stream(6 * x.T * x.h);
    const Comm t = tp_comm(c, x.T * x.h * x.e);
    if (x.tp > 1) {
      fwd.cost.tp_comm_s += x.sp ? t.rs : t.ar;
      bwd.cost.tp_comm_s += x.sp ? t.ag : 0;
    }
    b.params =
        static_cast<double>(m.vocab_size) * x.h / x.tp + static_cast<double>(m.seq_length) * x.h;
  }
  b.fwd = fwd.cost;
  b.bwd = bwd.cost;
  if (eng != nullptr) {
    b.params = eng->params.embedding;
    b.activation_bytes = 4 * eng->arena.embedding;
  } else {
    b.activation_bytes = x.Tsp * x.h * x.e / 2;  // embedding dropout mask
  }
  return b;
}

BlockCost head(const CostContext& c, const Dims& x, const EngineBlocks* eng) {
  const model::ModelSpec& m = *c.model;
  Pass fwd = pass(c.cluster->device, x), bwd = pass(c.cluster->device, x);
  BlockCost b;
  fwd.stream(4 * x.Tsp * x.h);  // final layernorm
  bwd.stream(6 * x.Tsp * x.h);
  b.params = 2 * x.h;
  if (m.architecture == model::Architecture::kVit) {
    fwd.gemm(x.b, m.num_classes, x.h);  // classifier on the class token
    bwd.gemm_bwd(x.b, m.num_classes, x.h);
    b.params += c.shape.head_params;
    b.activation_bytes = 2 * x.Tsp * x.h;
  } else {
    // Vocab-parallel output layer and cross-entropy (Megatron): logits T x V/tp, fp32 softmax
    // (read bf16 logits, max, exp-sum, write fp32 probabilities: 12 bytes per logit forward,
    // 6 backward), two tiny all-reduces of the per-token max and sum.
    const double vl = static_cast<double>(m.vocab_size) / x.tp;
    const Comm t = tp_comm(c, x.T * x.h * x.e);
    fwd.gemm(x.T, vl, x.h);
    fwd.stream(12 * x.T * vl);
    bwd.stream(6 * x.T * vl);
    bwd.gemm_bwd(x.T, vl, x.h);
    if (x.tp > 1) {
      fwd.cost.tp_comm_s +=
          (x.sp ? t.ag : 0) +
          2 * collective_seconds(*c.cluster, Collective::kAllReduce, x.T * 4, c.tp_group);
      bwd.cost.tp_comm_s += x.sp ? t.rs : t.ar;
    }
    b.activation_bytes = 2 * x.Tsp * x.h + 2 * x.Tsp * x.h + 4 * x.T * vl;
  }
  b.activation_bytes *= x.e / 2;
  if (eng != nullptr) {
    b.params = eng->params.head;
    b.activation_bytes = 4 * eng->arena.head;
  }
  b.fwd = fwd.cost;
  b.bwd = bwd.cost;
  return b;
}

}  // namespace

CostContext make_cost_context(const model::ModelSpec& m, const ClusterSpec& c,
                              const ModelShape& shape, const Strategy& s, int seq_len) {
  CostContext ctx;
  ctx.model = &m;
  ctx.cluster = &c;
  ctx.shape = shape;
  ctx.strategy = s;
  ctx.tp_group = {s.tp, 1};
  ctx.cp_group = {s.cp, s.tp};
  ctx.ep_group = {s.ep, s.tp * s.cp};
  ctx.seq_len = seq_len;
  return ctx;
}

BlockCosts block_costs(const CostContext& ctx) {
  const Dims x = dims(ctx);
  const Strategy& s = ctx.strategy;
  EngineBlocks eng;
  if (x.engine) {
    eng.arena = engine_arena(*ctx.model, s.mbs, static_cast<int>(x.s), s.tp, x.sp, s.cp, s.ep);
    eng.params = engine_params(*ctx.model, s.tp, s.ep);
  }
  const EngineBlocks* e = x.engine ? &eng : nullptr;
  BlockCosts b;
  b.dense = layer(ctx, x, false, e);
  if (ctx.model->is_moe()) b.moe = layer(ctx, x, true, e);
  b.embedding = embedding(ctx, x, e);
  b.head = head(ctx, x, e);
  if (x.engine) b.scratch_bytes = 4 * eng.arena.scratch;
  return b;
}

}  // namespace cann::plan
