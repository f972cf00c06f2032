// Block costs: a layer (attention and feed-forward sublayers, layer_cost_attention.cc and
// layer_cost_mlp.cc), the embedding, the head and the multi-token prediction modules, priced by
// the GEMM roofline, the streaming model and the alpha-beta collectives (see layer_cost.h).
//
// Activation bytes follow Korthikanti et al. (2022), section 4, kernel by kernel for the
// block the spec describes (the sublayers' files list what each keeps). Selective
// recomputation drops what the sublayers name; full recomputation keeps only the layer input
// (2*Tsp*h) and rebuilds the rest while the layer's backward runs.
//
// fp32 devices running cann-train's engine (an fp32 cluster and a spec the engine builds: gpt,
// bert and the families' dense and MoE decoders): every byte count that is an element size
// doubles (streams scale by e/2 with e = 4 bytes; the engine has no dropout, and its kernels'
// bytes are modelled, not measured); parameters and activations are the engine's own buffers
// (engine_memory.h). Other specs on fp32 devices keep the formulas with e = 4.
#include "plan/layer_cost.h"

#include <algorithm>
#include <cmath>

#include "model/engine_support.h"
#include "plan/engine_memory.h"
#include "plan/gemm_model.h"
#include "plan/layer_cost_parts.h"

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

namespace cost {

namespace {

// `batch` GEMMs (m x k) * (k x n) on device d, forward or (backward) the two GEMMs of its
// input and weight gradients.
void add_gemm(PassCost& cost, const DeviceSpec& d, double m, double n, double k, double batch,
              bool backward) {
  const double shapes[2][3] = {{m, k, n}, {k, n, m}};
  for (const auto& g : shapes) {
    const double gm = backward ? g[0] : m, gn = backward ? g[1] : n, gk = backward ? g[2] : k;
    cost.gemm_s += gemm_seconds(d, gm, gn, gk, batch);
    cost.flops += 2 * gm * gn * gk * batch;
    if (!backward) return;
  }
}

}  // namespace

void Pass::gemm(double m, double n, double k, double batch) {
  add_gemm(cost, dev, m, n, k, batch, false);
}

void Pass::gemm_bwd(double m, double n, double k, double batch) {
  add_gemm(cost, dev, m, n, k, batch, true);
}

void Pass::linear(double m, double n, double k, double batch) {
  add_gemm(cost, linear_dev, m, n, k, batch, false);
}

void Pass::linear_bwd(double m, double n, double k, double batch) {
  add_gemm(cost, linear_dev, m, n, k, batch, true);
}

void Pass::stream(double bf16_bytes) {
  cost.stream_s += elementwise_seconds(dev, bf16_bytes * stream_scale);
}

void Pass::fused_attention(double flops, double fraction, double seq) {
  const double measured = fused_attention_tflops(dev, seq);
  cost.gemm_s += measured > 0
                     ? flops / (measured * 1e12)
                     : flops / (dev.peak_tflops * 1e12 * dev.gemm_efficiency * fraction);
  cost.flops += flops;
}

Pass pass(const CostContext& c, const Dims& x) {
  return Pass{c.cluster->device, c.linear_device, {}, x.e / 2};
}

Comm tp_comm(const CostContext& c, double bytes) {
  Comm t;
  t.ag = collective_seconds(*c.cluster, Collective::kAllGather, bytes, c.tp_group);
  t.rs = collective_seconds(*c.cluster, Collective::kReduceScatter, bytes, c.tp_group);
  t.ar = collective_seconds(*c.cluster, Collective::kAllReduce, bytes, c.tp_group);
  return t;
}

double tp_sublayer(const Comm& t, bool sp) {
  return sp ? t.ag + t.rs : t.ar;
}

Dims dims(const CostContext& c, int window) {
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
  x.dv = x.d;
  x.f = m.intermediate_size;
  x.fm = m.moe_intermediate_size;
  x.fs = m.shared_expert_intermediate_size;
  x.E = std::max(1, m.num_local_experts);
  x.topk = m.num_experts_per_tok;
  x.cf = m.capacity_factor;
  x.tp = st.tp;
  x.ep = st.ep;
  const Precision p = c.cluster->device.precision;
  x.e = element_bytes(p);
  x.dispatch_e = x.e;
  if (p == Precision::kFp8) {
    x.lin = 0.5;
    x.attn_out = 0.75;
    x.dispatch_e = 1;
  }
  x.engine = c.engine;
  x.glu = m.mlp == model::MlpKind::kSwiGlu;
  x.fused = !x.engine && c.cluster->device.attention == AttentionKernel::kFused;
  x.qk_norm = m.qk_norm;
  x.mla = m.mla_enabled;
  x.op = st.recompute == Recompute::kOp;
  x.attn_dropout = m.attention_dropout > 0;
  x.hidden_dropout = m.hidden_dropout > 0;
  x.dropless = m.is_moe() && m.routing == model::MoeRouting::kDropless;
  x.rot = m.positions == model::PositionKind::kRotary && !x.mla
              ? m.head_size() * m.rope.partial_rotary_factor
              : 0;
  // Keys per query a fused kernel visits: all of them in an encoder; in a decoder query i
  // visits min(i + 1, w) of them (w the window, or the sequence).
  const double w = window > 0 ? std::min<double>(window, x.s) : x.s;
  x.keys = m.causal() ? (w * (w + 1) / 2 + (x.s - w) * w) / x.s : w;
  if (x.dropless && !x.engine && st.ep > 1) {
    const double mu = x.T * x.topk;
    x.imbalance = 1 + std::sqrt(2 * std::log(x.ep) * (1 - 1 / x.ep) / mu);
  }
  return x;
}

}  // namespace cost

