// The feed-forward sublayer's kernels and stored bytes, dense or MoE (see layer_cost_parts.h;
// notation as in layer_cost_attention.cc, f = MLP width, fm = one expert's, fs = the shared
// experts' summed width, E experts, K per token).
//
// Dense: norm, fc1 (h -> f, or h -> 2f holding SwiGLU's gate and up), the activation (GeLU
// reads and writes: 4 bytes per element forward, 6 backward; SwiGLU reads gate and up and
// writes their product: 6 forward, reads dy, gate and up and writes both gradients: 10
// backward), fc2 (f -> h), bias-dropout-add. Stored without recomputation: the norm's input
// and output, fc1's output and fc2's input (the activation's output), and with dropout a mask:
// 2 + 2 + 8 + 8 + 1 = 21 per sbh for GeLU at f = 4h (Korthikanti et al. 2022's 19 and a
// layernorm's 2). Selective recomputation with a fused attention core (Megatron-Core's
// recompute modules "layernorm" and "mlp"/"moe_act") drops the norm's output and the
// activation's output and recomputes them.
//
// MoE (Megatron-Core's token dispatcher): the router GEMM on the device's tokens, its scores in
// fp32 (softmax or sigmoid and top-k: 8 bytes per score each way), the permutation of the
// routed copies (4 bytes per element), the all-to-all to the experts' ranks, under tensor
// parallelism the gather of the received rows inside the tensor group (each tp rank runs its
// 1/tp slice of its E/ep experts on them), the experts as grouped GEMMs, then the mirror image
// back. Shared experts (DeepSeek, Qwen2-MoE) are a dense MLP on every token, split over tp;
// Qwen2-MoE also gates them with sigmoid(x . g). Stored: the norm's input and output, the
// router's scores (fp32), the experts' inputs, fc1 outputs and activation outputs, the
// experts' outputs (the combine's gradient with respect to the routing weights reads them),
// the shared experts' fc1 and activation outputs, and the dropout mask.
//
// Rows an expert computes. Capacity routing pads every expert to capacity_factor times its
// fair share on bf16 devices, as Megatron does; cann-train's fp32 engine computes the routed
// rows only. Dropless routing computes every routed row, and its all-to-all and grouped GEMMs
// wait for the busiest rank of the expert group: with the T*K assignments of each rank landing
// on ranks independently and evenly (what balancing drives routing towards), a rank receives
// mu = T*K rows on average with standard deviation sqrt(mu (1 - 1/ep)), and the expected
// largest of ep such loads is about mu + sqrt(2 ln ep) standard deviations (the normal maximum).
// Real routing is burstier than independent choices; this is the floor a balanced router pays.
//
// Node-limited routing (DeepSeek's n_group / topk_group when groups are nodes) bounds how many
// nodes a token's experts live on, and is paired with a dispatch that sends each token once
// per destination node and forwards it inside the node (DeepSeek-AI 2024, section 3.2.2):
// its inter-node bytes are one copy per distinct remote node, not one per expert.
#include <algorithm>
#include <cmath>

#include "model/custom_op.h"
#include "plan/comm_model.h"
#include "plan/layer_cost_parts.h"

