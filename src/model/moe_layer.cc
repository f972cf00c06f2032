// MoE feed-forward forward and backward. Each expert's MLP runs over exactly the rows routed to
// it (expert_count[e]), as two GEMMs on a contiguous slice of the expert buffer.
//
// Expert parallelism over P ranks, El = ceil(E/P) expert slots each (S = P*El in all, the
// S - E left over empty): after routing and dispatch (local tokens, local capacity), the
// per-slot row counts are exchanged first (all-to-all of El ints per rank pair; an empty slot
// counts 0), then the rows themselves (all-to-allv: to rank j go the kept rows of the experts
// in its slots j*El..(j+1)*El-1, in slot order; MoeDims::slots names them). Received
// rows are laid out per local expert, P*capacity rows each, sources in rank order, so each expert
// is still two contiguous GEMMs. The outputs travel back the same way, and backward mirrors both
// exchanges. Cost per layer and micro-batch: 4 all-to-allv of at most N*K*C floats (2 forward, 2
// backward), ~(P-1)/P of them crossing ranks.
//
// Sequence parallelism (a token shard): routing runs over all N tokens, so capacity, drops and
// the aux loss are the single process's; then the shard's kept assignments are renumbered in
// the same priority order (first choices, then second...) into this rank's own expert rows, and
// the experts run on those rows only: each of tp ranks does 1/tp of the expert work. Worked
// example, N = 4, K = 1, shard = tokens 2..3: tokens 0..3 chose experts 1, 0, 1, 1 and got
// slots 0, 0, 1, 2; the shard's local slots are 0, 1 (expert 1), local counts {0, 2}.
//
// Replicated experts (MoeShadows): after dispatch each rank runs its own rows of a replicated
// expert through its copy (saved in the copies' own buffers) and exchanges the routing's counts
// less those rows; after the outputs come back, the copies' outputs are put into their experts'
// rows, and combine runs as before. Backward takes the copies' output gradients out of the
// (E, cap, C) buffer before the exchange overwrites it, puts their input gradients back after
// it, and sends each copy's weight gradients to the expert's owner. Worked example, P = 2,
// expert 5 (owned by rank 1) replicated: rank 0 routed 3 rows to it, rank 1 routed 4; rank 0
// computes its 3 through its copy and sends rank 1 none of them, rank 1 its 4 through its own
// copy; rank 1 then adds rank 0's gradients of expert 5, then its own, to expert 5's.
#include "model/moe_layer.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/moe_balance.h"
#include "kernels/cpu/residual.h"
#include "kernels/cpu/swiglu.h"
#include "model/expert_placement.h"

