// The transformer's forward and backward passes. Each layer is pre-norm (GPT-2 and Llama order):
//   a = x + proj(attention(norm1(x)));  out = a + mlp(norm2(a))   (mlp is dense or MoE)
// with LayerNorm or RMSNorm, and the head tied to the token embedding (logits = lnf(x_L) wte^T)
// or its own lm_head. BERT uses the same blocks with bidirectional attention and scores only
// masked positions. Building a Model is model_create.cc's; the families' pieces are
// model_blocks.cc's.
#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/rng.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/residual.h"
#include "kernels/cpu/vocab_parallel_ce.h"

namespace cann::model {

using namespace cann::kernels;

size_t Model::max_tokens() const {
  return static_cast<size_t>(max_batch_) * (max_seq_ / cp_.size);
}

// Carves the arena: every saved activation and every backward scratch buffer, sized for
// N = max_tokens() tokens. Two passes: the first only counts (null bases).
void Model::layout_activations() {
  const ModelSpec& s = spec_;
  const size_t N = max_tokens();
  // Rows of the residual stream and its layernorms held by this rank: all N, or under sequence
  // parallelism its 1/tp of them (the saving sp is for).
  const size_t R = tp_.sequence_parallel ? (N + tp_.size - 1) / tp_.size : N;
  const size_t C = s.hidden_size, V = vocab_, QKV = qkv_, F = ff_, AC = attn_c_;
  const size_t FC = s.mlp == MlpKind::kSwiGlu ? 2 * F : F;  // the first MLP linear's width
  const size_t E = s.num_local_experts, K = s.num_experts_per_tok, FM = s.moe_intermediate_size;
  const size_t cap = s.is_moe() ? moe_layer_capacity(moe_dims(max_seq_), static_cast<int>(N)) : 0;
  const Keep keep = recompute_ == Recompute::kFull        ? Keep::kOutput
                    : recompute_ == Recompute::kSelective ? Keep::kAllButLse
                                                          : Keep::kAll;
  for (int pass = 0; pass < 2; ++pass) {
    ArenaCarver arena;
    if (pass == 1) {
      arena.base = acts_.data();
      arena.ibase = ints_.data();
    }
    auto take = [&](size_t n) { return arena.take(n); };
    // One set of saved activations per slot (micro-batches in flight in a pipeline). With
    // several chunks, slots_[si] is chunk si % chunks of slot si / chunks: a slot holds one
    // chunk's activations at a time, every chunk's layout starts at the slot's start, and the
    // slot is as large as the largest.
    const size_t nchunks = chunks_.size();
    size_t slot_start = 0, islot_start = 0, slot_end = arena.used, islot_end = arena.iused;
    for (size_t si = 0; si < slots_.size(); ++si) {
      if (si % nchunks == 0) {
        slot_start = arena.used = slot_end;
        islot_start = arena.iused = islot_end;
      }
      arena.used = slot_start;
      arena.iused = islot_start;
      select_chunk(static_cast<int>(si % nchunks));
      Slot& slot = slots_[si];
      slot.layers.clear();
      slot.moe_layers.clear();
      slot.encoded = take(R * C);
      for (int l = first_layer_; l < end_layer_; ++l)
        slot.layers.push_back(carve_layer(arena, l, keep, &slot.moe_layers));
      if (head_) {
        slot.lnf = take(R * C);
        slot.lnf_mean = take(R);
        slot.lnf_rstd = take(R);
        slot.logits = take(N * V);
        slot.losses = take(N);
        if (tp_.size > 1) {
          slot.tp_rowmax = take(N);
          slot.tp_sums = take(2 * N);
          slot.tp_shift = take(N);
        }
      }
      slot.inputs = arena.itake(N);
      slot.targets = arena.itake(N);
      slot_end = std::max(slot_end, arena.used);
      islot_end = std::max(islot_end, arena.iused);
    }
    arena.used = slot_end;
    arena.iused = islot_end;
    // Backward scratch, shared by the slots (one backward runs at a time).
    d_resid_ = take(R * C);
    d_branch_ = take(R * C);
    d_ln_ = take(N * C);
    d_atty_ = take(N * AC);
    d_qkv_ = take(N * QKV);
    // The dense MLP's gradients, also the shared experts' (whichever is wider).
    const size_t FW = std::max(F, static_cast<size_t>(shared_ff_));
    const size_t FCW = s.mlp == MlpKind::kSwiGlu ? 2 * FW : FW;
    d_fch_ = take(N * std::max(FC, FCW));
    d_act_ = s.mlp == MlpKind::kSwiGlu ? take(N * FW) : d_fch_;
    if (s.has_shared_experts()) d_shared_x_ = take(N * C);
    if (s.qk_norm) d_qk_ = take(2 * N * (nh_ + kvh_) * s.head_size());
    if (s.is_moe()) {
      // By expert before the exchange, by slot (S >= E of them under ep) after it.
      const size_t S = static_cast<size_t>(expert_slot_count());
      moe_scratch_.d_xe = take(S * cap * C);
      moe_scratch_.d_ge = take(S * cap * FM);
      if (s.mlp == MlpKind::kSwiGlu) moe_scratch_.d_he = take(S * cap * 2 * FM);
      moe_scratch_.d_ye = take(S * cap * C);
      moe_scratch_.d_gate = take(N * K);
      moe_scratch_.d_router = take(N * E);
      if (ep_.size > 1) {
        moe_scratch_.send = take(E * cap * C);
        moe_scratch_.recv = take(S * cap * C);
      }
    }
    if (tp_.size > 1) {
      tp_full_ = take(N * C);
      tp_lngrad_ = take(2 * C);
      if (s.qk_norm) tp_qkgrad_ = take(2 * s.head_size());
    }
    if (cp_.size > 1) {
      const size_t KV = QKV - q_cols_;  // the keys and values of a qkv row
      const size_t all_kv = static_cast<size_t>(max_batch_) * max_seq_ * KV;
      cp_blocks_ = take(all_kv);
      d_kv_ = take(all_kv);
      cp_local_ = take(N * KV);
    }
    if (s.mla_enabled) {
      const MlaSpec& m = s.mla;
      mla_q_ = take(N * q_cols_);
      mla_kvb_ = take(N * nh_ * (m.qk_nope_head_dim + m.v_head_dim));
      mla_kva_ = take(N * (m.kv_lora_rank + m.qk_rope_head_dim));
      const size_t lat = std::max(m.q_lora_rank, m.kv_lora_rank);
      mla_lat_ = take(N * lat);
      mla_lat2_ = take(N * lat);
      mla_dx_ = take(N * C);
    }
    carve_recompute_buffers(arena);
    if (pass == 0) {
      acts_.resize(arena.used);
      ints_.resize(arena.iused);
    }
  }
  select_chunk(0);
  slot_ = 0;
  load_slot(0);
}

void Model::select_chunk(int c) {
  chunk_ = c;
  first_layer_ = chunks_[c].first;
  end_layer_ = chunks_[c].end;
  embed_ = first_layer_ == 0;
  head_ = end_layer_ == spec_.num_hidden_layers;
  offsets_ = std::span<const LayerOffsets>(all_offsets_)
                 .subspan(chunk_offsets_[c], static_cast<size_t>(end_layer_ - first_layer_));
}

void Model::save_slot(int i) {
  Slot& s = slots_[i];
  s.layers.swap(layers_);
  s.moe_layers.swap(moe_layers_);
  s.encoded = encoded_;
  s.lnf = lnf_;
  s.lnf_mean = lnf_mean_;
  s.lnf_rstd = lnf_rstd_;
  s.logits = logits_;
  s.losses = losses_;
  s.tp_rowmax = tp_rowmax_;
  s.tp_sums = tp_sums_;
  s.tp_shift = tp_shift_;
  s.inputs = inputs_;
  s.targets = targets_;
  s.B = B_;
  s.T = T_;
  s.seq = seq_;
  s.scored = scored_;
  s.have_targets = have_targets_;
}

void Model::load_slot(int i) {
  Slot& s = slots_[i];
  layers_.swap(s.layers);
  moe_layers_.swap(s.moe_layers);
  encoded_ = s.encoded;
  lnf_ = s.lnf;
  lnf_mean_ = s.lnf_mean;
  lnf_rstd_ = s.lnf_rstd;
  logits_ = s.logits;
  losses_ = s.losses;
  tp_rowmax_ = s.tp_rowmax;
  tp_sums_ = s.tp_sums;
  tp_shift_ = s.tp_shift;
  inputs_ = s.inputs;
  targets_ = s.targets;
  B_ = s.B;
  T_ = s.T;
  seq_ = s.seq;
  scored_ = s.scored;
  have_targets_ = s.have_targets;
}

void Model::use_slot(int slot, int chunk) {
  const int nchunks = num_chunks();
  CANN_CHECK(slot >= 0 && slot < num_slots() && chunk >= 0 && chunk < nchunks)
      << "activation slot " << slot << " of " << num_slots() << ", chunk " << chunk << " of "
      << nchunks;
  const int i = slot * nchunks + chunk;
  if (i == slot_) return;
  save_slot(slot_);
  select_chunk(chunk);
  load_slot(i);
  slot_ = i;
}

size_t Model::stage_io_floats(int B, int T) const {
  const int local = B * (T / cp_.size);
  const int rows = tp_.sequence_parallel ? local / tp_.size : local;
  return static_cast<size_t>(rows) * spec_.hidden_size;
}

size_t Model::activation_bytes() const {
  return acts_.bytes() + ints_.bytes() + shadow_bytes();
}

// Under tp the full model is initialized exactly as on one process and each tensor's shard is
// copied out, so every split of the model starts from the same numbers.
void Model::place_params(float* at, bool copy) {
  const size_t n = num_floats();
  if (at == params_at_) return;
  if (at == nullptr) {
    if (own_params_.data() == params_at_) return;  // its own already
    AlignedBuffer<float> own(n);
    std::memcpy(own.data(), params_at_, n * sizeof(float));
    own_params_ = std::move(own);
    params_at_ = own_params_.data();
    return;
  }
  if (copy) std::memcpy(at, params_at_, n * sizeof(float));
  params_at_ = at;
  own_params_ = AlignedBuffer<float>();
}

void Model::init_params(uint64_t seed) {
  Rng rng(seed);
  const float residual_scale = 1.0f / std::sqrt(2.0f * spec_.num_hidden_layers);
  const bool part = tp_.size > 1 || ep_.size > 1 || !holds_embed_ || !holds_head_;
  const ParamTable full_table = part ? build_param_table(spec_) : ParamTable{};
  const ParamTable& table = part ? full_table : table_;
  AlignedBuffer<float> full_params;
  if (part) full_params.resize(table.total_floats());
  float* const base = part ? full_params.data() : params_at_;
  std::memset(params_at_, 0, num_floats() * sizeof(float));
  if (part) full_params.zero();
  for (const TensorInfo& t : table.tensors()) {
    float* p = base + t.offset;
    const std::string& n = t.name;
    const bool is_norm_gain = n.ends_with("ln1.w") || n.ends_with("ln2.w") || n == "lnf.w" ||
                              n.ends_with("norm.w");
    if (is_norm_gain) {
      for (size_t i = 0; i < t.numel; ++i) p[i] = 1.0f;
    } else if (t.shape.size() >= 2) {
      float std = n == "wpe" ? 0.01f : 0.02f;
      if (n.ends_with("attn.proj.w") || n.ends_with("mlp.proj.w") || n.ends_with("moe.proj.w") ||
          n.ends_with("moe.shared.proj.w"))
        std *= residual_scale;
      for (size_t i = 0; i < t.numel; ++i) p[i] = std * rng.normal();
    }
    // Biases and norm shifts stay zero.
  }
  if (!part) return;
  slice_from_full(table, base, table_, {tp_.rank, tp_.size, ep_.rank, ep_.size, expert_locator()},
                  params_at_);
}

const ExpertSlots& Model::expert_slots(int layer) const {
  CANN_CHECK(layer >= 0 && layer < static_cast<int>(expert_slots_.size()) &&
             !expert_slots_[layer].empty())
      << "layer " << layer << " has no expert slots here";
  return expert_slots_[layer];
}

long Model::expert_rows(int i) const {
  const MoeActs& m = moe_layers_[i];
  if (m.recv_count == nullptr) return 0;
  long rows = 0;
  for (int s = 0; s < expert_slot_count(); ++s) rows += m.recv_count[s];
  // And the rows of its own tokens it computed through the replicated experts' copies.
  if (!shadow_saved_.empty())
    for (const int r : saved_shadows(moe_layer(i)).rows) rows += r;
  return rows;
}

MoeShadowRows& Model::saved_shadows(int l) {
  return shadow_saved_[static_cast<size_t>(slot_) * spec_.num_hidden_layers + l];
}

const MoeShadowRows& Model::saved_shadows(int l) const {
  return shadow_saved_[static_cast<size_t>(slot_) * spec_.num_hidden_layers + l];
}

void Model::set_expert_shadows(int layer, std::vector<int> experts) {
  CANN_CHECK(ep_.size > 1 && layer >= 0 && layer < static_cast<int>(expert_slots_.size()) &&
             !expert_slots_[layer].empty())
      << "layer " << layer << " has no expert slots here";
  std::sort(experts.begin(), experts.end());
  CANN_CHECK(
      std::adjacent_find(experts.begin(), experts.end()) == experts.end() &&
      (experts.empty() || (experts.front() >= 0 && experts.back() < spec_.num_local_experts)))
      << "replicated experts of layer " << layer << " are not distinct experts";
  CANN_CHECK(static_cast<int>(experts.size()) <= shadow_room_)
      << experts.size() << " replicated experts, room for " << shadow_room_
      << " (reserve_expert_shadows)";
  MoeShadows& sh = shadows_[layer];
  const MoeDims d = moe_dims(max_seq_);
  sh.params.resize(experts.size() * moe_expert_floats(d, offsets_for_layer(layer).moe));
  sh.experts = std::move(experts);
  sh.fresh = false;
}

const std::vector<int>& Model::expert_shadows(int layer) const {
  static const std::vector<int> kNone;
  return static_cast<size_t>(layer) < shadows_.size() ? shadows_[layer].experts : kNone;
}

void Model::reserve_expert_shadows(int replicas) {
  if (ep_.size <= 1 || replicas <= 0) return;
  shadow_room_ = replicas;
  const int L = spec_.num_hidden_layers;
  shadows_.resize(static_cast<size_t>(L));
  const MoeDims d = moe_dims(max_seq_);
  const size_t R = static_cast<size_t>(replicas);
  const size_t cap = static_cast<size_t>(moe_layer_capacity(d, static_cast<int>(max_tokens())));
  const size_t per_copy = cap * moe_shadow_act_floats_per_row(d);
  size_t largest = 0;
  for (const int l : expert_layers()) {
    const size_t pe = moe_expert_floats(d, offsets_for_layer(l).moe);
    largest = std::max(largest, pe);
    shadows_[l].params.reserve(R * pe);
  }
  // The MoE layers of each chunk, in order: a slot's region holds one chunk's at a time.
  const size_t nchunks = chunks_.size();
  std::vector<std::vector<int>> chunk_moe(nchunks);
  size_t most = 0;
  for (size_t c = 0; c < nchunks; ++c) {
    for (int l = chunks_[c].first; l < chunks_[c].end; ++l)
      if (spec_.is_moe_layer(l)) chunk_moe[c].push_back(l);
    most = std::max(most, chunk_moe[c].size());
  }
  const size_t physical = slots_.size() / nchunks;
  shadow_acts_.assign(physical * most * R * per_copy, 0.0f);
  shadow_saved_.assign(slots_.size() * static_cast<size_t>(L), MoeShadowRows{});
  for (size_t si = 0; si < slots_.size(); ++si) {
    const size_t c = si % nchunks, region = si / nchunks;
    for (size_t k = 0; k < chunk_moe[c].size(); ++k) {
      MoeShadowRows& r = shadow_saved_[si * L + static_cast<size_t>(chunk_moe[c][k])];
      r.acts = shadow_acts_.data() + (region * most + k) * R * per_copy;
      r.room = replicas;
    }
  }
  const size_t P = static_cast<size_t>(ep_.size);
  shadow_scratch_.grads.reserve(R * largest);
  shadow_scratch_.d.reserve(R * per_copy);
  shadow_scratch_.send.reserve(P * R * largest);
  shadow_scratch_.recv.reserve(P * R * largest);
}

const Model::LayerOffsets& Model::offsets_for_layer(int l) const {
  for (size_t c = 0; c < chunks_.size(); ++c)
    if (l >= chunks_[c].first && l < chunks_[c].end)
      return all_offsets_[chunk_offsets_[c] + static_cast<size_t>(l - chunks_[c].first)];
  CANN_CHECK(false) << "layer " << l << " is not on this stage";
  return all_offsets_.front();
}

void Model::expert_weights_changed() {
  for (MoeShadows& sh : shadows_) sh.fresh = false;
}

void Model::wire_shadows(MoeDims& md, int l) {
  if (static_cast<size_t>(l) >= shadows_.size() || shadows_[l].experts.empty()) return;
  md.shadows = &shadows_[l];
  md.shadow_rows = &saved_shadows(l);
  md.shadow_scratch = &shadow_scratch_;
}

size_t Model::shadow_bytes() const {
  size_t floats = shadow_scratch_.grads.capacity() + shadow_scratch_.d.capacity() +
                  shadow_scratch_.send.capacity() + shadow_scratch_.recv.capacity() +
                  shadow_acts_.capacity();
  for (const MoeShadows& sh : shadows_) floats += sh.params.capacity();
  return floats * sizeof(float);
}

void Model::set_expert_slots(int layer, const ExpertSlots& slots) {
  CANN_CHECK(layer >= 0 && layer < static_cast<int>(expert_slots_.size()) &&
             !expert_slots_[layer].empty() && slots.size() == expert_slots_[layer].size())
      << "layer " << layer << " has no expert slots here";
  CANN_CHECK(is_expert_placement(slots))
      << "expert slots of layer " << layer << " are not a placement of every expert";
  expert_slots_[layer] = slots;
  expert_weights_changed();
}

std::vector<int> Model::expert_layers() const {
  std::vector<int> out;
  for (size_t l = 0; l < expert_slots_.size(); ++l)
    if (!expert_slots_[l].empty()) out.push_back(static_cast<int>(l));
  return out;
}

std::function<int(int, int)> Model::expert_locator() const {
  if (ep_.size <= 1) return nullptr;
  const int El = slots_per_rank(spec_.num_local_experts, ep_.size), first = ep_.rank * El;
  return [this, first](int layer, int j) { return expert_slots_[layer][first + j]; };
}

ExpertSlots Model::identity_expert_slots() const {
  return identity_slots(spec_.num_local_experts, std::max(1, ep_.size));
}

bool Model::is_expert_placement(const ExpertSlots& slots) const {
  return is_placement(slots, spec_.num_local_experts, std::max(1, ep_.size));
}

int Model::expert_slot_count() const {
  const int E = spec_.num_local_experts;
  return ep_.size > 1 ? ep_.size * slots_per_rank(E, ep_.size) : E;
}

std::span<const int> Model::expert_counts(int i) const {
  return {moe_layers_[i].expert_count, static_cast<size_t>(spec_.num_local_experts)};
}

int Model::moe_layer(int i) const {
  for (size_t j = 0; j < layers_.size(); ++j)
    if (layers_[j].moe_index == i) return first_layer_ + static_cast<int>(j);
  CANN_CHECK(false) << "no MoE layer " << i << " in this chunk";
  return -1;
}

std::span<const int> Model::expert_assignments(int i) const {
  CANN_CHECK(recompute_ != Recompute::kFull)
      << "expert assignments are not kept under full recomputation";
  const MoeActs& m = moe_layers_[i];
  return {m.expert_index, static_cast<size_t>(m.shape.N) * m.shape.K};
}

long Model::dropped_assignments() const {
  long dropped = 0;
  for (const MoeActs& m : moe_layers_) {
    long kept = 0;
    for (int e = 0; e < m.shape.E; ++e) kept += m.expert_count[e];
    dropped += static_cast<long>(m.shape.N) * m.shape.K - kept;
  }
  return dropped;
}

// One block: a = x + proj(attention(ln1(x))); out = a + mlp(ln2(a)). Forward and
// recomputation (recompute.cc) both run it, so a recomputed tensor is the saved one bit for bit;
// the tensor-parallel and expert-parallel collectives are issued again in recomputation, in the
// same order on every rank. Under full recomputation the tensors go to the shared set and only
// the output to the layer's own buffer; recomputation skips what only makes the output (the
// dense MLP's second projection; the MoE combine lands in the free d_ln_ scratch).
double Model::layer_forward(int i, const float* x, bool recomputing) {
  const ModelSpec& s = spec_;
  const int B = B_, T = T_, N = B * T, C = s.hidden_size, QKV = qkv_, AC = attn_c_, F = ff_;
  const bool tp = tp_.size > 1, sp = tp && tp_.sequence_parallel;
  const int R = sp ? N / tp_.size : N;
  const float* P = params_at_;
  const LayerOffsets& o = offsets_[i];
  const bool moe = layers_[i].moe_index >= 0;
  const bool shared = recompute_ == Recompute::kFull;
  LayerActs a = shared ? (moe ? recompute_moe_ : recompute_dense_) : layers_[i];
  a.out = recomputing ? nullptr : layers_[i].out;
  a.moe_index = layers_[i].moe_index;
  // Selective: forward's log-sum-exp goes to the shared buffer and is dropped.
  if (a.lse == nullptr) a.lse = recompute_lse_;
  // Row-parallel biases are added by one rank so that the reduced sum holds them once.
  const bool add_bias = !tp || tp_.rank == 0;
  norm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, P + o.ln1w, opt(P, o.ln1b), R, C);
  const float* ln1_all = sp ? tp_gather_rows(a.ln1, R) : a.ln1;
  if (s.mla_enabled) {
    mla_forward(a, o, ln1_all, N);
  } else {
    linear_forward(a.qkv, ln1_all, P + o.qkvw, opt(P, o.qkvb), N, C, QKV);
    if (s.qk_norm) qk_norm_forward(a, o, N);
    if (s.positions == PositionKind::kRotary) rope_qk(a.qkv, N, false);
  }
  attention_fwd(a);
  float* attn_out = sp ? tp_full_ : a.resid_attn;
  linear_forward(attn_out, a.atty, P + o.projw, add_bias ? opt(P, o.projb) : nullptr, N, AC, C);
  if (tp) tp_row_parallel_out(a.resid_attn, attn_out, N);
  residual_forward(a.resid_attn, a.resid_attn, x, static_cast<size_t>(R) * C);
  norm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.resid_attn, P + o.ln2w, opt(P, o.ln2b), R, C);
  const float* ln2_all = sp ? tp_gather_rows(a.ln2, R) : a.ln2;
  double aux = 0.0;
  if (moe) {
    // Experts are whole on every tp rank. Without sp every rank computes all tokens, the same
    // computation on the same input; under sp every rank routes the gathered tokens (the
    // single process's order: shards are consecutive rows of the flattened (B,T)) and
    // computes the experts and the output for its own R rows only, so no reduction follows.
    MoeDims md = moe_dims(T);
    if (ep_.size > 1) md.slots = expert_slots_[first_layer_ + i].data();
    wire_shadows(md, first_layer_ + i);
    MoeActs& kept = moe_layers_[a.moe_index];
    MoeActs& m = shared ? recompute_moe_acts_ : kept;
    const MoeTokenShard shard = sp ? MoeTokenShard{tp_.rank * R, R} : MoeTokenShard{};
    float* moe_out = recomputing ? d_ln_ : a.out;
    aux = moe_forward(moe_out, ln2_all, P, o.moe, m, md, N, moe_scratch_, &ep_, &tp_status_, shard);
    if (shared) record_routing(kept, m, recomputing);
    if (s.has_shared_experts()) shared_experts_forward(a, o, ln2_all, moe_out, N);
  } else {
    const int FC = s.mlp == MlpKind::kSwiGlu ? 2 * F : F;
    linear_forward(a.fch, ln2_all, P + o.fcw, opt(P, o.fcb), N, C, FC);
    mlp_activation_forward(a.fch_gelu, a.fch, N, F);
    if (recomputing) return aux;
    float* mlp_out = sp ? tp_full_ : a.out;
    linear_forward(mlp_out, a.fch_gelu, P + o.fcprojw, add_bias ? opt(P, o.fcprojb) : nullptr, N,
                   F, C);
    if (tp) tp_row_parallel_out(a.out, mlp_out, N);
  }
  if (!recomputing) residual_forward(a.out, a.out, a.resid_attn, static_cast<size_t>(R) * C);
  return aux;
}

