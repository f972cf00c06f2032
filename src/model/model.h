// Model: a gpt (causal LM) or bert (masked LM) transformer, dense or with MoE feed-forward
// layers, as a straight line of kernel calls over flat buffers (llm.c's shape). Forward saves
// what backward needs in one activation arena sized at creation (with recomputation, part of
// it: recompute.h); backward walks the same line in reverse and accumulates into the flat
// gradient buffer.
//
// Under tensor parallelism (see tensor_parallel.h) a Model is one rank's part: its ParamTable,
// flat buffers and activations hold only this rank's heads, MLP units and vocabulary slice,
// forward and backward are collectives over the tp group (every tp rank calls them with the
// same batch), and logits() is this rank's vocabulary slice. With tp = 1 no collective and no
// extra buffer exists.
//
// Under context parallelism (ContextParallel in tensor_parallel.h) a Model holds all of the
// model but only its cp rank's positions of every sequence: forward takes the whole (B,T)
// batch, keeps the rank's B x T/cp tokens, and attention and the loss are collectives over the
// cp group (context_parallel.cc). The loss and its gradient are the whole sequence's: the
// parameter gradients of the cp ranks sum to the single process's.
//
// Thread safety: none; one thread drives a Model (the kernels use the shared thread pool).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/status.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/rope.h"
#include "model/custom_op.h"
#include "model/expert_placement.h"
#include "model/moe_layer.h"
#include "model/param_table.h"
#include "model/recompute.h"
#include "model/spec.h"
#include "model/tensor_parallel.h"

namespace cann::model {

// One pipeline stage: layers [first_layer, end_layer) (end_layer -1: to the last), with the
// embeddings when first_layer == 0 and the final norm and head when end_layer is the last.
// `slots` sets of saved activations let several micro-batches be in flight (use_slot).
// Interleaved pipelining: `chunks`, when not empty, replaces [first_layer, end_layer) by
// several ascending layer ranges (the stage's model chunks, e.g. layers [0,1) and [2,3) of 4
// on stage 0 of 2); each chunk has the embeddings or the head when its range does, the
// parameters stay in one flat buffer (build_chunked_param_table), and each slot holds one
// chunk's activations (the slots are sized for the largest chunk and shared by all).
struct PipelineStage {
  int first_layer = 0;
  int end_layer = -1;
  int slots = 1;
  std::vector<LayerRange> chunks;
};

struct ForwardStats {
  double loss = 0.0;      // lm_loss + router_aux_loss_coef * aux_loss
  double lm_loss = 0.0;   // mean cross-entropy over scored positions
  double aux_loss = 0.0;  // sum over MoE layers of the load-balancing loss (unscaled)
  int scored = 0;         // positions with a target
};

class Model {
 public:
  // Sizes every buffer for batches up to max_batch sequences of up to max_seq tokens.
  // `recompute` decides what the layers keep for backward (model/recompute.h).
  static StatusOr<std::unique_ptr<Model>> create(const ModelSpec& spec, int max_batch, int max_seq,
                                                 const TensorParallel& tp = {},
                                                 const PipelineStage& stage = {},
                                                 const ExpertParallel& ep = {},
                                                 Recompute recompute = Recompute::kNone,
                                                 const ContextParallel& cp = {});

  const ModelSpec& spec() const { return spec_; }
  const ParamTable& table() const { return table_; }
  float* params() { return params_at_; }
  const float* params() const { return params_at_; }
  // The parameters live at `at` from now on (num_floats() floats, 64-byte aligned, kept alive
  // by the caller: an in-memory snapshot's mapping, train/state_keeper.h), copied there first
  // when `copy`; the model's own buffer is released. nullptr: back into a buffer of its own,
  // copied from where they were.
  void place_params(float* at, bool copy);
  float* grads() { return grads_.data(); }
  const float* grads() const { return grads_.data(); }
  size_t num_floats() const { return table_.total_floats(); }
  int max_batch() const { return max_batch_; }
  int max_seq() const { return max_seq_; }
  // Bytes of the activation arena plus backward scratch (and the recomputed layer's buffers).
  size_t activation_bytes() const;
  Recompute recompute() const { return recompute_; }

