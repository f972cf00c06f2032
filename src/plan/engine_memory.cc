// The fp32 engine's memory, piece by piece (see engine_memory.h). engine_arena follows
// Model::layout_activations() and Model::carve_layer() (model/recompute.cc) take by take, in
// the same order, so a change there shows up as a failing equality in
// tests/plan_engine_memory_test.cc and tests/recompute_test.cc.
#include "plan/engine_memory.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/param_table.h"
#include "plan/engine_support.h"
#include "plan/partition.h"
#include "plan/predict.h"

namespace cann::plan {
namespace {

// One take of the arena: n floats rounded up to a multiple of 16 (64 bytes).
size_t take(size_t n) {
  return (n + 15) / 16 * 16;
}

size_t ceil_div(size_t a, size_t b) {
  return (a + b - 1) / b;
}

}  // namespace

int engine_moe_capacity(int N, int E, int K, double capacity_factor) {
  const double c = std::ceil(capacity_factor * static_cast<double>(N) * K / E);
  return std::max(1, static_cast<int>(c));
}

EngineArena engine_arena(const model::ModelSpec& m, int batch, int seq, int tp, bool sp, int cp,
                         int ep) {
  const size_t b = batch, sq = seq / cp, t = tp;
  const size_t N = b * sq;                     // tokens of this rank's micro-batch
  const size_t Nsp = sp ? ceil_div(N, t) : N;  // in the sequence-parallel regions
  const size_t C = m.hidden_size, V = ceil_div(m.vocab_size, t);
  const size_t H = m.num_attention_heads / t, d = m.head_size();
  // Key/value heads fewer than tp are replicated, one per rank (as the cost model assumes).
  const size_t KV = std::max<size_t>(1, m.num_key_value_heads / t);
  // Multi-head latent attention (model/mla.cc) lays out every head's q, k and v in one qkv row:
  // H * (2 * qk + v) floats, its attention output H * v.
  const bool mla = m.mla_enabled;
  const model::MlaSpec& ml = m.mla;
  const size_t qk = mla ? ml.qk_head_dim() : d, vd = mla ? ml.v_head_dim : d;
  const size_t QKV = mla       ? H * (2 * qk + vd)
                     : tp == 1 ? static_cast<size_t>(m.qkv_size())
                               : (H + 2 * KV) * d;
  const size_t kv_cols = QKV - H * qk;  // the keys and values of a qkv row
  const size_t F = ceil_div(m.intermediate_size, t);
  const bool glu = m.mlp == model::MlpKind::kSwiGlu;
  const size_t E = m.num_local_experts, K = m.num_experts_per_tok;
  // Expert slots over the expert group: ep * ceil(E/ep) (some empty where ep does not divide
  // E, model/expert_placement.h); the rows after the exchange are laid out by slot.
  const size_t S = ep > 1 && E > 0 ? static_cast<size_t>(ep) * ceil_div(E, ep) : E;
  // The engine shards experts by ep only: every tensor-parallel rank holds its experts whole
  // and runs them on all its tokens, or under sp on its own shard of them
  // (model/param_table.cc, model/moe_layer.h), so expert rows are FM wide (the fine-grained
  // experts' moe_intermediate_size), and SwiGLU experts' first GEMM [gate | up] 2 * FM.
  const size_t FM = m.moe_intermediate_size, FMC = glu ? 2 * FM : FM;
  // Expert rows are sized for every token this rank's experts may see: the tensor group's
  // tokens, gathered under sp. Dropless routing (the families' router) computes every
  // assignment, so each expert has N slots (a token's K experts are distinct); capacity
  // routing has GShard's capacity (model/moe_layer.cc, moe_layer_capacity).
  const size_t cap = !m.is_moe() ? 0
                     : m.routing == model::MoeRouting::kDropless
                         ? N
                         : engine_moe_capacity(static_cast<int>(N), static_cast<int>(E),
                                               static_cast<int>(K), m.capacity_factor);
  // The shared experts' width on this rank (split over tp like a dense MLP), 0 without.
  const size_t SF = m.has_shared_experts() ? ceil_div(m.shared_expert_intermediate_size, t) : 0;
  // QK-norm (Qwen3) normalizes every query and key head: H + KV heads of d per token.
  const size_t qk_heads = m.qk_norm ? H + KV : 0;
  // Attention's log-sum-exp per query and head: the fused kernel keeps nothing T x T.
  const size_t att = b * H * sq;
  // Context parallelism: each layer keeps every position's keys and values, gathered from the
  // cp ranks (model/context_parallel.cc).
  const size_t all_kv = cp > 1 ? b * static_cast<size_t>(seq) * kv_cols : 0;
  // MLA's saved latents: q_a's output before and after its norm and 1/rms, the same for the
  // key/value latent.
  const size_t QR = mla ? ml.q_lora_rank : 0, KR = mla ? ml.kv_lora_rank : 0;
  const size_t latents =
      mla ? (QR > 0 ? 2 * take(N * QR) + take(N) : 0) + 2 * take(N * KR) + take(N) : 0;

  EngineArena a;
  // encoded, then the int buffers inputs and targets.
  a.embedding = take(Nsp * C) + take(N) + take(N);
  // ln1, ln1 mean, rstd, qkv, att, atty, resid_attn, ln2, mean, rstd, out.
  // Under cp also the gathered keys and values; with QK-norm the heads before their norm
  // (qk_raw) and their 1/rms (qk_rstd).
  const size_t shared = take(Nsp * C) + 2 * take(Nsp) + take(N * QKV) + latents + take(att) +
                        take(N * H * vd) + take(Nsp * C) + take(Nsp * C) + 2 * take(Nsp) +
                        take(Nsp * C) + (cp > 1 ? take(all_kv) : 0) +
                        (m.qk_norm ? take(N * qk_heads * d) + take(N * qk_heads) : 0);
  // fch, fch_gelu; SwiGLU's fch holds the gate and up halves.
  a.dense_layer = shared + take(N * (glu ? 2 * F : F)) + take(N * F);
  // Routing covers every token of the micro-batch, gathered under sp (each tensor-parallel
  // rank routes them all, then computes the experts for its own Nsp).
  if (m.is_moe()) {
    // router_logits, probs (the softmax or sigmoid scores: the selection bias, the group
    // ranking and the balance losses work in heap vectors of E or n_group, outside the
    // arena), gate, load_fraction, xe, he (FMC wide), ge, ye; ints expert_index, slot,
    // expert_count.
    a.moe_layer = shared + 2 * take(N * E) + take(N * K) + take(E) + take(S * cap * C) +
                  take(S * cap * FMC) + take(S * cap * FM) + take(S * cap * C) + 2 * take(N * K) +
                  take(E);
    // Shared experts: fch, fch_gelu, their output and Qwen2-MoE's sigmoid gate (one per row).
    if (m.has_shared_experts()) {
      const size_t SFC = glu ? 2 * SF : SF;
      a.moe_layer +=
          take(N * SFC) + take(N * SF) + take(Nsp * C) + (m.shared_expert_gate ? take(Nsp) : 0);
    }
    if (ep > 1) a.moe_layer += take(S);  // recv_count: rows each rank sends this one's slots
    if (sp && tp > 1) a.moe_layer += take(Nsp * K) + take(E);  // local_slot, local_count
  }
  a.attention_lse = take(att);
  a.layer_output = take(Nsp * C);
  if (m.is_moe()) {
    // Under ep the rows received per local expert too (the rows each rank's experts computed).
    a.expert_counts = take(E) + (ep > 1 ? take(S) : 0);
    a.moe_routing = 2 * take(N * K) + take(E) + (ep > 1 ? take(S) : 0) +
                    (sp && tp > 1 ? take(Nsp * K) + take(E) : 0);
  }
  // lnf, mean, rstd, logits, losses.
  a.head = take(Nsp * C) + 2 * take(Nsp) + take(N * V) + take(N);
  // Under tp the vocabulary-parallel loss keeps per-token row maxima, two sums and a shift.
  if (tp > 1) a.head += take(N) + take(2 * N) + take(N);
  // d_resid, d_branch, d_ln, d_atty, d_qkv, d_fch (and SwiGLU's d_act), both as wide as the
  // dense MLP or the shared experts, whichever is wider; MoE: d_xe, d_ge, SwiGLU's d_he,
  // d_ye, d_gate, d_router.
  const size_t FW = std::max(F, SF);
  size_t scratch = take(Nsp * C) + take(Nsp * C) + take(N * C) + take(N * H * vd) + take(N * QKV) +
                   take(N * (glu ? 2 * FW : FW));
  if (glu) scratch += take(N * FW);                      // d_act, apart from d_fch
  if (m.has_shared_experts()) scratch += take(N * C);    // d_shared_x: the shared experts' d(x)
  if (m.qk_norm) scratch += take(2 * N * qk_heads * d);  // d_qk: the normed and raw heads
  if (m.is_moe()) {
    scratch += take(S * cap * C) + take(S * cap * FM) + (glu ? take(S * cap * 2 * FM) : 0) +
               take(S * cap * C) + take(N * K) + take(N * E);
    // All-to-all send (by expert) and receive (by slot) rows.
    if (ep > 1) scratch += take(E * cap * C) + take(S * cap * C);
  }
  // Under tp: the gathered full-width input and the layernorm gradient partials (QK-norm's
  // weight gradient partials too).
  if (tp > 1) scratch += take(N * C) + take(2 * C) + (m.qk_norm ? take(2 * d) : 0);
  // Under cp: the rank-ordered gather / reduce-scatter blocks, every position's key/value
  // gradients, and this rank's reduced ones.
  if (cp > 1) scratch += 2 * take(all_kv) + take(N * kv_cols);
  // MLA: q, kv_b's output, kv_a's output, two latent-wide buffers and the query path's d(x).
  if (mla)
    scratch += take(N * H * qk) + take(N * H * (ml.qk_nope_head_dim + vd)) +
               take(N * (KR + ml.qk_rope_head_dim)) + 2 * take(N * std::max(QR, KR)) + take(N * C);
  a.scratch = static_cast<double>(scratch);
  return a;
}

double EngineArena::total(const model::ModelSpec& m) const {
  const int moe = m.num_moe_layers(), dense = m.num_hidden_layers - moe;
  return embedding + dense * dense_layer + moe * moe_layer + head + scratch;
}

EngineParams engine_params(const model::ModelSpec& m, int tp, int ep) {
  const model::ParamTable table = model::build_param_table(m);
  const int L = m.num_hidden_layers;
  int first_dense = -1, first_moe = -1;
  for (int l = L - 1; l >= 0; --l) (m.is_moe_layer(l) ? first_moe : first_dense) = l;
  EngineParams p;
  const auto& tensors = table.tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const model::TensorInfo& t = tensors[i];
    size_t n = t.numel;
    if (t.tp_split != model::TpSplit::kReplicated) n = ceil_div(n, tp);
    // A rank's ceil(E/ep) expert slots (model/param_table.cc).
    if (t.expert) n = n / t.shape[0] * ceil_div(static_cast<size_t>(t.shape[0]), ep);
    // Every tensor starts on a 16-float boundary, so each but the last one occupies its
    // size rounded up.
    const double floats = static_cast<double>(i + 1 == tensors.size() ? n : take(n));
    if (t.layer == -1) {
      p.embedding += floats;
    } else if (t.layer == L) {
      p.head += floats;
    } else if (t.layer == first_dense) {
      p.dense_layer += floats;
    } else if (t.layer == first_moe) {
      (t.expert ? p.moe_experts : p.moe_layer) += floats;
    }
  }
  return p;
}