// Under tensor parallelism the residual stream has R rows on this rank: all N tokens, or with
// sequence parallelism the N/tp tokens [rank*R, (rank+1)*R). Under sp, layernorm outputs keep
// only those rows; the column-parallel linears read them all-gathered into tp_full_, which
// each use overwrites (tp_full_ is also where row-parallel partial sums are reduced from).
ForwardStats Model::forward(const int* inputs, const int* targets, int B, int T) {
  CANN_CHECK(B > 0 && B <= max_batch_ && T > 0 && T <= max_seq_)
      << "batch " << B << "x" << T << " exceeds the model's buffers " << max_batch_ << "x"
      << max_seq_;
  const bool cp = cp_.size > 1;
  CANN_CHECK(!cp || T % (2 * cp_.size) == 0)
      << "context parallelism needs the sequence " << T << " divisible by 2*cp = " << 2 * cp_.size;
  const ModelSpec& s = spec_;
  const int seq = T;
  T /= cp_.size;  // from here on, this rank's rows of each sequence
  const int N = B * T, C = s.hidden_size, V = vocab_;
  const bool tp = tp_.size > 1, sp = tp && tp_.sequence_parallel;
  CANN_CHECK(!sp || N % tp_.size == 0)
      << "sequence parallelism needs B*T = " << N << " divisible by tp = " << tp_.size;
  const int R = sp ? N / tp_.size : N;
  const bool first_rank = tp_.rank == 0;
  auto use = [&](ParamUse u, int layer) {
    if (param_hook_) param_hook_(u, layer);
  };
  use(ParamUse::kForwardBegin, -1);
  B_ = B;
  T_ = T;
  seq_ = seq;
  have_targets_ = targets != nullptr;
  select_rows(inputs_, inputs, B, seq);
  const float* P = params_at_;

  if (!embed_) {
    // A later pipeline stage: encoded_ holds the previous stage's output (stage_input()).
  } else if (cp) {
    cp_embedding_forward(B);
  } else if (!tp) {
    embedding_forward(encoded_, inputs_, P + wte_, opt(P, wpe_), B, T, C);
  } else {
    // Vocabulary-parallel embedding: each rank looks up the tokens it holds, one rank adds the
    // positions, and the partial sums are reduced (scattered by rows under sp).
    float* partial = sp ? tp_full_ : encoded_;
    embedding_forward_vocab_range(partial, inputs_, P + wte_, first_rank ? opt(P, wpe_) : nullptr,
                                  B, T, C, vocab_begin_, vocab_begin_ + vocab_valid_);
    tp_row_parallel_out(encoded_, partial, N);
  }
  const float* x = encoded_;
  double aux_total = 0.0;
  for (int i = 0; i < end_layer_ - first_layer_; ++i) {
    use(ParamUse::kBeforeForward, first_layer_ + i);
    aux_total += layer_forward(i, x, false);
    use(ParamUse::kAfterForward, first_layer_ + i);
    x = layers_[i].out;
  }
  ForwardStats st;
  st.aux_loss = aux_total;
  if (!head_) {
    // The next stage continues from stage_output(); the loss is the last stage's.
    if (have_targets_) select_rows(targets_, targets, B, seq);
    return st;
  }
  norm_forward(lnf_, lnf_mean_, lnf_rstd_, x, P + lnfw_, opt(P, lnfb_), R, C);
  linear_forward(logits_, sp ? tp_gather_rows(lnf_, R) : lnf_, P + head_w_, nullptr, N, C, V);
  if (!have_targets_) return st;
  select_rows(targets_, targets, B, seq);
  if (tp)
    vocab_parallel_loss(N);
  else
    softmax_crossentropy_forward(losses_, logits_, targets_, N, V);
  double sum = 0.0;
  int scored = 0;
  for (int i = 0; i < N; ++i) {
    if (targets_[i] < 0) continue;
    sum += losses_[i];
    ++scored;
  }
  if (cp) cp_sum_loss(&sum, &scored);
  scored_ = scored;
  st.scored = scored;
  st.lm_loss = scored > 0 ? sum / scored : 0.0;
  st.loss = st.lm_loss + s.router_aux_loss_coef * aux_total;
  return st;
}