  const TensorParallel& tensor_parallel() const { return tp_; }
  const ContextParallel& context_parallel() const { return cp_; }

  // Pipeline stages. forward/backward act on the current activation slot (slot 0 unless
  // use_slot picked another); backward of a micro-batch must use the slot its forward used.
  // A stage without the embeddings reads its input from stage_input() (fill it before
  // forward), a stage without the head takes the gradient of its output in
  // stage_output_grad() (fill it before backward) and returns no loss; after backward a stage
  // without the embeddings leaves the gradient of its input in stage_input_grad(). Each holds
  // stage_io_floats(B, T) floats: B*T rows of hidden_size (this rank's rows under sp and cp).
  // With several chunks, use_slot also picks the chunk that forward, backward and the stage_*
  // buffers act on, and has_embedding / has_head describe that chunk.
  void use_slot(int slot, int chunk = 0);
  int num_slots() const { return static_cast<int>(slots_.size() / chunks_.size()); }
  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  bool has_embedding() const { return embed_; }
  bool has_head() const { return head_; }
  float* stage_input() { return encoded_; }
  const float* stage_output() const { return layers_.empty() ? encoded_ : layers_.back().out; }
  float* stage_output_grad() { return d_resid_; }
  const float* stage_input_grad() const { return d_resid_; }
  size_t stage_io_floats(int B, int T) const;
  // The first failure of a tensor- or expert-parallel collective since creation (OK with
  // tp = ep = 1). After a failure forward and backward skip the remaining collectives, so their
  // results are garbage: check this after each of them.
  const Status& tp_status() const { return tp_status_; }

  // GPT-2 initialization: N(0, 0.02) for matrices and wte, N(0, 0.01) for wpe, residual output
  // projections scaled by 1/sqrt(2 * layers), zeros for biases, ones for norm gains.
  void init_params(uint64_t seed);
  void zero_grads() { grads_.zero(); }

  // inputs and targets are (B,T) token ids; a target < 0 is not scored; targets may be null
  // (inference: logits only). Requires B <= max_batch, T <= max_seq, ids < vocab_size, with
  // context parallelism T divisible by 2*cp, and with sequence parallelism this rank's B*T/cp
  // tokens divisible by tp. Under cp the loss and scored count are the whole batch's.
  ForwardStats forward(const int* inputs, const int* targets, int B, int T);
  // Backward of the last forward (which must have had targets): grads += grad_scale * d(loss).
  // layer_done(l) is called as soon as the gradients of every tensor of layer l (ParamTable's
  // layer index: num_hidden_layers for the final norm, then the blocks downwards, -1 for the
  // embeddings last) are final, so their reduction can start while backward goes on.
  void backward(float grad_scale = 1.0f, const std::function<void(int)>& layer_done = {});
  // (B,T,V) logits of the last forward with targets == null (under cp: this rank's B x T/cp
  // positions, the sequence's last one on cp rank 0, at its last row).
  const float* logits() const { return logits_; }

  // When the blocks' parameters are read, for ZeRO stage 3, which gathers a block's parameters
  // into the flat buffer just before it is computed and releases them after. kForwardBegin
  // (layer -1) comes first in every forward: everything outside the blocks (embeddings, final
  // norm, head) must be in place from then until the next forward. Then per block l:
  // kBeforeForward / kAfterForward around its forward, kBeforeBackward / kAfterBackward around
  // its backward (kAfterBackward after layer_done(l)).
  enum class ParamUse {
    kForwardBegin,
    kBeforeForward,
    kAfterForward,
    kBeforeBackward,
    kAfterBackward
  };
  void set_param_hook(std::function<void(ParamUse, int)> hook) { param_hook_ = std::move(hook); }

