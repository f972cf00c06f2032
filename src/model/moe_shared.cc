// The shared experts of an MoE layer (DeepSeek-AI 2024, DeepSeekMoE's shared expert isolation;
// Qwen2-MoE's gated shared expert): one SwiGLU MLP of the shared experts' summed width that
// every token goes through, its output added to the routed experts'. DeepSeek adds it as it
// is (modeling_deepseek.py, DeepseekV3MoE.forward: y + shared_experts(identity)); Qwen2-MoE
// scales it per token by sigmoid(x . shared_expert_gate) (modeling_qwen2_moe.py,
// Qwen2MoeSparseMoeBlock.forward).
//
// Parallel layouts. It is a dense MLP and splits like one over tensor parallelism: fc by
// columns, proj by rows, the partial output all-reduced (reduce-scattered to the rank's rows
// under sp), the input gradient all-reduced (under sp added to the routed path's partial one
// before its reduce-scatter). Expert parallelism does not shard it: every rank of the expert
// group holds it whole and runs it on its own tokens, so its gradients are reduced over the
// data-parallel group like the router's. The gate is replicated: every tp rank computes it for
// the rows it holds (all of them, or its own under sp, where its weight gradient is summed).
#include <algorithm>

#include "kernels/cpu/linear.h"
#include "kernels/cpu/residual.h"
#include "kernels/cpu/shared_expert_gate.h"
#include "model/model.h"

namespace cann::model {

using namespace cann::kernels;

namespace {

// The shared MLP's sizes on this rank for a micro-batch of N tokens: hidden C, its F units
// (FC rows of fc), and the R rows of the residual stream (N / tp under sp).
struct SharedShape {
  int C, F, FC, R;
  bool tp, sp;
};

SharedShape shared_shape(const ModelSpec& s, const TensorParallel& t, int F, int N) {
  const bool tp = t.size > 1, sp = tp && t.sequence_parallel;
  return {s.hidden_size, F, s.mlp == MlpKind::kSwiGlu ? 2 * F : F, sp ? N / t.size : N, tp, sp};
}

}  // namespace

void Model::shared_experts_forward(const LayerActs& a, const LayerOffsets& o, const float* ln2_all,
                                   float* out, int N) {
  const ModelSpec& s = spec_;
  const auto [C, F, FC, R, tp, sp] = shared_shape(s, tp_, shared_ff_, N);
  const float* P = params_at_;
  linear_forward(a.fch, ln2_all, P + o.fcw, opt(P, o.fcb), N, C, FC);
  mlp_activation_forward(a.fch_gelu, a.fch, N, F);
  // Row-parallel: partial sums over this rank's units, reduced into shared_out (under sp from
  // tp_full_, whose gathered input the first linear has consumed). One rank adds the bias.
  float* partial = sp ? tp_full_ : a.shared_out;
  const bool add_bias = !tp || tp_.rank == 0;
  linear_forward(partial, a.fch_gelu, P + o.fcprojw, add_bias ? opt(P, o.fcprojb) : nullptr, N, F,
                 C);
  if (tp) tp_row_parallel_out(a.shared_out, partial, N);
  if (s.shared_expert_gate)
    shared_expert_gate_forward(out, a.shared_gate, a.shared_out, a.ln2, P + o.shared_gate, R, C);
  else
    residual_forward(out, out, a.shared_out, static_cast<size_t>(R) * C);
}

float* Model::shared_experts_backward(const LayerActs& a, const LayerOffsets& o, int N) {
  const ModelSpec& s = spec_;
  const auto [C, F, FC, R, tp, sp] = shared_shape(s, tp_, shared_ff_, N);
  const float* P = params_at_;
  float* G = grads_.data();
  // The gradient reaching the MLP's output (this rank's rows): d_resid_ itself, or gated, the
  // gate's share of it in d_branch_ (free between moe_backward and the norm's backward). The
  // gate's input gradient goes straight into d_ln_, onto this rank's rows: under sp d_ln_ is a
  // partial sum over all N rows whose reduce-scatter hands each rank its own.
  const float* dy = d_resid_;
  if (s.shared_expert_gate) {
    float* dx_rows = d_ln_ + (sp ? static_cast<size_t>(tp_.rank) * R * C : 0);
    // Under sp each rank saw its own rows: the gate's weight gradient is summed over the ranks.
    float* dg = sp ? tp_lngrad_ : G + o.shared_gate;
    if (sp) std::fill(dg, dg + C, 0.0f);
    shared_expert_gate_backward(d_branch_, dg, dx_rows, d_resid_, a.shared_out, a.ln2,
                                P + o.shared_gate, a.shared_gate, R, C);
    if (sp) {
      tp_allreduce(dg, static_cast<size_t>(C));
      for (int c = 0; c < C; ++c) G[o.shared_gate + c] += dg[c];
    }
    dy = d_branch_;
  }
  const float* dy_all = sp ? tp_gather_rows(dy, R) : dy;
  linear_backward(d_act_, G + o.fcprojw, opt(G, o.fcprojb), dy_all, a.fch_gelu, P + o.fcprojw, N, F,
                  C);
  mlp_activation_backward(d_fch_, d_act_, a.fch, N, F);
  const float* ln2_all = sp ? tp_gather_rows(a.ln2, R) : a.ln2;
  linear_backward(d_shared_x_, G + o.fcw, opt(G, o.fcb), d_fch_, ln2_all, P + o.fcw, N, C, FC);
  // Column-parallel input gradient: partial over the units. Without sp the routed path's is
  // already whole, so this one is summed on its own; under sp both go into one reduce-scatter.
  if (tp && !sp) tp_allreduce(d_shared_x_, static_cast<size_t>(N) * C);
  residual_backward(d_ln_, d_shared_x_, static_cast<size_t>(N) * C);
  return sp ? tp_column_parallel_dinput(d_ln_, N) : d_ln_;
}

}  // namespace cann::model