void Model::backward(float grad_scale, const std::function<void(int)>& layer_done) {
  auto done = [&](int layer) {
    if (layer_done) layer_done(layer);
  };
  auto use = [&](ParamUse u, int layer) {
    if (param_hook_) param_hook_(u, layer);
  };
  // Only a pass that reports its layers reports finer readiness: a pipeline's other passes
  // (earlier micro-batches of a chunk, run after a higher chunk's last one) still add to the
  // gradients below.
  auto ready = [&](size_t offset) {
    if (grad_ready_hook_ && layer_done) grad_ready_hook_(offset);
  };
  CANN_CHECK(have_targets_) << "backward() needs a forward() with targets";
  const ModelSpec& s = spec_;
  const int B = B_, T = T_, N = B * T, C = s.hidden_size, V = vocab_, QKV = qkv_, AC = attn_c_;
  const int F = ff_;
  const bool tp = tp_.size > 1, sp = tp && tp_.sequence_parallel;
  const int R = sp ? N / tp_.size : N;
  const size_t RC = static_cast<size_t>(R) * C;
  const float* P = params_at_;
  float* G = grads_.data();
  const MoeDims md = moe_dims(T);
  const float aux_grad = grad_scale * static_cast<float>(s.router_aux_loss_coef);
  // The gradient of a row-parallel linear's output, whole: d_resid_ itself, or under sp its
  // rows gathered from every rank (the backward of the forward's reduce-scatter).
  auto full_dout = [&]() -> const float* { return sp ? tp_gather_rows(d_resid_, R) : d_resid_; };

  // Head: the logits buffer becomes its own gradient (fused softmax cross-entropy). A stage
  // without the head starts from d_resid_, filled by the caller (stage_output_grad()).
  const int local_layers = end_layer_ - first_layer_;
  if (head_) {
    const float logit_scale = scored_ > 0 ? grad_scale / scored_ : 0.0f;
    if (tp)
      vocab_ce_backward(logits_, logits_, tp_shift_, targets_, logit_scale, N, V, vocab_valid_,
                        vocab_begin_);
    else
      softmax_crossentropy_backward(logits_, logits_, targets_, logit_scale, N, V);
    // Under sp only this rank's rows of the layernorm outputs were kept: the column-parallel
    // linears' weight gradients gather them again (one all-gather per linear, as Megatron does).
    linear_backward(d_ln_, G + head_w_, nullptr, logits_, sp ? tp_gather_rows(lnf_, R) : lnf_,
                    P + head_w_, N, C, V);
    const float* x_last = local_layers > 0 ? layers_.back().out : encoded_;
    const float* d_lnf = tp ? tp_column_parallel_dinput(d_ln_, N) : d_ln_;
    norm_backward_tp(d_resid_, G + lnfw_, opt(G, lnfb_), d_lnf, x_last, P + lnfw_, lnf_mean_,
                     lnf_rstd_, R, C);
    done(s.num_hidden_layers);
  }

  // d_resid_ carries the gradient of the residual stream down through the layers.
  for (int i = local_layers - 1; i >= 0; --i) {
    const int l = first_layer_ + i;
    const LayerOffsets& o = offsets_[i];
    const float* x_in = i == 0 ? encoded_ : layers_[i - 1].out;
    use(ParamUse::kBeforeBackward, l);
    // Its saved tensors, or the recomputed ones (after kBeforeBackward: the parameters are in).
    const MoeActs* moe = nullptr;
    const LayerActs a = backward_acts(i, x_in, &moe);
    // Feed-forward branch: out = resid_attn + mlp(ln2(resid_attn)).
    const float* d_ln2 = d_ln_;
    if (a.moe_index >= 0) {
      // Under sp the output gradient is this rank's rows (no reduce-scatter in forward), the
      // router reads every token again, and the gradients come out partial: the layer's
      // weight gradients are summed here, the input's by the reduce-scatter below. Rank 0
      // alone carries the aux loss, which every rank computed over all tokens.
      const float* ln2_all = sp ? tp_gather_rows(a.ln2, R) : a.ln2;
      const float moe_aux_grad = sp && tp_.rank != 0 ? 0.0f : aux_grad;
      if (sp) moe_grads_sum_begin(o.moe);
      MoeDims lmd = md;
      if (ep_.size > 1) lmd.slots = expert_slots_[l].data();
      wire_shadows(lmd, l);
      moe_backward(d_ln_, G, d_resid_, ln2_all, P, o.moe, *moe, moe_scratch_, lmd, moe_aux_grad,
                   d_branch_, &ep_, &tp_status_);
      if (sp) moe_grads_sum_end(o.moe);
      if (s.has_shared_experts()) {
        d_ln2 = shared_experts_backward(a, o, N);
        ready(o.fcprojw);
      } else if (sp) {
        d_ln2 = tp_column_parallel_dinput(d_ln_, N);
      }
    } else {
      const float* dy = full_dout();
      linear_backward(d_act_, G + o.fcprojw, opt(G, o.fcprojb), dy, a.fch_gelu, P + o.fcprojw, N,
                      F, C);
      ready(o.fcprojw);
      mlp_activation_backward(d_fch_, d_act_, a.fch, N, F);
      const float* ln2_all = sp ? tp_gather_rows(a.ln2, R) : a.ln2;
      const int FC = s.mlp == MlpKind::kSwiGlu ? 2 * F : F;
      linear_backward(d_ln_, G + o.fcw, opt(G, o.fcb), d_fch_, ln2_all, P + o.fcw, N, C, FC);
      if (tp) d_ln2 = tp_column_parallel_dinput(d_ln_, N);
    }
    norm_backward_tp(d_branch_, G + o.ln2w, opt(G, o.ln2b), d_ln2, a.resid_attn, P + o.ln2w,
                     a.ln2_mean, a.ln2_rstd, R, C);
    ready(o.ln2w);
    residual_backward(d_resid_, d_branch_, RC);
    // Attention branch: resid_attn = x_in + proj(attention(ln1(x_in))).
    const float* dy = full_dout();
    linear_backward(d_atty_, G + o.projw, opt(G, o.projb), dy, a.atty, P + o.projw, N, AC, C);
    ready(o.projw);
    attention_bwd(a);
    const float* ln1_all = sp ? tp_gather_rows(a.ln1, R) : a.ln1;
    if (s.mla_enabled) {
      mla_backward(a, o, ln1_all, N);
    } else {
      if (s.positions == PositionKind::kRotary) rope_qk(d_qkv_, N, true);
      if (s.qk_norm) qk_norm_backward(a, o, N);
      linear_backward(d_ln_, G + o.qkvw, opt(G, o.qkvb), d_qkv_, ln1_all, P + o.qkvw, N, C, QKV);
    }
    ready(o.qkvw);
    const float* d_ln1 = tp ? tp_column_parallel_dinput(d_ln_, N) : d_ln_;
    norm_backward_tp(d_branch_, G + o.ln1w, opt(G, o.ln1b), d_ln1, x_in, P + o.ln1w, a.ln1_mean,
                     a.ln1_rstd, R, C);
    residual_backward(d_resid_, d_branch_, RC);
    done(l);
    use(ParamUse::kAfterBackward, l);
  }
  // A stage without the embeddings leaves d(input) in d_resid_ (stage_input_grad()).
  if (!embed_) return;
  if (cp_.size > 1) {
    cp_embedding_backward(tp ? full_dout() : d_resid_, B);
  } else if (!tp) {
    embedding_backward(G + wte_, opt(G, wpe_), d_resid_, inputs_, B, T, C);
  } else {
    embedding_backward_vocab_range(G + wte_, opt(G, wpe_), full_dout(), inputs_, B, T, C,
                                   vocab_begin_, vocab_begin_ + vocab_valid_);
  }
  done(-1);
}

std::vector<size_t> Model::grad_ready_offsets() const {
  std::vector<size_t> out;
  for (const LayerOffsets& o : all_offsets_) {
    if (o.fcprojw != 0) out.push_back(o.fcprojw);
    for (size_t at : {o.ln2w, o.projw, o.qkvw}) out.push_back(at);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace cann::model