namespace cann::plan::cost {
namespace {

// An MLP of width `width` (already this device's share) on `rows` rows: forward and backward
// kernels, and the kernels selective recomputation repeats. Returns its stored fc1 and
// activation outputs, and in *act the activation output's share.
double mlp_body(const Dims& x, double rows, double width, double batch, Pass& fwd, Pass& bwd,
                Pass& rc, double* act) {
  const double fc1 = x.glu ? 2 * width : width;
  const double per = batch > 1 ? rows / batch : rows;
  fwd.linear(per, fc1, x.h, batch);
  fwd.stream((x.glu ? 6 : 4) * rows * width);
  fwd.linear(per, x.h, width, batch);
  bwd.linear_bwd(per, x.h, width, batch);
  bwd.stream((x.glu ? 10 : 6) * rows * width);
  bwd.linear_bwd(per, fc1, x.h, batch);
  if (x.fused && !x.op) rc.stream((x.glu ? 6 : 4) * rows * width);
  // Under fp8 both are cached in fp8: fc2's input as a linear layer's, fc1's output as
  // DeepSeek-V3 caches the SwiGLU operator's inputs (section 3.3.3).
  *act = 2 * rows * width * x.lin;
  return 2 * rows * fc1 * x.lin + *act;
}

// Distinct nodes a token's K experts live on, of the nodes it may use (`reachable`), when
// its experts are spread evenly over them: u * (1 - (1 - 1/u)^K).
double distinct_nodes(double reachable, double K) {
  if (reachable <= 1) return 1;
  return reachable * (1 - std::pow(1 - 1 / reachable, K));
}

// Seconds of one dispatch (or combine) all-to-all of `copies` routed copies of `bytes` each,
// from `tokens` tokens.
double dispatch_seconds(const CostContext& c, const Dims& x, double tokens, double copies,
                        double bytes) {
  const model::ModelSpec& m = *c.model;
  const ClusterSpec& cl = *c.cluster;
  const double plain = collective_seconds(cl, Collective::kAllToAll, copies * bytes, c.ep_group);
  if (m.topk_method == model::TopkMethod::kGreedy) return plain;
  const int n = c.ep_group.members(), g = members_per_node(cl, c.ep_group);
  const double k = static_cast<double>(n) / g;  // nodes the expert group spans
  if (k <= 1) return plain;
  // Groups laid over the nodes: n_group >= k puts n_group/k groups on a node, fewer groups
  // each span k/n_group nodes. A token's topk_group groups reach this many nodes.
  const double reachable = std::min(k, m.topk_group * std::max(1.0, k / std::max(1, m.n_group)));
  const double remote = distinct_nodes(reachable, x.topk) * (k - 1) / k;
  const double inter = tokens * bytes * remote / inter_bandwidth(cl);
  const double intra = copies * bytes * (g - 1) / g / intra_bandwidth(cl, g);
  return std::min(plain, std::max(inter, intra));
}

}  // namespace

Stored dense_mlp(const CostContext& c, const Dims& x, Pass& fwd, Pass& bwd, Pass& rc) {
  Stored st;
  const double fl = x.f / x.tp;
  fwd.stream(4 * x.Tsp * x.h);
  bwd.stream(6 * x.Tsp * x.h);
  double act = 0;
  const double body = mlp_body(x, x.T, fl, 1, fwd, bwd, rc, &act);
  fwd.stream((x.hidden_dropout ? 7 : 6) * x.Tsp * x.h);
  if (x.hidden_dropout) bwd.stream(5 * x.Tsp * x.h);
  const double norm_out = 2 * x.Tsp * x.h * x.lin;  // fc1's input
  st.none = 2 * x.Tsp * x.h + norm_out + body + (x.hidden_dropout ? x.Tsp * x.h : 0);
  st.selective = st.none;
  if (x.fused && !x.op) {
    rc.stream(4 * x.Tsp * x.h);
    st.selective -= norm_out + act;
  }
  const Comm tc = tp_comm(c, x.T * x.h * x.e);
  if (x.op) {
    // The per-operator policy, continuing the block's count of matmuls after attention's four
    // (model/recompute.h): SwiGLU's w1 (gate) and w2 (down) are saved and w3 (up) is
    // recomputed, or with one activation fc1 is saved and fc2 recomputed; with the norm, the
    // activation and the collective after the norm (sp) or after the MLP (no sp). The final
    // residual add feeds nothing backward needs, so the replay stops before it.
    rc.stream(4 * x.Tsp * x.h);
    if (x.glu) {
      rc.linear(x.T, fl, x.h);
      rc.stream(6 * x.T * fl);
      st.op = 2 * x.T * fl + 2 * x.T * x.h;
    } else {
      rc.stream(4 * x.T * fl);
      rc.linear(x.T, x.h, fl);
      st.op = 2 * x.T * fl;
    }
    if (x.sp) st.op += 2 * x.Tsp * x.h;
    rc.cost.tp_comm_s += x.sp ? tc.ag : tc.ar;
  }
  const double t = tp_sublayer(tc, x.sp);
  fwd.cost.tp_comm_s += t;
  bwd.cost.tp_comm_s += t;
  // A user activation on whole rows (model/custom_op.h, kFullRow): under tp the engine
  // all-gathers the hidden rows before it runs, and in backward the rows and their gradient.
  if (const model::ActivationOp* op = model::find_activation(c.model->custom_activation);
      op != nullptr && op->rule == model::DistributionRule::kFullRow && x.tp > 1) {
    const double gather = tp_comm(c, x.T * x.f * x.e).ag;
    fwd.cost.tp_comm_s += gather;
    bwd.cost.tp_comm_s += 2 * gather;
  }
  return st;
}

Stored moe_mlp(const CostContext& c, const Dims& x, Pass& fwd, Pass& bwd, Pass& rc) {
  const model::ModelSpec& m = *c.model;
  Stored st;
  // cann-train's engine (x.engine) keeps each expert whole on every tensor-parallel rank, so
  // its expert GEMMs are not split (model/param_table.cc). Without sp it runs the MoE block on
  // the full input on every rank and needs no tensor-parallel collective; with sp every rank
  // routes all T gathered tokens but computes the experts for its own Tsp only
  // (model/moe_layer.h).
  const double fl = x.engine ? x.fm : x.fm / x.tp;
  const double routed = x.engine ? x.T : x.Tsp;  // tokens this device routes
  const double pad = x.engine || x.dropless ? 1.0 : x.cf;
  const double slots = x.Tsp * x.topk * pad;  // expert slots it sends
  // Expert rows it computes: Megatron's after the gather, the engine's its own tokens'.
  const double rows = (x.engine ? x.Tsp : x.T) * x.topk * pad;
  // A rank holds ceil(E/ep) experts (the engine's slots where ep does not divide E,
  // model/expert_placement.h): the busiest one receives that share of the group's rows.
  const double local_experts = std::ceil(x.E / x.ep);
  const double busiest = rows * x.imbalance * x.ep * local_experts / x.E;
  // Dispatch in fp8 under that precision; the combine and both backward passes in bf16.
  const double dispatch = dispatch_seconds(c, x, x.Tsp, slots, x.h * x.dispatch_e);
  const double combine = dispatch_seconds(c, x, x.Tsp, slots, x.h * x.e);

  fwd.stream(4 * x.Tsp * x.h);
  bwd.stream(6 * x.Tsp * x.h);
  fwd.gemm(routed, x.E, x.h);
  fwd.stream(8 * routed * x.E);
  fwd.stream(4 * slots * x.h);
  double act = 0;
  const double experts = mlp_body(x, busiest, fl, local_experts, fwd, bwd, rc, &act);
  fwd.stream(4 * slots * x.h);
  bwd.stream(4 * slots * x.h);
  bwd.stream(4 * slots * x.h);
  bwd.gemm_bwd(routed, x.E, x.h);
  bwd.stream(8 * routed * x.E);
  double shared_act = 0, shared = 0;
  if (m.has_shared_experts()) {
    const double fs = x.engine ? x.fs : x.fs / x.tp;
    shared = mlp_body(x, x.T, fs, 1, fwd, bwd, rc, &shared_act);
    if (m.shared_expert_gate) {
      fwd.linear(x.T, 1, x.h);
      bwd.linear_bwd(x.T, 1, x.h);
      fwd.stream(4 * x.T * x.h);
      bwd.stream(6 * x.T * x.h);
    }
  }
  fwd.stream((x.hidden_dropout ? 7 : 6) * x.Tsp * x.h);
  if (x.hidden_dropout) bwd.stream(5 * x.Tsp * x.h);

  // Stored: the norm's input and output, the router's fp32 scores, the experts' inputs, their
  // fc1 and activation outputs (for the busiest rank: dropless buffers are sized by the load
  // they get), the experts' outputs for the combine, the shared experts', the mask.
  const double norm_out = 2 * x.Tsp * x.h * x.lin;
  st.none = 2 * x.Tsp * x.h + norm_out + 4 * x.Tsp * x.E + 2 * busiest * x.h * x.lin + experts +
            2 * slots * x.h + shared + (x.hidden_dropout ? x.Tsp * x.h : 0);
  st.selective = st.none;
  if (x.fused) {
    rc.stream(4 * x.Tsp * x.h);
    st.selective -= norm_out + act + shared_act;
  }

  fwd.cost.ep_comm_s += dispatch + combine;
  bwd.cost.ep_comm_s += 2 * combine;
  const Comm t = tp_comm(c, rows * x.h * x.e);
  if (x.tp > 1 && !x.engine) {
    fwd.cost.tp_comm_s += tp_sublayer(t, x.sp);
    bwd.cost.tp_comm_s += tp_sublayer(t, x.sp);
  }
  if (x.engine && x.sp) {
    // The engine under sp: forward gathers the layernorm output; backward gathers it again
    // for the router, reduce-scatters the input gradient, and all-reduces the router's and
    // experts' weight gradients (each rank's cover its own tokens only).
    const Comm g = tp_comm(c, x.T * x.h * x.e);
    const double grads = (x.E * x.h + local_experts * (2 * x.h * x.fm + x.fm + x.h)) * x.e;
    fwd.cost.tp_comm_s += g.ag;
    bwd.cost.tp_comm_s += g.ag + g.rs + tp_comm(c, grads).ar;
  }
  return st;
}

}  // namespace cann::plan::cost
