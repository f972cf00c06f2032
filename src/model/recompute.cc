// Activation recomputation in Model (see recompute.h for the modes): how the arena is laid out
// for each mode, and how a layer's backward gets back the tensors its slot did not keep.
//
// Memory per layer and micro-batch in flight, fp32, with N = B*T tokens (R of them on this rank
// under sequence parallelism), H heads and T the sequence:
//   none       every tensor of the block (layernorms, qkv, attention's log-sum-exp B*H*T,
//              attention output, residuals, MLP or MoE buffers with the shared experts',
//              output; under context parallelism the gathered keys and values
//              B*T*2*kv_heads*head_size)
//   selective  the same but the log-sum-exp; plus one B*H*T buffer for the stage
//   full       the output, R*C (an MoE layer also its E expert counts, for the load metrics);
//              plus one layer's tensors but the output for the stage, the dense and MoE sets
//              laid over each other, as only one layer is recomputed at a time
// plan/engine_memory.cc predicts exactly these sums (tests/recompute_test.cc holds them equal).
//
// What recomputation repeats: selective, the attention scores and softmax statistics (about a
// third of the attention core, no communication); full, the whole forward of the layer but its last
// projection, including the forward collectives (tensor-parallel all-reduces, all-gathers
// and reduce-scatters; expert-parallel all-to-alls). Every rank of a group recomputes the same
// layer at the same point of backward, so the collectives line up as in forward. MoE routing
// is a pure function of the layer input, so the recomputed routing (and its token drops) is
// the forward's; the aux loss is counted by forward only.
#include <algorithm>

#include "kernels/cpu/attention.h"
#include "model/model.h"