  // Finer than layer_done, for the data-parallel reducer: during backward, hook(offset) says
  // that every gradient from float `offset` to the end of the flat buffer is final. Each block
  // reports, in this order, its feed-forward output projection (dense layers), its second
  // layernorm once the feed-forward half is done, its attention output projection and its QKV
  // projection, so buckets leave while the rest of the block is still being computed (the
  // tied token table is at offset 0, so it is never claimed early). Only passes given a
  // layer_done callback report: the last micro-batch's, whose gradients are the last to come.
  void set_grad_ready_hook(std::function<void(size_t)> hook) { grad_ready_hook_ = std::move(hook); }
  // Every offset the hook may report, ascending: where the reducer cuts its buckets.
  std::vector<size_t> grad_ready_offsets() const;

  int num_moe_layers() const { return static_cast<int>(moe_layers_.size()); }
  // The model layer of MoE layer i of the current chunk (in forward order).
  int moe_layer(int i) const;
  // Tokens kept per expert in MoE layer i (in forward order) during the last forward.
  std::span<const int> expert_counts(int i) const;
  // Expert chosen for each (token, k) in MoE layer i during the last forward, (N,K) row-major.
  // Not kept under Recompute::kFull (each layer keeps only its expert counts).
  std::span<const int> expert_assignments(int i) const;
  // Assignments dropped for lack of capacity in the last forward, over all MoE layers.
  long dropped_assignments() const;
  // Under ep: the routed rows this rank's experts computed in MoE layer i (in forward order)
  // during the last forward, from every rank of its expert group.
  long expert_rows(int i) const;

  // Expert parallelism: the expert held in each global slot of model layer `layer`, a MoE layer
  // of this stage (model/expert_placement.h); contiguous blocks until experts move.
  const ExpertSlots& expert_slots(int layer) const;
  // The model layers that have expert slots here: the MoE layers of every chunk of this stage.
  std::vector<int> expert_layers() const;
  // Where each expert of this rank's table lives in the whole model: the full tensor's expert
  // for (model layer, local slot j), i.e. expert_slots(layer)[ep rank * El + j] with El =
  // ceil(E/ep); kNoExpert for an empty slot.
  std::function<int(int, int)> expert_locator() const;
  // Expert slots of a MoE layer over the whole expert group: ep * ceil(E/ep), or E without ep.
  int expert_slot_count() const;
  // The contiguous placement of this model's experts over its expert group, and whether `slots`
  // is a placement of them over that group (model/expert_placement.h, is_placement).
  ExpertSlots identity_expert_slots() const;
  bool is_expert_placement(const ExpertSlots& slots) const;
  // Moves the experts of the MoE layers in `to` (model layer -> its new slots) to their new
  // ranks: the parameters and every array of `state` (laid out like the parameters: the
  // optimizer's moments) travel over the expert-parallel group, which all call this together
  // with the same `to`. Gradients do not move: call it between steps. On failure the
  // placement is unchanged only if no bytes were received; the caller treats it as a
  // communication failure.
  Status move_experts(const std::map<int, ExpertSlots>& to, const std::vector<float*>& state);
  // Says that this rank's expert buffers of `layer` hold the experts of `slots` (a restored
  // snapshot's placement); nothing moves.
  void set_expert_slots(int layer, const ExpertSlots& slots);
  // Expert parallelism: the experts of MoE layer `layer` (a model layer of this stage) that
  // every rank of the expert group holds a copy of and computes for its own tokens (MoeShadows
  // in moe_layer.h); empty: none. Every rank of the group sets the same, between steps.
  void set_expert_shadows(int layer, std::vector<int> experts);
  const std::vector<int>& expert_shadows(int layer) const;
  // Keeps room for `replicas` copies in every MoE layer of this stage from now on, so that
  // the memory the run reports at its start holds them (activation_bytes).
  void reserve_expert_shadows(int replicas);
  // The experts' weights changed (an optimizer step, a restore, a move): the copies are
  // refreshed from their owners at the next forward.
  void expert_weights_changed();