double engine_shard_floats(double floats, int D, const EngineBuckets& b) {
  const BucketCut c = cut_buckets(static_cast<size_t>(floats), b);
  const size_t P = D;
  return static_cast<double>(ceil_div(c.first, P) + c.full * ceil_div(c.size, P) +
                             ceil_div(c.rest, P));
}

double engine_staging_floats(double floats, int D, const EngineBuckets& b) {
  const BucketCut c = cut_buckets(static_cast<size_t>(floats), b);
  const size_t P = D;
  size_t largest = ceil_div(c.first, P);
  if (c.full > 0) largest = std::max(largest, ceil_div(c.size, P));
  largest = std::max(largest, ceil_div(c.rest, P));
  return static_cast<double>(P * largest);
}

double engine_two_largest_buckets_floats(double floats, const EngineBuckets& b) {
  const BucketCut c = cut_buckets(static_cast<size_t>(floats), b);
  std::vector<size_t> sizes = {c.first, c.rest};
  for (size_t i = 0; i < std::min<size_t>(c.full, 2); ++i) sizes.push_back(c.size);
  std::sort(sizes.rbegin(), sizes.rend());
  return static_cast<double>(sizes[0] + sizes[1]);
}

ClusterSpec engine_cluster(int devices) {
  ClusterSpec c;
  c.name = "engine";
  c.source = "engine";
  c.nodes = 1;
  c.devices_per_node = devices;
  c.device.name = "cpu-core";
  c.device.peak_tflops = 0.1;
  c.device.memory_gb = 1e6;
  c.device.memory_bandwidth_GBps = 10;
  c.device.compute_units = 1;
  c.device.precision = Precision::kFp32;
  c.intra_node.bandwidth_GBps = 10;
  c.inter_node = c.intra_node;
  c.allow_cross_node_tp = true;
  return c;
}

