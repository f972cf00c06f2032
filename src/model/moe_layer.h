// The MoE feed-forward layer: router, dispatch to expert buffers, per-expert MLPs (fc, GELU or
// SwiGLU, proj; biases optional), combine by gates. Called by Model for layers where
// ModelSpec::is_moe_layer holds. Two routers: GShard's (kernels/cpu/moe: softmax top-k, gates
// not renormalized, capacity slots, its aux) for gpt/bert specs, and the Hugging Face
// families' (kernels/cpu/moe_routing: normalized top-k, capacity or dropless slots, the
// Switch/Mixtral or the sequence-wise balance loss of kernels/cpu/moe_balance).
#pragma once

#include <cstddef>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/moe_routing.h"
#include "model/tensor_parallel.h"

namespace cann::model {

// An expert bias the spec does not have.
inline constexpr size_t kNoMoeTensor = static_cast<size_t>(-1);

// Float offsets of one MoE layer's tensors in the flat buffers.
struct MoeOffsets {
  size_t routerw = 0, fcw = 0, fcb = kNoMoeTensor, projw = 0, projb = kNoMoeTensor;
  // DeepSeek-V3's per-expert selection bias (E), added to the scores for the top-k choice only.
  size_t router_bias = kNoMoeTensor;
};

// Saved activations of one MoE layer (views into the model's arena), sized for the largest
// token count: expert buffers hold E * max_capacity rows.
struct MoeActs {
  float *router_logits, *probs, *gate, *load_fraction;
  float *xe, *he, *ge, *ye;
  int *expert_index, *slot, *expert_count;
  // Expert parallelism: rows received for each local expert from each rank, [rank][expert].
  int* recv_count = nullptr;
  // Sequence parallelism: the slots of this rank's tokens renumbered within its own expert
  // rows (rows*K, -1 where dropped) and its rows per expert (E). Null without sp.
  int *local_slot = nullptr, *local_count = nullptr;
  kernels::MoeShape shape{};  // of the last forward
  int first = 0, rows = 0;    // the tokens of the last forward whose output this rank computed
  float aux = 0.0f;
};

// Backward scratch shared by all MoE layers.
struct MoeScratch {
  float *d_xe = nullptr, *d_ge = nullptr, *d_ye = nullptr, *d_gate = nullptr, *d_router = nullptr;
  // SwiGLU experts: the gradient of the [gate | up] rows, E * capacity * 2 * FM floats.
  float* d_he = nullptr;
  // Expert parallelism: all-to-all staging, E * capacity * C floats each.
  float *send = nullptr, *recv = nullptr;
};

// Sequence parallelism: every tensor-parallel rank routes all N tokens of the micro-batch (so
// capacity, token dropping and the aux loss are the single process's), then runs the experts
// and produces the output only for its `rows` tokens from `first`. rows < 0: all N.
struct MoeTokenShard {
  int first = 0;
  int rows = -1;
};

// Expert parallelism with hot experts replicated (`--expert-rebalance ...,replicas=R`): every
// rank of the expert group holds a copy of each listed expert's weights and computes that
// expert for its own tokens, which then never cross ranks. Each copy's weight gradients go to
// the expert's owner (the rank whose slot holds it), which adds them, in rank order, to its own:
// the sum over all tokens, as without copies (up to the order of the float additions). The
// copies are refreshed from the owners at the first forward after the owners' weights changed.
// One per MoE layer; the layer's forward and backward use it, and all ranks of the expert group
// list the same experts.
struct MoeShadows {
  std::vector<int> experts;   // replicated experts, ascending
  std::vector<float> params;  // experts.size() blocks of the weights: fcw | projw | fcb | projb
  bool fresh = false;         // the copies equal the owners' weights
};
// What one forward of the layer saves for its backward (one per micro-batch in flight): the
// copies' rows, capacity rows per copy, xe | he | ge | ye (room for `room` copies), and this
// rank's rows of each copy.
struct MoeShadowRows {
  float* acts = nullptr;
  int room = 0;
  std::vector<int> rows;
};
// Shared by the MoE layers' backward passes: each copy's weight gradients, the backward's
// activation gradients of the copies' rows, and the exchange staging.
struct MoeShadowScratch {
  std::vector<float> grads, d, send, recv;
};

struct MoeDims {
  int C;   // hidden size
  int FM;  // expert intermediate size
  int E, K;
  double capacity_factor;
  bool swiglu = false;    // experts are SwiGLU (fc gives [gate | up], 2*FM wide) instead of GeLU
  bool dropless = false;  // every assignment is computed (capacity N)
  // The families' router (null: GShard's). With it the aux loss is the Switch/Mixtral one, or
  // with seq_aux DeepSeek's sequence-wise one over sequences of `seq` rows.
  const kernels::RouterConfig* router = nullptr;
  bool seq_aux = false;
  int seq = 0;
  // Expert parallelism: the expert each global slot holds (model/expert_placement.h), E
  // entries; null: slot s holds expert s (contiguous blocks).
  const int* slots = nullptr;
  // Expert parallelism: the layer's replicated experts and the shared scratch (null: none).
  MoeShadows* shadows = nullptr;
  MoeShadowRows* shadow_rows = nullptr;
  MoeShadowScratch* shadow_scratch = nullptr;
  int FC() const { return swiglu ? 2 * FM : FM; }
};

// Slots per expert for N tokens: N when dropless (a token's experts are distinct), else
// GShard's capacity.
int moe_layer_capacity(const MoeDims& d, int N);

// Floats of one expert's weights (both matrices and their biases where the spec has them),
// and the floats a replicated expert keeps per capacity row (xe, he, ge, ye) or scratches.
size_t moe_expert_floats(const MoeDims& d, const MoeOffsets& o);
size_t moe_shadow_act_floats_per_row(const MoeDims& d);

// out (N,C) = MoE(x); x (N,C) is the layernorm output. Returns the aux loss (unscaled).
// With a token shard, out is (shard.rows, C): the output of those tokens only, and
// a.local_slot / a.local_count must be set; expert parallelism does not combine with it.
// ep (null or size 1: every expert here) shards the experts: this rank's local expert j (at o's
// offsets) is the one in global slot rank*El + j, El = ceil(E/ep) (d.slots; without them the
// contiguous blocks of identity_slots, model/expert_placement.h), and the layer is a
// collective over the ep group
// (the first failure is kept in *ep_status; later exchanges are skipped). Under ep the saved
// expert activations (xe, he, ge) hold this rank's experts' rows gathered from every rank:
// local expert j's region has ep*capacity rows, filled in rank order.
float moe_forward(float* out, const float* x, const float* params, const MoeOffsets& o, MoeActs& a,
                  const MoeDims& d, int N, const MoeScratch& s, const ExpertParallel* ep,
                  Status* ep_status, const MoeTokenShard& shard = {});
// dx (N,C) is overwritten with d(loss)/dx; dout (N,C) is the gradient of the layer output;
// parameter gradients accumulate into grads; aux_grad weights the aux loss; scratch_nc holds
// (N,C) floats. After a sharded forward (a.rows < N) dout and scratch_nc are (a.rows, C) and
// dx and the parameter gradients are partial: the router's path for all N tokens (with this
// aux_grad), the experts' for the shard's only; summed over the ranks they are whole, so
// exactly one rank must pass the real aux_grad and the others 0.
void moe_backward(float* dx, float* grads, const float* dout, const float* x, const float* params,
                  const MoeOffsets& o, const MoeActs& a, const MoeScratch& s, const MoeDims& d,
                  float aux_grad, float* scratch_nc, const ExpertParallel* ep, Status* ep_status);

}  // namespace cann::model