 private:
  // A tensor the spec does not have (a bias, RMSNorm's shift, QK-norm): kAbsent, and
  // opt(base, offset) is then null, which the kernels read as "none".
  static constexpr size_t kAbsent = static_cast<size_t>(-1);
  template <typename T>
  static T* opt(T* base, size_t offset) {
    return offset == kAbsent ? nullptr : base + offset;
  }
  struct LayerOffsets {
    size_t ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b;
    size_t q_norm = kAbsent, k_norm = kAbsent;          // QK-norm (Qwen3)
    // Multi-head latent attention (mla.cc): qkvw is then the layer's first attention tensor.
    // q_down / kv_down: the tensors replicated over tp from the down projection to its norm,
    // contiguous in the table ([q_a.w, q_a.b, q_a_norm.w], [kv_a.w, kv_a.b, kv_a_norm.w]).
    size_t q_a = kAbsent, q_a_b = kAbsent, q_a_norm = kAbsent, q_b = kAbsent, q = kAbsent;
    size_t kv_a = 0, kv_a_b = kAbsent, kv_a_norm = 0, kv_b = 0;
    size_t q_down_floats = 0, kv_down_floats = 0;
    // Dense layers: the MLP. MoE layers: the shared experts' MLP (0 without shared experts),
    // and Qwen2-MoE's gate on it.
    size_t fcw = 0, fcb = 0, fcprojw = 0, fcprojb = 0;
    size_t shared_gate = kAbsent;
    MoeOffsets moe;  // MoE layers
  };
  struct LayerActs {
    // lse: attention's log-sum-exp of each query's scores (B,H,T), what its backward needs.
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *lse, *atty, *resid_attn;
    float* kv = nullptr;  // cp > 1: every position's keys and values (B,T,2*kvh*head_size)
    // QK-norm: the q heads then the k heads before the norm, (N*nh + N*kvh, head_size), and
    // their 1/rms (N*nh + N*kvh).
    float *qk_raw = nullptr, *qk_rstd = nullptr;
    // MLA: q_a's output before and after its norm (N,q_lora) and 1/rms (N); the latent before
    // and after kv_a's norm (N,kv_lora) and 1/rms (N).
    float *q_lat = nullptr, *q_lat_n = nullptr, *q_lat_rstd = nullptr;
    float *kv_lat = nullptr, *kv_lat_n = nullptr, *kv_lat_rstd = nullptr;
    // fch and fch_gelu: the dense MLP's, or an MoE layer's shared experts'.
    float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *out;
    // Shared experts: their output (R,C) and, gated, each token's gate (R).
    float *shared_out = nullptr, *shared_gate = nullptr;
    int moe_index = -1;  // into moe_layers_
  };

  // A micro-batch's saved activations and shape; the current slot's live in the members below.
  struct Slot {
    std::vector<LayerActs> layers;
    std::vector<MoeActs> moe_layers;
    float *encoded = nullptr, *lnf = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr;
    float *logits = nullptr, *losses = nullptr;
    float *tp_rowmax = nullptr, *tp_sums = nullptr, *tp_shift = nullptr;
    int *inputs = nullptr, *targets = nullptr;
    int B = 0, T = 0, seq = 0, scored = 0;
    bool have_targets = false;
  };

  // Hands out 16-float aligned pieces of the float and int arenas; with null bases it only
  // counts (layout_activations' first pass).
  struct ArenaCarver {
    float* base = nullptr;
    int* ibase = nullptr;
    size_t used = 0, iused = 0;
    float* take(size_t n);
    int* itake(size_t n);
  };
  // What carve_layer lays out: everything; everything but the attention probabilities
  // (selective); the output alone, with an MoE layer's expert counts (full); everything but
  // the output (full recomputation's shared set).
  enum class Keep { kAll, kAllButLse, kOutput, kAllButOutput };