std::vector<int> engine_stage_bounds(const model::ModelSpec& m, const Strategy& s, int seq_len) {
  const ClusterSpec c = engine_cluster(s.devices());
  const BlockCosts blocks = block_costs(make_cost_context(m, c, model_shape(m), s, seq_len));
  return partition_dp(stage_layer_costs(m, blocks), s.pp);
}

double engine_expert_copies_bytes(const model::ModelSpec& m, int batch, int seq, int cp, int ep,
                                  int replicas, const std::vector<std::pair<int, int>>& chunks,
                                  int slots) {
  if (!m.is_moe() || ep <= 1 || replicas <= 0) return 0;
  const double N = static_cast<double>(batch) * (seq / cp);
  const double E = m.num_local_experts, K = m.num_experts_per_tok;
  const double cap = m.routing == model::MoeRouting::kDropless
                         ? N
                         : engine_moe_capacity(static_cast<int>(N), static_cast<int>(E),
                                               static_cast<int>(K), m.capacity_factor);
  const double C = m.hidden_size, FM = m.moe_intermediate_size;
  const double FC = m.mlp == model::MlpKind::kSwiGlu ? 2 * FM : FM;
  const double weights = FC * C + C * FM + (m.mlp_bias ? FC + C : 0);
  const double rows = cap * (2 * C + FC + FM);
  int layers = 0, most = 0;
  for (const auto& [first, last] : chunks) {
    int here = 0;
    for (int l = first; l <= last; ++l) here += m.is_moe_layer(l);
    layers += here;
    most = std::max(most, here);
  }
  if (layers == 0) return 0;
  const double R = replicas;
  return sizeof(float) * (layers * R * weights + std::max(1, slots) * most * R * rows +
                          R * weights + R * rows + 2.0 * ep * R * weights);
}