namespace cann::model {

using namespace cann::kernels;

namespace {

// Expert slots of the whole group, for E experts over P ranks.
int all_slots(int E, int P) {
  return P * slots_per_rank(E, P);
}

// The expert in global slot s (model/expert_placement.h), or kNoExpert for an empty one;
// without a placement, the contiguous blocks.
int expert_in(const int* slots, int s, int E, int P) {
  if (slots != nullptr) return slots[s];
  const int El = slots_per_rank(E, P);
  return identity_expert(E, P, s / El, s % El);
}

// Rows of (E, cap, C) kept per expert, concatenated in slot order -> out; returns floats per
// destination rank in counts_out (P of them).
void pack_by_expert(float* out, std::vector<size_t>* counts_out, const float* xe, const int* count,
                    const int* slots, int E, int P, int cap, int C) {
  const int El = slots_per_rank(E, P);
  counts_out->assign(P, 0);
  size_t used = 0;
  for (int s = 0; s < P * El; ++s) {
    const int e = expert_in(slots, s, E, P);
    if (e < 0) continue;
    const size_t n = static_cast<size_t>(count[e]) * C;
    std::memcpy(out + used, xe + static_cast<size_t>(e) * cap * C, n * sizeof(float));
    used += n;
    (*counts_out)[s / El] += n;
  }
}

// The inverse of pack_by_expert.
void unpack_by_expert(float* xe, const float* in, const int* count, const int* slots, int E, int P,
                      int cap, int C) {
  size_t used = 0;
  for (int s = 0; s < all_slots(E, P); ++s) {
    const int e = expert_in(slots, s, E, P);
    if (e < 0) continue;
    const size_t n = static_cast<size_t>(count[e]) * C;
    std::memcpy(xe + static_cast<size_t>(e) * cap * C, in + used, n * sizeof(float));
    used += n;
  }
}

// Each slot's row count: what rank s / El's local slot s % El receives (0 for an empty one).
std::vector<int> counts_by_slot(const int* count, const int* slots, int E, int P) {
  std::vector<int> out(static_cast<size_t>(all_slots(E, P)), 0);
  for (size_t s = 0; s < out.size(); ++s) {
    const int e = expert_in(slots, static_cast<int>(s), E, P);
    if (e >= 0) out[s] = count[e];
  }
  return out;
}

// Received rows (from rank i: its rows for local expert 0, 1, ...) into the local layout:
// expert j's region of P*cap rows, sources in rank order. to_local = false goes back.
void relayout(float* local, float* wire, const int* recv_count, int P, int El, int cap, int width,
              bool to_local) {
  std::vector<size_t> fill(El, 0);
  size_t used = 0;
  for (int i = 0; i < P; ++i)
    for (int j = 0; j < El; ++j) {
      const size_t n = static_cast<size_t>(recv_count[i * El + j]) * width;
      float* l = local + static_cast<size_t>(j) * P * cap * width + fill[j];
      if (to_local)
        std::memcpy(l, wire + used, n * sizeof(float));
      else
        std::memcpy(wire + used, l, n * sizeof(float));
      fill[j] += n;
      used += n;
    }
}

std::vector<size_t> recv_floats(const int* recv_count, int P, int El, int C) {
  std::vector<size_t> out(P, 0);
  for (int i = 0; i < P; ++i)
    for (int j = 0; j < El; ++j) out[i] += static_cast<size_t>(recv_count[i * El + j]) * C;
  return out;
}

// The shard's kept assignments renumbered per expert, in routing's priority order.
void number_local_slots(MoeActs& a) {
  const int E = a.shape.E, K = a.shape.K;
  std::fill(a.local_count, a.local_count + E, 0);
  for (int k = 0; k < K; ++k)
    for (int n = 0; n < a.rows; ++n) {
      const size_t local = static_cast<size_t>(n) * K + k;
      const size_t global = static_cast<size_t>(a.first) * K + local;
      a.local_slot[local] = a.slot[global] < 0 ? -1 : a.local_count[a.expert_index[global]]++;
    }
}

bool sharded(const MoeActs& a) {
  return a.rows < a.shape.N;
}

int local_rows(const int* recv_count, int P, int El, int j) {
  int rows = 0;
  for (int i = 0; i < P; ++i) rows += recv_count[i * El + j];
  return rows;
}

// Expert j's bias of `width` at `offset`, or null when the spec has none.
template <typename T>
T* expert_bias(T* base, size_t offset, int j, int width) {
  return offset == kNoMoeTensor ? nullptr : base + offset + static_cast<size_t>(j) * width;
}

// Expert j's two GEMMs over `rows` rows at region offset `region` (rows of the expert buffers).
// he holds the first GEMM's output (FC wide), ge the activation (FM wide).
void expert_forward(MoeActs& a, const float* params, const MoeOffsets& o, const MoeDims& d, int j,
                    size_t region, int rows) {
  const int C = d.C, FM = d.FM, FC = d.FC();
  const size_t xe_off = region * C, he_off = region * FC, ge_off = region * FM;
  linear_forward(a.he + he_off, a.xe + xe_off, params + o.fcw + static_cast<size_t>(j) * FC * C,
                 expert_bias(params, o.fcb, j, FC), rows, C, FC);
  if (d.swiglu)
    swiglu_forward(a.ge + ge_off, a.he + he_off, rows, FM);
  else
    gelu_forward(a.ge + ge_off, a.he + he_off, static_cast<size_t>(rows) * FM);
  linear_forward(a.ye + xe_off, a.ge + ge_off, params + o.projw + static_cast<size_t>(j) * C * FM,
                 expert_bias(params, o.projb, j, C), rows, FM, C);
}

void expert_backward(const MoeActs& a, const MoeScratch& s, float* grads, const float* params,
                     const MoeOffsets& o, const MoeDims& d, int j, size_t region, int rows) {
  const int C = d.C, FM = d.FM, FC = d.FC();
  const size_t xe_off = region * C, he_off = region * FC, ge_off = region * FM;
  const size_t projw = o.projw + static_cast<size_t>(j) * C * FM;
  const size_t fcw = o.fcw + static_cast<size_t>(j) * FC * C;
  linear_backward(s.d_ge + ge_off, grads + projw, expert_bias(grads, o.projb, j, C),
                  s.d_ye + xe_off, a.ge + ge_off, params + projw, rows, FM, C);
  float* d_he = d.swiglu ? s.d_he + he_off : s.d_ge + ge_off;
  if (d.swiglu)
    swiglu_backward(d_he, s.d_ge + ge_off, a.he + he_off, rows, FM);
  else
    gelu_backward(d_he, a.he + he_off, s.d_ge + ge_off, static_cast<size_t>(rows) * FM);
  linear_backward(s.d_xe + xe_off, grads + fcw, expert_bias(grads, o.fcb, j, FC), d_he,
                  a.xe + xe_off, params + fcw, rows, C, FC);
}

// The families' routing (MoeDims::router): experts and combine weights from the router's
// scores (and the selection bias, null for none), then slots as GShard hands them out (every
// token's first choice, then every second one, ...; an assignment finding its expert full is
// dropped), f_e into load_fraction, and the balance loss.
float route_families(MoeActs& a, const MoeDims& d, int N, const float* bias) {
  const int E = d.E, K = d.K, cap = a.shape.capacity;
  moe_route_forward(a.probs, a.expert_index, a.gate, a.router_logits, bias, *d.router, N);
  std::fill(a.expert_count, a.expert_count + E, 0);
  std::fill(a.load_fraction, a.load_fraction + E, 0.0f);
  for (int k = 0; k < K; ++k)
    for (int n = 0; n < N; ++n) {
      const size_t i = static_cast<size_t>(n) * K + k;
      const int e = a.expert_index[i];
      a.load_fraction[e] += 1.0f / (static_cast<float>(N) * K);
      a.slot[i] = a.expert_count[e] < cap ? a.expert_count[e]++ : -1;
    }
  if (d.seq_aux) return moe_seq_balance_loss(a.probs, a.expert_index, N / d.seq, d.seq, E, K);
  return moe_switch_balance_loss(a.probs, a.expert_index, N, E, K);
}

// d_router <- the router logits' gradient of the families' routing: through the combine
// weights (d_gate) and, weighted by aux_grad, through the balance loss.
void route_families_backward(const MoeActs& a, const MoeScratch& s, const MoeDims& d,
                             float aux_grad) {
  const int N = a.shape.N, E = d.E, K = d.K;
  const float* dscores = nullptr;
  if (aux_grad != 0.0f) {
    if (d.seq_aux)
      moe_seq_balance_loss_backward(s.d_router, a.probs, a.expert_index, N / d.seq, d.seq, E, K,
                                    aux_grad);
    else
      moe_switch_balance_loss_backward(s.d_router, a.expert_index, N, E, K, aux_grad);
    dscores = s.d_router;
  }
  moe_route_backward(s.d_router, s.d_gate, dscores, a.probs, a.expert_index, *d.router, N);
}

// The global slot holding expert e.
int slot_holding(const int* slots, int E, int P, int e) {
  for (int s = 0; s < all_slots(E, P); ++s)
    if (expert_in(slots, s, E, P) == e) return s;
  return -1;
}

// A replicated expert's block of weights: its tensors' offsets within the block, as the
// MoeOffsets of local expert 0.
MoeOffsets shadow_offsets(const MoeDims& d, const MoeOffsets& o) {
  const size_t C = d.C, FM = d.FM, FC = d.FC();
  MoeOffsets so;
  so.fcw = 0;
  so.projw = FC * C;
  size_t at = FC * C + C * FM;
  so.fcb = o.fcb == kNoMoeTensor ? kNoMoeTensor : at;
  if (o.fcb != kNoMoeTensor) at += FC;
  so.projb = o.projb == kNoMoeTensor ? kNoMoeTensor : at;
  return so;
}

// The pieces of local expert j's weights: where each lies in the layer's buffers (at), in a
// block of one expert (in_block), and its floats (0: a bias the spec does not have).
struct ExpertPiece {
  size_t at, in_block, n;
};
std::array<ExpertPiece, 4> expert_pieces(const MoeOffsets& so, const MoeOffsets& o,
                                         const MoeDims& d, int j) {
  const size_t C = d.C, FM = d.FM, FC = d.FC();
  const bool fcb = o.fcb != kNoMoeTensor, projb = o.projb != kNoMoeTensor;
  return {{{o.fcw + j * FC * C, so.fcw, FC * C},
           {o.projw + j * C * FM, so.projw, C * FM},
           {fcb ? o.fcb + j * FC : 0, so.fcb, fcb ? FC : 0},
           {projb ? o.projb + j * C : 0, so.projb, projb ? C : 0}}};
}

// Local expert j's weights (at o in base) copied into a block (at so).
void copy_expert(float* block, const float* base, const MoeOffsets& so, const MoeOffsets& o,
                 const MoeDims& d, int j) {
  for (const ExpertPiece& p : expert_pieces(so, o, d, j))
    std::memcpy(block + p.in_block, base + p.at, p.n * sizeof(float));
}

// A block (at so) added into local expert j's weights (at o in base).
void add_expert(float* base, const float* block, const MoeOffsets& so, const MoeOffsets& o,
                const MoeDims& d, int j) {
  for (const ExpertPiece& p : expert_pieces(so, o, d, j))
    for (size_t i = 0; i < p.n; ++i) base[p.at + i] += block[p.in_block + i];
}

// Where the replicated experts live: each one's owner rank and local slot there.
struct ShadowOwners {
  std::vector<int> owner, local;
  int of(int rank) const { return static_cast<int>(std::count(owner.begin(), owner.end(), rank)); }
};

ShadowOwners shadow_owners(const MoeShadows& sh, const MoeDims& d, int P) {
  const int El = slots_per_rank(d.E, P);
  ShadowOwners w;
  for (const int h : sh.experts) {
    const int s = slot_holding(d.slots, d.E, P, h);
    CANN_CHECK(s >= 0) << "replicated expert " << h << " is in no slot";
    w.owner.push_back(s / El);
    w.local.push_back(s % El);
  }
  return w;
}

// The staged blocks of ss.send to each rank, ss.recv from each (counts in floats), over the
// expert group; false once a collective of the layer has failed.
bool exchange_blocks(MoeShadowScratch& ss, const std::vector<size_t>& send_counts,
                     const std::vector<size_t>& recv_counts, const ExpertParallel& ep,
                     Status* ep_status) {
  if (ep_status->ok())
    *ep_status =
        ep.comm->alltoallv(ss.recv.data(), recv_counts.data(), ss.send.data(), send_counts.data());
  return ep_status->ok();
}

// Every rank receives each replicated expert's weights from its owner: one all-to-allv, the
// owner sending each of its replicated experts (ascending) to every rank, itself included.
void refresh_shadows(MoeShadows& sh, MoeShadowScratch& ss, const float* params, const MoeOffsets& o,
                     const MoeDims& d, const ExpertParallel& ep, Status* ep_status) {
  const int P = ep.size, R = static_cast<int>(sh.experts.size());
  const size_t pe = moe_expert_floats(d, o);
  const MoeOffsets so = shadow_offsets(d, o);
  const ShadowOwners w = shadow_owners(sh, d, P);
  const size_t mine = static_cast<size_t>(w.of(ep.rank));
  ss.send.resize(static_cast<size_t>(P) * mine * pe);
  ss.recv.resize(static_cast<size_t>(R) * pe);
  std::vector<size_t> send_counts(static_cast<size_t>(P), mine * pe), recv_counts(P);
  float* out = ss.send.data();
  for (int q = 0; q < P; ++q) {
    recv_counts[q] = static_cast<size_t>(w.of(q)) * pe;
    for (int i = 0; i < R; ++i) {
      if (w.owner[i] != ep.rank) continue;
      copy_expert(out, params, so, o, d, w.local[i]);
      out += pe;
    }
  }
  if (!exchange_blocks(ss, send_counts, recv_counts, ep, ep_status)) return;
  const float* in = ss.recv.data();
  for (int q = 0; q < P; ++q)
    for (int i = 0; i < R; ++i) {
      if (w.owner[i] != q) continue;
      std::memcpy(sh.params.data() + static_cast<size_t>(i) * pe, in, pe * sizeof(float));
      in += pe;
    }
  sh.fresh = true;
}

// The replicated experts' saved activations, as a MoeActs whose expert buffers are the copies'
// (copy i at rows i*cap).
MoeActs shadow_acts(const MoeActs& a, const MoeDims& d) {
  const size_t rows = d.shadows->experts.size() * static_cast<size_t>(a.shape.capacity);
  MoeActs v = a;
  v.xe = d.shadow_rows->acts;
  v.he = v.xe + rows * d.C;
  v.ge = v.he + rows * d.FC();
  v.ye = v.ge + rows * d.FM;
  return v;
}

// The row counts every rank exchanges: the routing's, or without the replicated experts' rows,
// which stay with their tokens (then copied into *storage).
const int* exchanged_counts(const MoeActs& a, const MoeDims& d, std::vector<int>* storage) {
  if (d.shadows == nullptr || d.shadows->experts.empty()) return a.expert_count;
  storage->assign(a.expert_count, a.expert_count + d.E);
  for (const int h : d.shadows->experts) (*storage)[static_cast<size_t>(h)] = 0;
  return storage->data();
}

// This rank's rows of each replicated expert (in a.xe after dispatch) through its copy.
void shadow_forward(MoeActs& a, const MoeOffsets& o, const MoeDims& d) {
  const MoeShadows& sh = *d.shadows;
  MoeShadowRows& saved = *d.shadow_rows;
  const int R = static_cast<int>(sh.experts.size()), cap = a.shape.capacity, C = d.C;
  CANN_CHECK(R <= saved.room && saved.acts != nullptr)
      << R << " replicated experts, room for " << saved.room;
  const size_t pe = moe_expert_floats(d, o);
  const MoeOffsets so = shadow_offsets(d, o);
  saved.rows.assign(static_cast<size_t>(R), 0);
  MoeActs v = shadow_acts(a, d);
  for (int i = 0; i < R; ++i) {
    const int h = sh.experts[i], rows = a.expert_count[h];
    saved.rows[i] = rows;
    std::memcpy(v.xe + static_cast<size_t>(i) * cap * C, a.xe + static_cast<size_t>(h) * cap * C,
                static_cast<size_t>(rows) * C * sizeof(float));
    if (rows > 0)
      expert_forward(v, sh.params.data() + i * pe, so, d, 0, static_cast<size_t>(i) * cap, rows);
  }
}

// The replicated experts' rows copied between an (E, cap, C) buffer by expert and the copies'
// own (R, cap, C) one: into the copies' (into_expert_buffer false) or back.
void shadow_rows(float* by_expert, float* copies, const MoeDims& d, int cap,
                 bool into_expert_buffer) {
  const MoeShadows& sh = *d.shadows;
  const int C = d.C;
  for (size_t i = 0; i < sh.experts.size(); ++i) {
    float* e = by_expert + static_cast<size_t>(sh.experts[i]) * cap * C;
    float* c = copies + i * cap * C;
    const size_t n = static_cast<size_t>(d.shadow_rows->rows[i]) * C * sizeof(float);
    if (into_expert_buffer)
      std::memcpy(e, c, n);
    else
      std::memcpy(c, e, n);
  }
}

// Backward through the copies: their weight gradients into the scratch, their rows' input
// gradients kept for shadow_rows. s.d_ye holds every expert's output gradient (E, cap, C).
MoeScratch shadow_backward(const MoeActs& a, const MoeScratch& s, const MoeOffsets& o,
                           const MoeDims& d) {
  const MoeShadows& sh = *d.shadows;
  const MoeShadowRows& saved = *d.shadow_rows;
  MoeShadowScratch& ss = *d.shadow_scratch;
  const int R = static_cast<int>(sh.experts.size()), cap = a.shape.capacity, C = d.C;
  const size_t pe = moe_expert_floats(d, o), rows = static_cast<size_t>(R) * cap;
  const MoeOffsets so = shadow_offsets(d, o);
  ss.grads.assign(static_cast<size_t>(R) * pe, 0.0f);
  ss.d.resize(rows * moe_shadow_act_floats_per_row(d));
  MoeScratch v = s;
  v.d_ye = ss.d.data();
  v.d_ge = v.d_ye + rows * C;
  v.d_he = d.swiglu ? v.d_ge + rows * d.FM : nullptr;
  v.d_xe = v.d_ge + rows * d.FM + (d.swiglu ? rows * d.FC() : 0);
  shadow_rows(s.d_ye, v.d_ye, d, cap, false);
  const MoeActs va = shadow_acts(a, d);
  for (int i = 0; i < R; ++i)
    if (saved.rows[i] > 0)
      expert_backward(va, v, ss.grads.data() + i * pe, sh.params.data() + i * pe, so, d, 0,
                      static_cast<size_t>(i) * cap, saved.rows[i]);
  return v;
}

// Each copy's weight gradients to its expert's owner, which adds them (sources in rank order)
// to its own: one all-to-allv.
void reduce_shadow_grads(float* grads, const MoeOffsets& o, const MoeDims& d,
                         const ExpertParallel& ep, Status* ep_status) {
  const MoeShadows& sh = *d.shadows;
  MoeShadowScratch& ss = *d.shadow_scratch;
  const int P = ep.size, R = static_cast<int>(sh.experts.size());
  const size_t pe = moe_expert_floats(d, o);
  const MoeOffsets so = shadow_offsets(d, o);
  const ShadowOwners w = shadow_owners(sh, d, P);
  const size_t mine = static_cast<size_t>(w.of(ep.rank));
  ss.send.resize(static_cast<size_t>(R) * pe);
  ss.recv.resize(static_cast<size_t>(P) * mine * pe);
  std::vector<size_t> send_counts(static_cast<size_t>(P)), recv_counts(P, mine * pe);
  float* out = ss.send.data();
  for (int q = 0; q < P; ++q) {
    send_counts[q] = static_cast<size_t>(w.of(q)) * pe;
    for (int i = 0; i < R; ++i) {
      if (w.owner[i] != q) continue;
      std::memcpy(out, ss.grads.data() + i * pe, pe * sizeof(float));
      out += pe;
    }
  }
  if (!exchange_blocks(ss, send_counts, recv_counts, ep, ep_status)) return;
  const float* in = ss.recv.data();
  for (int q = 0; q < P; ++q)
    for (int i = 0; i < R; ++i) {
      if (w.owner[i] != ep.rank) continue;
      add_expert(grads, in, so, o, d, w.local[i]);
      in += pe;
    }
}

}  // namespace

int moe_layer_capacity(const MoeDims& d, int N) {
  return d.dropless ? N : moe_capacity(N, d.E, d.K, d.capacity_factor);
}

size_t moe_expert_floats(const MoeDims& d, const MoeOffsets& o) {
  const size_t C = d.C, FM = d.FM, FC = d.FC();
  return FC * C + C * FM + (o.fcb == kNoMoeTensor ? 0 : FC) + (o.projb == kNoMoeTensor ? 0 : C);
}

size_t moe_shadow_act_floats_per_row(const MoeDims& d) {
  return 2 * static_cast<size_t>(d.C) + d.FC() + d.FM;
}

float moe_forward(float* out, const float* x, const float* params, const MoeOffsets& o, MoeActs& a,
                  const MoeDims& d, int N, const MoeScratch& s, const ExpertParallel* ep,
                  Status* ep_status, const MoeTokenShard& shard) {
  const int C = d.C, E = d.E, K = d.K;
  a.shape = MoeShape{N, E, K, moe_layer_capacity(d, N)};
  a.first = shard.rows < 0 ? 0 : shard.first;
  a.rows = shard.rows < 0 ? N : shard.rows;
  CANN_CHECK(a.first >= 0 && a.first + a.rows <= N) << "token shard outside the micro-batch";
  const int cap = a.shape.capacity;
  linear_forward(a.router_logits, x, params + o.routerw, nullptr, N, C, E);
  a.aux = d.router != nullptr
              ? route_families(a, d, N, expert_bias(params, o.router_bias, 0, 0))
              : moe_router_forward(a.probs, a.expert_index, a.gate, a.slot, a.expert_count,
                                   a.load_fraction, a.router_logits, a.shape);
  if (ep == nullptr || ep->size == 1) {
    // The tokens this rank computes, [first, first + rows), with their slots and counts.
    const size_t t0 = a.first;
    const int* slot = a.slot;
    const int* count = a.expert_count;
    if (sharded(a)) {
      number_local_slots(a);
      slot = a.local_slot;
      count = a.local_count;
    }
    const MoeShape mine{a.rows, E, K, cap};
    moe_dispatch(a.xe, x + t0 * C, a.expert_index + t0 * K, slot, mine, C);
    for (int e = 0; e < E; ++e)
      if (count[e] > 0) expert_forward(a, params, o, d, e, static_cast<size_t>(e) * cap, count[e]);
    moe_combine(out, a.ye, a.gate + t0 * K, a.expert_index + t0 * K, slot, mine, C);
    return a.aux;
  }
  CANN_CHECK(!sharded(a)) << "expert parallelism does not take a token shard";
  moe_dispatch(a.xe, x, a.expert_index, a.slot, a.shape, C);
  const bool shadows = d.shadows != nullptr && !d.shadows->experts.empty();
  if (shadows) {
    if (!d.shadows->fresh)
      refresh_shadows(*d.shadows, *d.shadow_scratch, params, o, d, *ep, ep_status);
    shadow_forward(a, o, d);
  }
  std::vector<int> without_copies;
  const int* exchanged = exchanged_counts(a, d, &without_copies);
  const int P = ep->size, El = slots_per_rank(E, P);
  std::vector<size_t> send_counts;
  const std::vector<int> sent = counts_by_slot(exchanged, d.slots, E, P);
  if (ep_status->ok()) *ep_status = ep->comm->alltoall_counts(a.recv_count, sent.data(), El);
  pack_by_expert(s.send, &send_counts, a.xe, exchanged, d.slots, E, P, cap, C);
  std::vector<size_t> recv_counts = recv_floats(a.recv_count, P, El, C);
  if (ep_status->ok())
    *ep_status = ep->comm->alltoallv(s.recv, recv_counts.data(), s.send, send_counts.data());
  relayout(a.xe, s.recv, a.recv_count, P, El, cap, C, true);
  for (int j = 0; j < El; ++j) {
    const int rows = local_rows(a.recv_count, P, El, j);
    if (rows > 0) expert_forward(a, params, o, d, j, static_cast<size_t>(j) * P * cap, rows);
  }
  relayout(a.ye, s.recv, a.recv_count, P, El, cap, C, false);
  if (ep_status->ok())
    *ep_status = ep->comm->alltoallv(s.send, send_counts.data(), s.recv, recv_counts.data());
  unpack_by_expert(a.ye, s.send, exchanged, d.slots, E, P, cap, C);
  if (shadows) shadow_rows(a.ye, shadow_acts(a, d).ye, d, cap, true);
  moe_combine(out, a.ye, a.gate, a.expert_index, a.slot, a.shape, C);
  return a.aux;
}

void moe_backward(float* dx, float* grads, const float* dout, const float* x, const float* params,
                  const MoeOffsets& o, const MoeActs& a, const MoeScratch& s, const MoeDims& d,
                  float aux_grad, float* scratch_nc, const ExpertParallel* ep, Status* ep_status) {
  const int C = d.C, E = d.E, K = d.K, N = a.shape.N;
  const int cap = a.shape.capacity;
  const size_t t0 = a.first;
  const int* slot = sharded(a) ? a.local_slot : a.slot;
  const int* count = sharded(a) ? a.local_count : a.expert_count;
  const MoeShape mine{a.rows, E, K, cap};
  // The other ranks' tokens reach the router through their own gates: none from here.
  if (sharded(a)) std::fill(s.d_gate, s.d_gate + static_cast<size_t>(N) * K, 0.0f);
  moe_combine_backward(s.d_ye, s.d_gate + t0 * K, dout, a.ye, a.gate + t0 * K,
                       a.expert_index + t0 * K, slot, mine, C);
  if (ep == nullptr || ep->size == 1) {
    for (int e = 0; e < E; ++e)
      if (count[e] > 0)
        expert_backward(a, s, grads, params, o, d, e, static_cast<size_t>(e) * cap, count[e]);
  } else {
    // The output gradients go to the experts' ranks like the inputs did, and the input
    // gradients come back like the outputs did.
    const int P = ep->size, El = slots_per_rank(E, P);
    const bool shadows = d.shadows != nullptr && !d.shadows->experts.empty();
    MoeScratch copies{};
    if (shadows) copies = shadow_backward(a, s, o, d);
    std::vector<int> without_copies;
    const int* exchanged = exchanged_counts(a, d, &without_copies);
    std::vector<size_t> send_counts;
    pack_by_expert(s.send, &send_counts, s.d_ye, exchanged, d.slots, E, P, cap, C);
    std::vector<size_t> recv_counts = recv_floats(a.recv_count, P, El, C);
    if (ep_status->ok())
      *ep_status = ep->comm->alltoallv(s.recv, recv_counts.data(), s.send, send_counts.data());
    relayout(s.d_ye, s.recv, a.recv_count, P, El, cap, C, true);
    for (int j = 0; j < El; ++j) {
      const int rows = local_rows(a.recv_count, P, El, j);
      if (rows > 0)
        expert_backward(a, s, grads, params, o, d, j, static_cast<size_t>(j) * P * cap, rows);
    }
    relayout(s.d_xe, s.recv, a.recv_count, P, El, cap, C, false);
    if (ep_status->ok())
      *ep_status = ep->comm->alltoallv(s.send, send_counts.data(), s.recv, recv_counts.data());
    unpack_by_expert(s.d_xe, s.send, exchanged, d.slots, E, P, cap, C);
    if (shadows) {
      shadow_rows(s.d_xe, copies.d_xe, d, cap, true);
      reduce_shadow_grads(grads, o, d, *ep, ep_status);
    }
  }
  if (d.router != nullptr)
    route_families_backward(a, s, d, aux_grad);
  else
    moe_router_backward(s.d_router, s.d_gate, a.probs, a.expert_index, a.slot, a.load_fraction,
                        aux_grad, a.shape);
  // The router reads all N tokens of x, the experts only the shard's: dx starts as the router's
  // input gradient and the experts' is added on the shard's rows (without a shard, the same
  // two terms per element as the other way round, so the same bits).
  linear_backward(dx, grads + o.routerw, nullptr, s.d_router, x, params + o.routerw, N, C, E);
  moe_dispatch_backward(scratch_nc, s.d_xe, a.expert_index + t0 * K, slot, mine, C);
  residual_backward(dx + t0 * C, scratch_nc, static_cast<size_t>(a.rows) * C);
}

}  // namespace cann::model