  Model(ModelSpec spec, const TensorParallel& tp, const PipelineStage& stage,
        const ExpertParallel& ep, const ContextParallel& cp);
  // Tokens of a micro-batch this rank holds at most: max_batch * max_seq / cp.
  size_t max_tokens() const;
  // The MoE layers' dimensions and router (moe_layer.h) for sequences of T rows.
  MoeDims moe_dims(int T) const;
  void layout_activations();
  // Layer l's saved tensors as `keep` says; MoE layers also push their MoeActs onto *moe.
  LayerActs carve_layer(ArenaCarver& arena, int l, Keep keep, std::vector<MoeActs>* moe);
  // The buffers recomputation shares between layers: one layer's probabilities (selective) or
  // one layer's tensors but its output, dense and MoE sets overlapping (full).
  void carve_recompute_buffers(ArenaCarver& arena);
  // Local layer i's forward from its input x; returns the MoE aux loss. With `recomputing`
  // (full recomputation, in backward) the tensors are rebuilt in the shared set and the
  // layer's output is not produced (backward does not read it).
  double layer_forward(int i, const float* x, bool recomputing);
  // Full recomputation keeps each MoE layer's expert counts and shape in `kept` (what
  // expert_counts() reports) from the shared `routed`; recomputing, checks that the routing
  // came out the same.
  void record_routing(MoeActs& kept, const MoeActs& routed, bool recomputing) const;
  // The tensors local layer i's backward reads: its own, or the shared buffers refilled by
  // recomputation from x_in, its input. *moe gets its MoeActs (MoE layers).
  LayerActs backward_acts(int i, const float* x_in, const MoeActs** moe);
  // Makes chunk c current: its layer range, offsets and whether it has the embeddings or head.
  void select_chunk(int c);
  void save_slot(int i);
  void load_slot(int i);
  // Tensor-parallel plumbing; each records the first failure in tp_status_ and then does nothing.
  void tp_allreduce(float* data, size_t count);
  const float* tp_gather_rows(const float* mine, int rows);
  void tp_reduce_scatter(float* out, const float* full, size_t rows_per_rank, int width);
  // Row-parallel output: partial (N,C) summed over ranks into out (all of it, or this rank's
  // rows under sp). Without sp out must be partial.
  void tp_row_parallel_out(float* out, float* partial, int N);
  // Gradient into a column-parallel linear's input: d (N,C) partial, summed; returns where the
  // result for this rank's rows lies (d itself, or tp_full_ under sp).
  float* tp_column_parallel_dinput(float* d, int N);
  // Layernorm backward whose weight gradients are partial under sp (each rank saw its rows):
  // computed into scratch, summed over the ranks, then accumulated.
  void norm_backward_tp(float* dx, float* dw, float* db, const float* dy, const float* x,
                        const float* w, const float* mean, const float* rstd, int rows, int C);
  // The block pieces of today's families (model_blocks.cc). The spec's norm (LayerNorm, or
  // RMSNorm with null mean and bias) over rows of C.
  void norm_forward(float* y, float* mean, float* rstd, const float* x, const float* w,
                    const float* b, int rows, int C) const;
  // Qwen3's RMSNorm over each q and k head of the layer's qkv rows (N of them), in place; the
  // inputs are kept in a.qk_raw for backward, which turns d(normed) in d_qkv_ into d(raw) and
  // adds the weight gradients (summed over the tp ranks, each of which saw its heads only).
  void qk_norm_forward(const LayerActs& a, const LayerOffsets& o, int N);
  void qk_norm_backward(const LayerActs& a, const LayerOffsets& o, int N);
  // Rotary embedding of the q and k heads of qkv rows (N = B_*T_), or its backward on d_qkv_.
  void rope_qk(float* qkv, int N, bool backward);
  // Multi-head latent attention (mla.cc): a.qkv from the normed input x (N rows, gathered under
  // sp), with the rotary part rotated; and from d_qkv_ (rotated) the parameter gradients and
  // d_ln_ = d(x) (partial over tp). Its scratch and the tp sums of the replicated tensors are
  // mla.cc's too.
  void mla_forward(const LayerActs& a, const LayerOffsets& o, const float* x, int N);
  void mla_backward(const LayerActs& a, const LayerOffsets& o, const float* x, int N);
  // Positions of this rank's B_*T_ rows (global positions under cp).
  const int* rope_positions();
  // The MLP's activation: GeLU of fch, SwiGLU of fch's [gate | up] halves, or a user's op
  // (model/custom_op.h).
  void mlp_activation_forward(float* act, const float* fch, int N, int F);
  // d(fch) from d(act) (in d_act, (N,F)) into dfch.
  void mlp_activation_backward(float* dfch, const float* d_act, const float* fch, int N, int F);
  // A user's kFullRow op under tensor parallelism: on whole rows gathered over the tp ranks;
  // forward when dy is null (out = y), else backward (out = dx).
  void full_row_activation(float* out, const float* x, const float* dy, int N, int F);
  void vocab_parallel_loss(int N);
  // Context parallelism (context_parallel.cc); each records the first failure in tp_status_.
  // The global positions of this rank's T/cp rows of a sequence of T (cached in cp_pos_).
  const int* cp_positions(int T);
  // This rank's rows of a (B,T) id buffer into local: all of them, or under cp its (B,T/cp).
  void select_rows(int* local, const int* global, int B, int T) const;
  // Token and position embedding of the rank's rows, positions global (under tp, the
  // vocabulary-parallel form, reduced as forward does), and its backward from dout.
  void cp_embedding_forward(int B);
  void cp_embedding_backward(const float* dout, int B);
  // Every position's keys and values (B,seq,2*kvh*hs) into kv, from each rank's rows of qkv.
  void cp_gather_kv(float* kv, const float* qkv);
  // d_kv_ (every position's key/value gradients from this rank's queries) summed over the
  // ranks, each rank's own rows into the key/value columns of dqkv.
  void cp_scatter_dkv(float* dqkv);
  // The attention kernels' shapes for the current batch: the whole sequence, or this rank's
  // queries against every position (cp).
  kernels::AttentionShape whole_attention() const;
  kernels::ContextAttentionShape context_attention();
  // Attention of the current layer: whole-sequence, or this rank's queries against kv.
  void attention_fwd(const LayerActs& a);
  void attention_bwd(const LayerActs& a);
  void attention_lse(float* lse, const LayerActs& a);
  // Sum of losses and scored positions over the cp ranks (in place).
  void cp_sum_loss(double* sum, int* scored);
  // Under sp an MoE layer's weight gradients are partial (each rank's experts saw its own
  // tokens, its router only its tokens' gates). What they hold before the layer's backward is
  // whole and equal on every rank (earlier micro-steps): begin zeroes it on all ranks but
  // rank 0, the backward adds each rank's part, and end all-reduces, so every rank holds
  // old + the sum of the parts (the all-reduce gives all ranks the same bits). No scratch:
  // an MoE layer's gradients can be large, unlike the layernorms' (layernorm_backward_tp).
  void moe_grads_sum_begin(const MoeOffsets& o);
  void moe_grads_sum_end(const MoeOffsets& o);
  // The shared experts of an MoE layer (moe_shared.cc): a dense MLP split over tp like the
  // dense layers', on every token, its output added to `out` (this rank's R rows, holding the
  // routed experts' output), scaled by Qwen2-MoE's gate where the spec has it. ln2_all is the
  // layer input for all N tokens (gathered under sp).
  void shared_experts_forward(const LayerActs& a, const LayerOffsets& o, const float* ln2_all,
                              float* out, int N);
  // Backward from d_resid_ (the layer output's gradient), after moe_backward left the routed
  // path's input gradient in d_ln_ (partial under sp): adds the shared experts' parameter
  // gradients and their input gradient, and returns the whole input gradient of this rank's
  // rows (d_ln_, or under sp its reduce-scatter).
  float* shared_experts_backward(const LayerActs& a, const LayerOffsets& o, int N);