StatusOr<EngineMemory> predict_engine_memory(const model::ModelSpec& m, const Strategy& s_in,
                                             int micro_batch, int seq_len,
                                             const EngineBuckets& buckets, int expert_replicas) {
  if (micro_batch <= 0 || seq_len <= 0 || seq_len > m.position_rows())
    return InvalidArgument("micro-batch " + std::to_string(micro_batch) + " x sequence " +
                           std::to_string(seq_len) + ": both must be positive and the sequence " +
                           "at most the model's position table of " +
                           std::to_string(m.position_rows()));
  if (seq_len % s_in.cp != 0)
    return InvalidArgument("cp=" + std::to_string(s_in.cp) + " does not divide the sequence " +
                           std::to_string(seq_len));
  if (s_in.dp <= 0)
    return InvalidArgument("strategy " + strategy_string(s_in) +
                           " has no dp; hint: set dp to the data-parallel ranks (the processes "
                           "over tp*pp*cp)");
  Strategy s = s_in;
  s.mbs = micro_batch;
  if (s.gbs <= 0) s.gbs = s.dp * s.mbs;
  // What the engine refuses has no memory to predict (cp with MoE layers, ep with sp, ...):
  // `run`'s own rules, over the processes the strategy takes.
  CANN_RETURN_IF_ERROR(engine_supports(s, m, EngineShape{s.devices(), seq_len, {}, false}));
  CANN_ASSIGN_OR_RETURN(PlanInput in, make_plan_input(m, engine_cluster(s.devices()), 0));
  in.seq_len = seq_len;
  in.engine_buckets = buckets;
  CANN_ASSIGN_OR_RETURN(Prediction p, predict(in, s, Fidelity::kExact));
  // Room for replicated experts' copies (--expert-rebalance replicas=R), per stage: its
  // activation slots as the planner counts the engine's (predict.cc; 1F1B or interleaved).
  const int stages = static_cast<int>(p.stages.size()), v = s.vpp, mb = s.micro_batches();
  std::vector<double> copies(p.stages.size(), 0.0);
  for (int i = 0; i < stages; ++i) {
    const int slots = v == 1 ? std::min(stages - i, mb)
                             : std::min(mb * v, (stages - i - 1) * 2 + (v - 1) * stages + 1);
    copies[i] = engine_expert_copies_bytes(m, micro_batch, seq_len, s.cp, s.ep, expert_replicas,
                                           p.stages[i].layers, slots);
    p.stages[i].activation_bytes += copies[i];
    p.stages[i].total_bytes += copies[i];
  }
  const StageReport* worst = &p.stages[0];
  for (const StageReport& st : p.stages)
    if (st.total_bytes > worst->total_bytes) worst = &st;
  EngineMemory e;
  e.parameters = worst->weights_bytes;
  e.gradient_shard = worst->grad_shard_bytes;
  e.gradients = worst->grads_bytes - worst->grad_shard_bytes;
  e.optimizer = worst->optimizer_bytes;
  e.activations = worst->activation_bytes + worst->scratch_bytes;
  e.staging = worst->transient_bytes - worst->scratch_bytes;
  e.total = worst->total_bytes;
  return e;
}

}  // namespace cann::plan