namespace {

using cost::Dims;
using cost::Pass;

// The engine's buffers for the context (fp32, specs the engine builds only).
struct EngineBlocks {
  EngineArena arena;
  EngineParams params;
};

// Stored and recomputed bytes of an engine block from its full activation, its part selective
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
  Pass fwd = cost::pass(c, x), bwd = cost::pass(c, x), rc = cost::pass(c, x);
  const cost::Stored a = cost::attention(c, x, fwd, bwd, rc);
  const cost::Stored f =
      moe ? cost::moe_mlp(c, x, fwd, bwd, rc) : cost::dense_mlp(c, x, fwd, bwd, rc);
  BlockCost b;
  b.fwd = fwd.cost;
  b.bwd = bwd.cost;
  const Recompute r = c.strategy.recompute;
  if (r == Recompute::kSelective || r == Recompute::kOp) {
    b.recompute = rc.cost;
  } else if (r == Recompute::kFull) {
    b.recompute = b.fwd;
  }
  const LayerParams& lp = moe ? c.moe_params : c.dense_params;
  b.params = lp.params;
  b.expert_params = lp.expert_params;
  if (eng != nullptr) {
    b.params = moe ? eng->params.moe_layer : eng->params.dense_layer;
    b.expert_params = moe ? eng->params.moe_experts : 0;
    // Full recomputation keeps the output (and an MoE layer's expert counts, for the load
    // metrics) and rebuilds everything else of one layer while its backward runs.
    const EngineArena& ar = eng->arena;
    const double full = moe ? ar.moe_layer : ar.dense_layer;
    const double kept = ar.layer_output + (moe ? ar.expert_counts : 0);
    set_activation(&b, r, 4 * full, 4 * ar.attention_lse, 4 * kept, 4 * (full - ar.layer_output));
    if (r == Recompute::kFull && moe) {
      b.peak_extra_bytes -= 4 * ar.moe_routing;
      b.peak_extra_index_bytes = 4 * ar.moe_routing;
    }
    return b;
  }
  const double full = a.none + f.none;
  if (r == Recompute::kFull) {
    b.activation_bytes = 2 * x.Tsp * x.h;
    b.peak_extra_bytes = full;
  } else if (r == Recompute::kSelective) {
    b.activation_bytes = a.selective + f.selective;
    b.peak_extra_bytes = full - b.activation_bytes;
  } else if (r == Recompute::kOp) {
    b.activation_bytes = a.op + f.op;
    b.peak_extra_bytes = full - b.activation_bytes;
  } else {
    b.activation_bytes = full;
  }
  // Formulas in bf16 bytes; an fp32 device doubles them.
  b.activation_bytes *= x.e / 2;
  b.peak_extra_bytes *= x.e / 2;
  return b;
}

// The layer blocks under c's strategy: dense and MoE (when the model has experts), and their
// forms attending through the spec's sliding window (when a layer has one). `x` is dims(c, 0).
void layer_blocks(const CostContext& c, const Dims& x, const EngineBlocks* e, BlockCost* dense,
                  BlockCost* moe, BlockCost* dense_window, BlockCost* moe_window) {
  const model::ModelSpec& m = *c.model;
  *dense = layer(c, x, false, e);
  if (m.is_moe()) *moe = layer(c, x, true, e);
  int window = 0;
  for (int l = 0; l < m.num_hidden_layers; ++l) window = std::max(window, m.window(l));
  if (window > 0) {
    const Dims xw = cost::dims(c, window);
    *dense_window = layer(c, xw, false, e);
    if (m.is_moe()) *moe_window = layer(c, xw, true, e);
  }
}