namespace cann::model {

using namespace cann::kernels;

float* Model::ArenaCarver::take(size_t n) {
  float* p = base ? base + used : nullptr;
  used += (n + 15) / 16 * 16;
  return p;
}

int* Model::ArenaCarver::itake(size_t n) {
  int* p = ibase ? ibase + iused : nullptr;
  iused += (n + 15) / 16 * 16;
  return p;
}

Model::LayerActs Model::carve_layer(ArenaCarver& arena, int l, Keep keep,
                                    std::vector<MoeActs>* moe) {
  const ModelSpec& s = spec_;
  // Under context parallelism N is this rank's tokens; its queries see every position.
  const size_t N = max_tokens();
  const size_t R = tp_.sequence_parallel ? (N + tp_.size - 1) / tp_.size : N;
  const size_t C = s.hidden_size, QKV = qkv_, F = ff_, AC = attn_c_;
  const size_t lse = N * nh_;  // N counts this rank's queries under cp
  const size_t E = s.num_local_experts, K = s.num_experts_per_tok, FM = s.moe_intermediate_size;
  // Expert rows are laid out by expert before the exchange and by slot after it (ep slots of
  // ceil(E/ep) experts, some maybe empty): room for the larger.
  const size_t S = static_cast<size_t>(expert_slot_count());
  const bool is_moe = s.is_moe_layer(l);
  LayerActs a{};
  if (keep == Keep::kOutput) {
    a.out = arena.take(R * C);
    if (is_moe) {
      MoeActs m{};
      m.expert_count = arena.itake(E);
      if (ep_.size > 1) m.recv_count = arena.itake(S);
      a.moe_index = static_cast<int>(moe->size());
      moe->push_back(m);
    }
    return a;
  }
  a.ln1 = arena.take(R * C);
  a.ln1_mean = arena.take(R);
  a.ln1_rstd = arena.take(R);
  a.qkv = arena.take(N * QKV);
  if (s.qk_norm) {
    const size_t heads = N * (nh_ + kvh_);
    a.qk_raw = arena.take(heads * s.head_size());
    a.qk_rstd = arena.take(heads);
  }
  if (s.mla_enabled) {
    const size_t q_lora = s.mla.q_lora_rank, kv_lora = s.mla.kv_lora_rank;
    if (q_lora > 0) {
      a.q_lat = arena.take(N * q_lora);
      a.q_lat_n = arena.take(N * q_lora);
      a.q_lat_rstd = arena.take(N);
    }
    a.kv_lat = arena.take(N * kv_lora);
    a.kv_lat_n = arena.take(N * kv_lora);
    a.kv_lat_rstd = arena.take(N);
  }
  if (cp_.size > 1) a.kv = arena.take(static_cast<size_t>(max_batch_) * max_seq_ * (QKV - q_cols_));
  if (keep != Keep::kAllButLse) a.lse = arena.take(lse);
  a.atty = arena.take(N * AC);
  a.resid_attn = arena.take(R * C);
  a.ln2 = arena.take(R * C);
  a.ln2_mean = arena.take(R);
  a.ln2_rstd = arena.take(R);
  if (keep != Keep::kAllButOutput) a.out = arena.take(R * C);
  if (!is_moe) {
    a.fch = arena.take(s.mlp == MlpKind::kSwiGlu ? 2 * N * F : N * F);
    a.fch_gelu = arena.take(N * F);
    return a;
  }
  const size_t cap = moe_layer_capacity(moe_dims(max_seq_), static_cast<int>(N));
  MoeActs m{};
  m.router_logits = arena.take(N * E);
  m.probs = arena.take(N * E);
  m.gate = arena.take(N * K);
  m.load_fraction = arena.take(E);
  m.xe = arena.take(S * cap * C);
  m.he = arena.take(S * cap * (s.mlp == MlpKind::kSwiGlu ? 2 * FM : FM));
  m.ge = arena.take(S * cap * FM);
  m.ye = arena.take(S * cap * C);
  if (s.has_shared_experts()) {
    const size_t SF = shared_ff_;
    a.fch = arena.take(s.mlp == MlpKind::kSwiGlu ? 2 * N * SF : N * SF);
    a.fch_gelu = arena.take(N * SF);
    a.shared_out = arena.take(R * C);
    if (s.shared_expert_gate) a.shared_gate = arena.take(R);
  }
  m.expert_index = arena.itake(N * K);
  m.slot = arena.itake(N * K);
  m.expert_count = arena.itake(E);
  if (ep_.size > 1) m.recv_count = arena.itake(S);
  if (tp_.sequence_parallel) {
    m.local_slot = arena.itake(R * K);
    m.local_count = arena.itake(E);
  }
  a.moe_index = static_cast<int>(moe->size());
  moe->push_back(m);
  return a;
}

void Model::carve_recompute_buffers(ArenaCarver& arena) {
  recompute_lse_ = nullptr;
  recompute_dense_ = LayerActs{};
  recompute_moe_ = LayerActs{};
  recompute_moe_acts_ = MoeActs{};
  if (recompute_ == Recompute::kSelective) {
    recompute_lse_ = arena.take(max_tokens() * nh_);
    return;
  }
  if (recompute_ != Recompute::kFull) return;
  int dense = -1, moe = -1;  // a layer of each kind in this stage
  for (int l = first_layer_; l < end_layer_; ++l) (spec_.is_moe_layer(l) ? moe : dense) = l;
  // Both sets start at the same offset: the floats needed are the larger of the two. The MoE
  // set's routing ints come from the int arena, which the dense set does not use.
  const size_t start = arena.used;
  size_t end = start;
  if (dense >= 0) {
    recompute_dense_ = carve_layer(arena, dense, Keep::kAllButOutput, nullptr);
    end = arena.used;
    arena.used = start;
  }
  if (moe >= 0) {
    std::vector<MoeActs> one;
    recompute_moe_ = carve_layer(arena, moe, Keep::kAllButOutput, &one);
    recompute_moe_acts_ = one[0];
  }
  arena.used = std::max(arena.used, end);
}

void Model::record_routing(MoeActs& kept, const MoeActs& routed, bool recomputing) const {
  const int E = spec_.num_local_experts;
  if (!recomputing) {
    std::copy(routed.expert_count, routed.expert_count + E, kept.expert_count);
    if (routed.recv_count != nullptr)
      std::copy(routed.recv_count, routed.recv_count + expert_slot_count(), kept.recv_count);
    kept.shape = routed.shape;
    kept.aux = routed.aux;
    return;
  }
  // Backward's gradients are only right if the routing is forward's: a mismatch is a bug
  // (a router that is not a pure function of its input), not a user error.
  CANN_CHECK(std::equal(routed.expert_count, routed.expert_count + E, kept.expert_count))
      << "recomputed MoE routing differs from forward's";
}

Model::LayerActs Model::backward_acts(int i, const float* x_in, const MoeActs** moe) {
  const int idx = layers_[i].moe_index;
  if (recompute_ == Recompute::kFull) {
    layer_forward(i, x_in, true);
    LayerActs a = idx >= 0 ? recompute_moe_ : recompute_dense_;
    a.moe_index = idx;
    *moe = idx >= 0 ? &recompute_moe_acts_ : nullptr;
    return a;
  }
  LayerActs a = layers_[i];
  *moe = idx >= 0 ? &moe_layers_[idx] : nullptr;
  if (recompute_ == Recompute::kSelective) {
    attention_lse(recompute_lse_, a);
    a.lse = recompute_lse_;
  }
  return a;
}

}  // namespace cann::model
