// The attention sublayer's kernels and stored bytes (see layer_cost_parts.h).
//
// Notation (one micro-batch, one device): b = mbs, s = sequence, sq = s/cp local queries,
// T = b*sq tokens, Tsp = T/tp in the sequence-parallel regions (T without sp), q = heads/tp,
// kvl = kv heads on this device, d = query/key head size, dv = value head size, rot = rotary
// dims per head. Bytes per element are bf16's (2), scaled by the pass for other precisions.
//
// Kernels, forward: norm (reads x, writes y: 4 bytes per element), the QKV projection (or MLA's
// down and up projections and their latent norms), QK-norm (4), rotary embedding on the
// rotary part of q and k (reads and writes: 4), the attention core, the output projection,
// bias-dropout-add (reads x and the residual, writes y and, with dropout, a 1-byte mask: 7;
// without dropout a residual add: 6). Backward mirrors them: norm 6, QK-norm 6, rotary 4,
// dropout-add 5 (the mask's backward; a plain residual add passes its gradient on: 0).
//
// The attention core, two ways (the cluster's device.attention):
//  materialized  scores QK^T (sq x s per head) in memory: scale-mask-softmax 4 forward, 6
//                backward; attention dropout 5 both ways; scores x V. Stores softmax output 2,
//                and with dropout its mask 1 and output 2 per score (Korthikanti et al. 2022).
//                cann-train's CPU engine (priced this way, its memory from engine_memory.h)
//                runs a blockwise kernel whose score blocks stay in cache; its backward also
//                recomputes the scores GEMM.
//  fused         FlashAttention (Dao 2023): scores never leave on-chip memory; the forward does
//                2*(dqk + dv) FLOPs per query-key pair it visits, the backward recomputes the
//                scores and does 2*(3*dqk + 2*dv); causal blocks above the diagonal are skipped,
//                so a query visits `keys` keys on average. Stores q, k, v, the output and the
//                softmax statistics (4 bytes per query and head).
//
// Under fp8 precision (cluster.h) a linear layer's input is cached in fp8 (half of bf16's
// bytes) and the attention output in a 12-bit format (DeepSeek-AI 2024, section 3.3.3).
//
// Stored bytes without recomputation: the norm's input 2*Tsp*h, the projection input 2*Tsp*h
// (Megatron keeps the sequence-parallel shard and gathers it again in backward), q, k, v as
// the core reads them, the core's output (the output projection's input) and, with dropout,
// its mask Tsp*h. Written for kv = heads, f = 4h, materialized with dropout, this is
// Korthikanti's 10 + 24/t + 5as/(ht) of their 34 + 5as/h per sbh (the tests check it).
//
// Selective recomputation: with a materialized core, Korthikanti's: the scores are dropped
// and the core is recomputed. With a fused core there are no scores to drop; selective means
// Megatron-Core's recompute modules "layernorm" and "mla_up_proj" (the norms' outputs and
// MLA's up-projections are recomputed from what they read), which is also what DeepSeek-V3
// recomputes (DeepSeek-AI 2024, section 3.2.3).
//
// Multi-head latent attention (DeepSeek-V2 section 2.1): q_a (h -> q_lora) and kv_a (h ->
// kv_lora + rope) are replicated over the tensor group, as Megatron-Core does, so every tp
// rank runs them on all T tokens; q_b and kv_b are split by heads. Stored without
// recomputation: the norm input and output, q_a's and kv_a's outputs (their norms' inputs) and
// the normed latents (q_b's and kv_b's inputs), q, k, v, the core's output. Selective keeps the
// norm input, the two latents and the core output; norms, up-projections and rotary embedding
// are recomputed.
#include <algorithm>

#include "plan/comm_model.h"
#include "plan/layer_cost_parts.h"