BlockCost embedding(const CostContext& c, const Dims& x, const EngineBlocks* eng) {
  const model::ModelSpec& m = *c.model;
  Pass fwd = cost::pass(c, x), bwd = cost::pass(c, x);
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
    const cost::Comm t = cost::tp_comm(c, x.T * x.h * x.e);
    if (x.tp > 1) {
      fwd.cost.tp_comm_s += x.sp ? t.rs : t.ar;
      bwd.cost.tp_comm_s += x.sp ? t.ag : 0;
    }
    b.params =
        static_cast<double>(m.vocab_size) * x.h / x.tp +
        (m.positions == model::PositionKind::kLearned ? static_cast<double>(m.position_rows()) * x.h
                                                      : 0.0);
  }
  b.fwd = fwd.cost;
  b.bwd = bwd.cost;
  if (eng != nullptr) {
    b.params = eng->params.embedding;
    b.activation_bytes = 4 * eng->arena.embedding;
  } else {
    // The embedding dropout's mask.
    b.activation_bytes = x.hidden_dropout ? x.Tsp * x.h * x.e / 2 : 0;
  }
  return b;
}

// The final norm and the output head: vocab-parallel logits (Megatron), fp32 softmax cross
// entropy (reads bf16 logits, max, exp-sum, writes fp32 probabilities: 12 bytes per logit
// forward, 6 backward), two tiny all-reduces of the per-token max and sum.
BlockCost head(const CostContext& c, const Dims& x, const EngineBlocks* eng) {
  const model::ModelSpec& m = *c.model;
  Pass fwd = cost::pass(c, x), bwd = cost::pass(c, x);
  BlockCost b;
  fwd.stream(4 * x.Tsp * x.h);  // final norm
  bwd.stream(6 * x.Tsp * x.h);
  b.params = m.norm == model::NormKind::kLayerNorm ? 2 * x.h : x.h;
  if (m.architecture == model::Architecture::kVit) {
    fwd.gemm(x.b, m.num_classes, x.h);  // classifier on the class token
    bwd.gemm_bwd(x.b, m.num_classes, x.h);
    b.params += c.shape.head_params;
    b.activation_bytes = 2 * x.Tsp * x.h;
  } else {
    const double vl = static_cast<double>(m.vocab_size) / x.tp;
    const cost::Comm t = cost::tp_comm(c, x.T * x.h * x.e);
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
    if (!m.tie_word_embeddings) b.params += static_cast<double>(m.vocab_size) * x.h / x.tp;
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

// DeepSeek-V3's multi-token prediction modules (DeepSeek-AI 2024, section 2.2): each joins
// the normed hidden state and the normed embedding of the next token (two RMSNorms), projects
// 2h -> h, runs one block like the model's last, and scores it with the shared head. The
// embedding lookup and head weights are the main model's.
BlockCost mtp(const CostContext& c, const Dims& x, const BlockCost& block, const BlockCost& hd) {
  const model::ModelSpec& m = *c.model;
  Pass fwd = cost::pass(c, x), bwd = cost::pass(c, x);
  fwd.stream(2 * 4 * x.Tsp * x.h + 6 * x.T * x.h);  // two norms, the embedding lookup
  bwd.stream(2 * 6 * x.Tsp * x.h);
  fwd.linear(x.T, x.h / x.tp, 2 * x.h);
  bwd.linear_bwd(x.T, x.h / x.tp, 2 * x.h);
  BlockCost one;
  one.fwd = fwd.cost;
  one.bwd = bwd.cost;
  one.fwd += block.fwd;
  one.fwd += hd.fwd;
  one.bwd += block.bwd;
  one.bwd += hd.bwd;
  one.recompute = block.recompute;
  one.params = block.params + 2 * x.h * x.h / x.tp + 3 * x.h;
  one.expert_params = block.expert_params;
  one.activation_bytes = block.activation_bytes + hd.activation_bytes +
                         (4 * x.Tsp * x.h + 2 * x.T * 2 * x.h) * x.e / 2;
  one.peak_extra_bytes = block.peak_extra_bytes;
  const double n = m.num_nextn_predict_layers;
  BlockCost all;
  for (int i = 0; i < n; ++i) {
    all.fwd += one.fwd;
    all.bwd += one.bwd;
    all.recompute += one.recompute;
  }
  all.params = n * one.params;
  all.expert_params = n * one.expert_params;
  all.activation_bytes = n * one.activation_bytes;
  all.peak_extra_bytes = one.peak_extra_bytes;
  return all;
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
  ctx.engine = c.device.precision == Precision::kFp32 && model::engine_builds(m).ok();
  ctx.linear_device = c.device;
  if (c.device.precision == Precision::kFp8)
    ctx.linear_device.peak_tflops = c.device.fp8_peak_tflops;
  // The CPU engine under --precision bf16: its linear layers at the measured bf16 GEMM rate.
  if (ctx.engine && c.device.bf16_gemms) {
    ctx.linear_device.peak_tflops = c.device.bf16_gemm_tflops;
    ctx.linear_device.gemm_efficiency_by_min_dim = c.device.bf16_gemm_efficiency_by_min_dim;
  }
  if (m.architecture != model::Architecture::kVit) {
    int dense = -1, moe = -1;  // the first layer of each kind
    for (int l = 0; l < m.num_hidden_layers; ++l) {
      int& first = m.is_moe_layer(l) ? moe : dense;
      if (first < 0) first = l;
    }
    if (dense >= 0) ctx.dense_params = layer_params(m, dense, s.tp, s.ep);
    if (moe >= 0) ctx.moe_params = layer_params(m, moe, s.tp, s.ep);
    // The parameter table is the engine's, whose experts are whole on every tensor-parallel
    // rank. Megatron-Core shards them over an expert tensor-parallel group as large as the
    // model's tensor group unless told otherwise (parallel_state.initialize_model_parallel:
    // expert_tensor_parallel_size defaults to tensor_model_parallel_size), which is how the
    // MoE kernels below price a bf16 device's expert GEMMs: its expert weights, gradients and
    // optimizer state are 1/tp of the table's.
    if (!ctx.engine) ctx.moe_params.expert_params /= s.tp;
  } else {
    const double h = m.hidden_size, qkv = m.qkv_size(), f = m.intermediate_size;
    ctx.dense_params.params =
        (h * qkv + qkv + h * h) / s.tp + h + 4 * h + (2 * h * f + f) / s.tp + h;
  }
  return ctx;
}

BlockCosts block_costs(const CostContext& ctx) {
  const model::ModelSpec& m = *ctx.model;
  const Dims x = cost::dims(ctx, 0);
  const Strategy& s = ctx.strategy;
  EngineBlocks eng;
  if (x.engine) {
    eng.arena = engine_arena(m, s.mbs, static_cast<int>(x.s), s.tp, x.sp, s.cp, s.ep);
    eng.params = engine_params(m, s.tp, s.ep);
  }
  const EngineBlocks* e = x.engine ? &eng : nullptr;
  BlockCosts b;
  layer_blocks(ctx, x, e, &b.dense, &b.moe, &b.dense_window, &b.moe_window);
  if (s.recompute == Recompute::kFull && s.recompute_every > 1) {
    // The layers between every k-th: the same blocks without recomputation.
    CostContext kept = ctx;
    kept.strategy.recompute = Recompute::kNone;
    kept.strategy.recompute_every = 1;
    b.recompute_every = s.recompute_every;
    layer_blocks(kept, x, e, &b.dense_kept, &b.moe_kept, &b.dense_window_kept, &b.moe_window_kept);
  }
  b.embedding = embedding(ctx, x, e);
  b.head = head(ctx, x, e);
  if (m.num_nextn_predict_layers > 0) {
    const int last = m.num_hidden_layers - 1;
    b.mtp = mtp(ctx, x, layer_block(b, m, last), b.head);
  }
  if (x.engine) b.scratch_bytes = 4 * eng.arena.scratch;
  return b;
}

const BlockCost& layer_block(const BlockCosts& b, const model::ModelSpec& m, int l) {
  const bool moe = m.is_moe_layer(l);
  // torchtitan wraps block l when (l + 1) % k == 0: layers k-1, 2k-1, ... are recomputed.
  if (b.recompute_every > 1 && (l + 1) % b.recompute_every != 0) {
    if (m.window(l) > 0) return moe ? b.moe_window_kept : b.dense_window_kept;
    return moe ? b.moe_kept : b.dense_kept;
  }
  if (m.window(l) > 0) return moe ? b.moe_window : b.dense_window;
  return moe ? b.moe : b.dense;
}

}  // namespace cann::plan