  ModelSpec spec_;
  TensorParallel tp_;
  ExpertParallel ep_;
  // Under ep: each MoE layer's slots by model layer (empty for the others).
  std::vector<ExpertSlots> expert_slots_;
  std::vector<float> move_send_, move_recv_, move_block_;  // move_experts' buffers
  // Replicated experts per model layer (set_expert_shadows), and their shared scratch.
  std::vector<MoeShadows> shadows_;
  MoeShadowScratch shadow_scratch_;
  int shadow_room_ = 0;  // copies reserved per layer (reserve_expert_shadows)
  // What each forward saves of the copies, per activation slot and model layer
  // (slots_.size() x num_hidden_layers), its rows in shadow_acts_: like the arena, a slot's
  // chunks share one region, as large as the chunk with the most MoE layers needs.
  std::vector<MoeShadowRows> shadow_saved_;
  std::vector<float> shadow_acts_;
  // The replicated experts of model layer l wired into md (none: left as it is).
  void wire_shadows(MoeDims& md, int l);
  // The current slot's saved copies of model layer l.
  MoeShadowRows& saved_shadows(int l);
  const MoeShadowRows& saved_shadows(int l) const;
  // The offsets of model layer l, a layer of some chunk of this stage.
  const LayerOffsets& offsets_for_layer(int l) const;
  size_t shadow_bytes() const;
  ContextParallel cp_;
  Status tp_status_;  // the first failure of any of the model's collectives (tp or ep)
  const ActivationOp* custom_act_ = nullptr;  // spec_.custom_activation's op
  std::vector<float> custom_gather_, custom_x_, custom_dy_, custom_out_;  // its tp scratch
  std::function<void(ParamUse, int)> param_hook_;
  std::function<void(size_t)> grad_ready_hook_;
  Recompute recompute_ = Recompute::kNone;
  // Recomputation's shared buffers (recompute.cc): selective, one layer's attention
  // log-sum-exp; full, one dense and one MoE layer's tensors (overlapping: one layer is
  // recomputed at a time).
  float* recompute_lse_ = nullptr;
  LayerActs recompute_dense_{}, recompute_moe_{};
  MoeActs recompute_moe_acts_{};
  // This rank's widths: heads, kv heads, attention output (heads * value head size), fused QKV,
  // MLP hidden, vocabulary rows held (with padding), of which valid, starting at vocab_begin_.
  int nh_ = 0, kvh_ = 0, attn_c_ = 0, qkv_ = 0, ff_ = 0, vocab_ = 0, vocab_valid_ = 0;
  int shared_ff_ = 0;  // the shared experts' MLP width on this rank
  int vocab_begin_ = 0;
  // Query/key and value head sizes (MLA: qk_nope + qk_rope and v_head_dim), the query columns
  // of a qkv row (where the keys start), where the rotary part starts in a q/k head, and the
  // attention's score scale (0: 1/sqrt(qk_hs_)).
  int qk_hs_ = 0, v_hs_ = 0, q_cols_ = 0, rope_offset_ = 0;
  float attn_scale_ = 0.0f;
  // Pipeline stage: the current chunk's layers [first_layer_, end_layer_); offsets_ and layers_
  // are indexed from first_layer_. holds_embed_ / holds_head_: some chunk has them.
  std::vector<LayerRange> chunks_;
  std::vector<size_t> chunk_offsets_;  // where each chunk's layers start in all_offsets_
  int chunk_ = 0;
  int first_layer_ = 0, end_layer_ = 0;
  bool embed_ = true, head_ = true, holds_embed_ = true, holds_head_ = true;
  // Slot s of chunk c is slots_[s * chunks + c]; slot_ indexes slots_.
  std::vector<Slot> slots_;
  int slot_ = 0;
  ParamTable table_;
  int max_batch_ = 0, max_seq_ = 0;
  AlignedBuffer<float> own_params_, grads_;
  float* params_at_ = nullptr;  // own_params_ unless placed elsewhere
  AlignedBuffer<float> acts_;
  AlignedBuffer<int> ints_;
  size_t wte_ = 0, wpe_ = kAbsent, lnfw_ = 0, lnfb_ = kAbsent;
  size_t head_w_ = 0;  // the output head: wte (tied) or lm_head
  // Rotary positions: the cos/sin table and the positions of the current batch's rows.
  kernels::RopeTable rope_;
  // The families' MoE router (used when moe_router_ is set; gpt/bert specs use GShard's).
  kernels::RouterConfig router_;
  bool moe_router_ = false;
  std::vector<int> rope_pos_;
  int rope_pos_B_ = 0, rope_pos_T_ = 0;
  std::vector<LayerOffsets> all_offsets_;  // every chunk's layers, chunk after chunk
  std::span<const LayerOffsets> offsets_;  // the current chunk's
  std::vector<LayerActs> layers_;
  std::vector<MoeActs> moe_layers_;
  float *encoded_ = nullptr, *lnf_ = nullptr, *lnf_mean_ = nullptr, *lnf_rstd_ = nullptr;
  float *logits_ = nullptr, *losses_ = nullptr;
  // Backward scratch, reused by every layer.
  float *d_resid_ = nullptr, *d_branch_ = nullptr, *d_ln_ = nullptr, *d_atty_ = nullptr;
  float *d_qkv_ = nullptr, *d_fch_ = nullptr, *d_act_ = nullptr;
  // QK-norm scratch: the normed heads in forward, their gradient and the input's in backward.
  float* d_qk_ = nullptr;
  // MLA scratch, in forward and backward: q (N, heads*qk), kv_b's output (N, heads*(nope+v)),
  // kv_a's output (N, kv_lora+rope), two latent-wide buffers (N, max(q_lora, kv_lora)) and d(x)
  // of the query path (N,C).
  float *mla_q_ = nullptr, *mla_kvb_ = nullptr, *mla_kva_ = nullptr;
  float *mla_lat_ = nullptr, *mla_lat2_ = nullptr, *mla_dx_ = nullptr;
  float* d_shared_x_ = nullptr;  // shared experts: their input gradient (N,C)
  MoeScratch moe_scratch_;
  // Tensor parallelism only (null with tp = 1): a full (N,C) staging buffer for partial sums and
  // gathered gradients; per-row max, sums and shift of the vocabulary-parallel loss; layernorm
  // weight-gradient scratch under sp.
  float *tp_full_ = nullptr, *tp_rowmax_ = nullptr, *tp_sums_ = nullptr, *tp_shift_ = nullptr;
  float* tp_lngrad_ = nullptr;
  float* tp_qkgrad_ = nullptr;  // QK-norm weight-gradient scratch (2 * head_size)
  // Context parallelism only (null with cp = 1): the gathered keys and values in rank order
  // (cp blocks of B x T/cp rows, also the reduce-scatter's input), every position's key/value
  // gradients, and this rank's reduced ones. cp_pos_ holds the positions for a sequence of
  // cp_pos_seq_.
  float *cp_blocks_ = nullptr, *d_kv_ = nullptr, *cp_local_ = nullptr;
  std::vector<int> cp_pos_;
  int cp_pos_seq_ = 0;
  // An MoE layer's gradient floats, router to last expert bias (contiguous in the table).
  size_t moe_grad_floats_ = 0;
  int *inputs_ = nullptr, *targets_ = nullptr;
  // Shape of the last forward: B_ sequences of T_ rows on this rank (seq_ / cp of a sequence
  // of seq_ under cp).
  int B_ = 0, T_ = 0, seq_ = 0, scored_ = 0;
  bool have_targets_ = false;
};

}  // namespace cann::model
