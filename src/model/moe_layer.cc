// MoE feed-forward forward and backward. Each expert's MLP runs over exactly the rows routed to
// it (expert_count[e]), as two GEMMs on a contiguous slice of the expert buffer.
//
// Expert parallelism over P ranks, El = E/P experts each: after routing and dispatch (local
// tokens, local capacity), the per-expert row counts are exchanged first (all-to-all of El
// ints per rank pair), then the rows themselves (all-to-allv: to rank j go the kept rows of
// the experts in its slots j*El..(j+1)*El-1, in slot order; MoeDims::slots names them). Received
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
#include "model/moe_layer.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/gelu.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/moe_balance.h"
#include "kernels/cpu/residual.h"
#include "kernels/cpu/swiglu.h"

namespace cann::model {

using namespace cann::kernels;

namespace {

// The expert in global slot s (model/expert_placement.h).
int expert_in(const int* slots, int s) {
  return slots == nullptr ? s : slots[s];
}

// Rows of (E, cap, C) kept per expert, concatenated in slot order -> out; returns floats per
// destination rank in counts_out (P of them).
void pack_by_expert(float* out, std::vector<size_t>* counts_out, const float* xe, const int* count,
                    const int* slots, int E, int P, int cap, int C) {
  const int El = E / P;
  counts_out->assign(P, 0);
  size_t used = 0;
  for (int s = 0; s < E; ++s) {
    const int e = expert_in(slots, s);
    const size_t n = static_cast<size_t>(count[e]) * C;
    std::memcpy(out + used, xe + static_cast<size_t>(e) * cap * C, n * sizeof(float));
    used += n;
    (*counts_out)[s / El] += n;
  }
}

// The inverse of pack_by_expert.
void unpack_by_expert(float* xe, const float* in, const int* count, const int* slots, int E,
                      int cap, int C) {
  size_t used = 0;
  for (int s = 0; s < E; ++s) {
    const int e = expert_in(slots, s);
    const size_t n = static_cast<size_t>(count[e]) * C;
    std::memcpy(xe + static_cast<size_t>(e) * cap * C, in + used, n * sizeof(float));
    used += n;
  }
}

// Each expert's row count in slot order: what rank s / El's local slot s % El receives.
std::vector<int> counts_by_slot(const int* count, const int* slots, int E) {
  std::vector<int> out(static_cast<size_t>(E));
  for (int s = 0; s < E; ++s) out[static_cast<size_t>(s)] = count[expert_in(slots, s)];
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

}  // namespace

int moe_layer_capacity(const MoeDims& d, int N) {
  return d.dropless ? N : moe_capacity(N, d.E, d.K, d.capacity_factor);
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
  const int P = ep->size, El = E / P;
  std::vector<size_t> send_counts;
  const std::vector<int> sent = counts_by_slot(a.expert_count, d.slots, E);
  if (ep_status->ok()) *ep_status = ep->comm->alltoall_counts(a.recv_count, sent.data(), El);
  pack_by_expert(s.send, &send_counts, a.xe, a.expert_count, d.slots, E, P, cap, C);
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
  unpack_by_expert(a.ye, s.send, a.expert_count, d.slots, E, cap, C);
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
    const int P = ep->size, El = E / P;
    std::vector<size_t> send_counts;
    pack_by_expert(s.send, &send_counts, s.d_ye, a.expert_count, d.slots, E, P, cap, C);
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
    unpack_by_expert(s.d_xe, s.send, a.expert_count, d.slots, E, cap, C);
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