namespace cann::plan::cost {
namespace {

// The core, forward and backward; returns its stored bytes (the output included).
double core(const Dims& x, double dqk, double dv, double q_heads, Pass& fwd, Pass& bwd, Pass* rc) {
  const double heads = x.b * q_heads;
  if (x.fused) {
    const double pairs = heads * x.sq * x.keys;
    fwd.fused_attention(2 * pairs * (dqk + dv), kFusedAttentionForward, x.sq);
    bwd.fused_attention(2 * pairs * (3 * dqk + 2 * dv), kFusedAttentionBackward, x.sq);
    // The output (the output projection's input) and the softmax statistics (fp32).
    return 2 * x.T * q_heads * dv * x.attn_out + 2 * heads * x.sq;
  }
  const double scores = heads * x.sq * x.s;
  auto forward = [&](Pass& p) {
    p.gemm(x.sq, x.s, dqk, heads);
    p.stream(4 * scores);
    if (x.attn_dropout) p.stream(5 * scores);
    p.gemm(x.sq, dv, x.s, heads);
  };
  forward(fwd);
  if (rc != nullptr) forward(*rc);
  // cann-train's CPU kernel is blockwise (kernels/cpu/attention.cc): its backward recomputes
  // each block's scores from q and k before the four gradient GEMMs.
  if (x.engine) bwd.gemm(x.sq, x.s, dqk, heads);
  bwd.gemm_bwd(x.sq, dv, x.s, heads);
  if (x.attn_dropout) bwd.stream(5 * scores);
  bwd.stream(6 * scores);
  bwd.gemm_bwd(x.sq, x.s, dqk, heads);
  return (x.attn_dropout ? 5 : 2) * scores + 2 * x.T * q_heads * dv * x.attn_out;
}

double scores_bytes(const Dims& x, double q_heads) {
  if (x.fused) return 0;
  return (x.attn_dropout ? 5 : 2) * x.b * q_heads * x.sq * x.s;
}

// Residual add (with dropout: bias-dropout-add), forward and backward; its stored mask.
double residual(const Dims& x, Pass& fwd, Pass& bwd) {
  fwd.stream((x.hidden_dropout ? 7 : 6) * x.Tsp * x.h);
  if (x.hidden_dropout) bwd.stream(5 * x.Tsp * x.h);
  return x.hidden_dropout ? x.Tsp * x.h : 0;
}

}  // namespace

Stored attention(const CostContext& c, const Dims& x, Pass& fwd, Pass& bwd, Pass& rc) {
  const model::ModelSpec& m = *c.model;
  Stored st;
  fwd.stream(4 * x.Tsp * x.h);  // norm
  bwd.stream(6 * x.Tsp * x.h);
  const double norm_out = 2 * x.Tsp * x.h * x.lin;  // the projections' input
  const double norm_io = 2 * x.Tsp * x.h + norm_out;
  double kept = norm_io;
  double dropped = 0;  // what selective recomputation does not keep
  if (x.fused && !x.op) {
    dropped += norm_out;
    rc.stream(4 * x.Tsp * x.h);
  }

  double core_out_heads = x.q, dqk = x.d, dv = x.dv;
  if (x.mla) {
    const model::MlaSpec& a = m.mla;
    const double qlr = a.q_lora_rank, kvlr = a.kv_lora_rank, rope = a.qk_rope_head_dim;
    const double qk = a.qk_head_dim(), kv_up = x.q * (a.qk_nope_head_dim + a.v_head_dim);
    dqk = qk;
    dv = a.v_head_dim;
    auto up = [&](Pass& p) {  // what selective recomputation repeats, beyond the norm
      if (qlr > 0) {
        p.stream(4 * x.T * qlr);
        p.linear(x.T, x.q * qk, qlr);
      }
      p.stream(4 * x.T * kvlr);
      p.linear(x.T, kv_up, kvlr);
      p.stream(4 * x.T * (x.q + 1) * rope);  // rotary on q_pe and the shared k_pe
      p.stream(4 * x.T * x.q * qk);          // q and k assembled per head
    };
    if (qlr > 0) {
      fwd.linear(x.T, qlr, x.h);
      bwd.linear_bwd(x.T, qlr, x.h);
      bwd.stream(6 * x.T * qlr);
      bwd.linear_bwd(x.T, x.q * qk, qlr);
    } else {
      fwd.linear(x.T, x.q * qk, x.h);
      bwd.linear_bwd(x.T, x.q * qk, x.h);
    }
    fwd.linear(x.T, kvlr + rope, x.h);
    up(fwd);
    bwd.linear_bwd(x.T, kvlr + rope, x.h);
    bwd.stream(6 * x.T * kvlr);
    bwd.linear_bwd(x.T, kv_up, kvlr);
    bwd.stream(4 * x.T * (x.q + 1) * rope + 4 * x.T * x.q * qk);
    if (x.fused) up(rc);
    // q_a and kv_a outputs (their norms' inputs), the normed latents, q, k, v.
    const double latents = 2 * x.T * (qlr + kvlr + rope);
    const double normed = 2 * x.T * (qlr + kvlr) * x.lin;  // q_b's and kv_b's inputs
    const double qkv = 2 * x.T * x.q * (2 * qk + dv);
    kept += latents + normed + qkv;
    if (x.fused) dropped += normed + qkv;
  } else {
    const double qkv_n = (x.q + 2 * x.kvl) * x.d;
    fwd.linear(x.T, qkv_n, x.h);
    bwd.linear_bwd(x.T, qkv_n, x.h);
    if (x.qk_norm) {
      fwd.stream(4 * x.T * (x.q + x.kvl) * x.d);
      bwd.stream(6 * x.T * (x.q + x.kvl) * x.d);
      kept += 2 * x.T * (x.q + x.kvl) * x.d;  // the norms' inputs
    }
    if (x.rot > 0) {
      fwd.stream(4 * x.T * (x.q + x.kvl) * x.rot);
      bwd.stream(4 * x.T * (x.q + x.kvl) * x.rot);
    }
    kept += 2 * x.T * qkv_n;  // q, k, v as the core reads them
  }
  Pass* core_rc = x.fused ? nullptr : &rc;
  const double core_kept = core(x, dqk, dv, core_out_heads, fwd, bwd, core_rc);
  kept += core_kept;
  if (!x.fused) dropped += scores_bytes(x, core_out_heads);
  const double o_in = x.q * dv;
  fwd.linear(x.T, x.h, o_in);
  bwd.linear_bwd(x.T, x.h, o_in);
  kept += residual(x, fwd, bwd);

  const Comm tc = tp_comm(c, x.T * x.h * x.e);
  if (x.op) {
    // torchtitan's per-operator policy (model/recompute.h) on a block whose matmuls run wq, wk,
    // wv, wo, then the MLP's: wq's and wv's outputs are saved, with the attention kernel's
    // output and statistics and the block's input; backward replays the sublayer's forward
    // with everything else recomputed: the norm, wk, QK-norm, rotary embedding, wo (whose
    // output only feeds a collective) and the residual add, and the collective after the norm
    // (sp) or after wo (no sp; a reduce-scatter's output is saved).
    rc.stream(4 * x.Tsp * x.h);
    rc.linear(x.T, x.kvl * x.d, x.h);
    if (x.qk_norm) rc.stream(4 * x.T * (x.q + x.kvl) * x.d);
    if (x.rot > 0) rc.stream(4 * x.T * (x.q + x.kvl) * x.rot);
    rc.linear(x.T, x.h, o_in);
    rc.stream((x.hidden_dropout ? 7 : 6) * x.Tsp * x.h);
    rc.cost.tp_comm_s += x.sp ? tc.ag : tc.ar;
    st.op =
        2 * x.Tsp * x.h + 2 * x.T * (x.q + x.kvl) * x.d + core_kept + (x.sp ? 2 * x.Tsp * x.h : 0);
  }
  const double t = tp_sublayer(tc, x.sp);
  fwd.cost.tp_comm_s += t;
  bwd.cost.tp_comm_s += t;
  // Context parallelism as the engine runs it (Llama 3's form, model/context_parallel.cc):
  // forward all-gathers every position's K and V over the cp group, backward reduce-scatters
  // their gradients. Neither hides behind compute: attention needs every key before it
  // starts, and the key gradients are complete only when it ends.
  if (c.strategy.cp > 1) {
    const double kv_heads = x.mla ? x.q : x.kvl;
    const double kv_bytes = x.b * x.s * kv_heads * (dqk + dv) * x.e;  // gathered, per rank
    fwd.cost.cp_comm_s +=
        collective_seconds(*c.cluster, Collective::kAllGather, kv_bytes, c.cp_group);
    bwd.cost.cp_comm_s +=
        collective_seconds(*c.cluster, Collective::kReduceScatter, kv_bytes, c.cp_group);
  }
  st.none = kept;
  st.selective = kept - dropped;
  return st;
}

}  // namespace cann::plan::cost
