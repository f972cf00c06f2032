// Building a Model: the checks on a spec and a layout before anything is allocated, the
// parameter offsets of every layer, the rotary table and the MoE router of the spec's family.
// The passes themselves are model.cc's.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/rope_scaling.h"
#include "model/engine_support.h"
#include "model/model.h"

namespace cann::model {

using namespace cann::kernels;

namespace {

// The kernels' rope config for the spec's rotary positions (rotary part of every head).
kernels::RopeConfig rope_config(const ModelSpec& s) {
  const RopeSpec& r = s.rope;
  kernels::RopeConfig c;
  c.theta = r.theta;
  // MLA rotates the qk_rope_head_dim part of each query/key head.
  c.rotary_dim = s.mla_enabled ? s.mla.qk_rope_head_dim
                               : static_cast<int>(s.head_size() * r.partial_rotary_factor) / 2 * 2;
  c.scaling = static_cast<kernels::RopeScaling>(static_cast<int>(r.scaling));
  c.factor = r.factor;
  c.low_freq_factor = r.low_freq_factor;
  c.high_freq_factor = r.high_freq_factor;
  c.original_max_position_embeddings =
      r.original_max_position > 0 ? r.original_max_position : s.max_position_embeddings;
  c.beta_fast = r.beta_fast;
  c.beta_slow = r.beta_slow;
  c.mscale = r.mscale;
  c.mscale_all_dim = r.mscale_all_dim;
  c.attention_factor = r.attention_factor;
  c.truncate = r.truncate;
  return c;
}

// The stage's layer ranges: its chunks, or the one range [first_layer, end_layer).
std::vector<LayerRange> stage_chunks(const ModelSpec& s, const PipelineStage& stage) {
  if (!stage.chunks.empty()) return stage.chunks;
  return {{stage.first_layer, stage.end_layer < 0 ? s.num_hidden_layers : stage.end_layer}};
}

}  // namespace

Model::Model(ModelSpec spec, const TensorParallel& tp, const PipelineStage& stage,
             const ExpertParallel& ep, const ContextParallel& cp)
    : spec_(std::move(spec)),
      tp_(tp),
      ep_(ep),
      cp_(cp),
      chunks_(stage_chunks(spec_, stage)),
      table_(build_chunked_param_table(spec_, tp.size, chunks_, ep.size)) {
  if (!spec_.custom_activation.empty()) {
    custom_act_ = find_activation(spec_.custom_activation);
    CANN_CHECK(custom_act_ != nullptr) << "activation " << spec_.custom_activation
                                       << " read from the spec but not registered";
  }
  holds_embed_ = holds_head_ = false;
  if (ep_.size > 1) {
    expert_slots_.resize(static_cast<size_t>(spec_.num_hidden_layers));
    for (const LayerRange& c : chunks_)
      for (int l = c.first; l < c.end; ++l)
        if (spec_.is_moe_layer(l))
          expert_slots_[l] = identity_slots(spec_.num_local_experts, ep_.size);
  }
  for (const LayerRange& c : chunks_) {
    holds_embed_ = holds_embed_ || c.first == 0;
    holds_head_ = holds_head_ || c.end == spec_.num_hidden_layers;
  }
  const int t = tp_.size;
  nh_ = spec_.num_attention_heads / t;
  // MLA: every query head has its own key and value head (from the latent's up projection).
  kvh_ = spec_.mla_enabled ? nh_ : spec_.num_key_value_heads / t;
  qk_hs_ = spec_.mla_enabled ? spec_.mla.qk_head_dim() : spec_.head_size();
  v_hs_ = spec_.mla_enabled ? spec_.mla.v_head_dim : spec_.head_size();
  rope_offset_ = spec_.mla_enabled ? spec_.mla.qk_nope_head_dim : 0;
  q_cols_ = nh_ * qk_hs_;
  attn_c_ = nh_ * v_hs_;
  qkv_ = (nh_ + kvh_) * qk_hs_ + kvh_ * v_hs_;
  ff_ = spec_.intermediate_size / t;
  shared_ff_ = spec_.has_shared_experts() ? spec_.shared_expert_intermediate_size / t : 0;
  vocab_ = (spec_.vocab_size + t - 1) / t;
  vocab_begin_ = std::min(spec_.vocab_size, tp_.rank * vocab_);
  vocab_valid_ = std::min(vocab_, spec_.vocab_size - vocab_begin_);
}

StatusOr<std::unique_ptr<Model>> Model::create(const ModelSpec& spec, int max_batch, int max_seq,
                                               const TensorParallel& tp, const PipelineStage& stage,
                                               const ExpertParallel& ep, Recompute recompute,
                                               const ContextParallel& cp) {
  CANN_RETURN_IF_ERROR(engine_builds(spec));
  if (max_batch <= 0 || max_seq <= 0)
    return InvalidArgument("batch size and sequence length must be positive");
  if (max_seq > spec.position_rows())
    return InvalidArgument("sequence length " + std::to_string(max_seq) + " exceeds the model's " +
                           "position table of " + std::to_string(spec.position_rows()) + " (" +
                           spec.source + "); hint: lower --seq-len");
  if (tp.size > 1) {
    CANN_RETURN_IF_ERROR(check_tp_divides(spec, tp.size));
    if (tp.comm == nullptr || tp.rank < 0 || tp.rank >= tp.size)
      return InvalidArgument("tensor parallelism needs a communicator and a rank in [0, tp)");
    // Under sp each rank computes the experts for its own tokens after all of them are routed
    // (moe_layer.h); expert parallelism exchanges every routed row and takes no token shard.
    if (tp.sequence_parallel && spec.is_moe() && ep.size > 1)
      return InvalidArgument("model '" + spec.name +
                             "': sequence parallelism with MoE layers does not combine with "
                             "expert parallelism ep=" +
                             std::to_string(ep.size) + "; hint: use sp=off or ep=1");
  }
  if (cp.size > 1) {
    if (cp.comm == nullptr || cp.rank < 0 || cp.rank >= cp.size)
      return InvalidArgument("context parallelism needs a communicator and a rank in [0, cp)");
    // Each rank would route only its positions, so capacities and drops would differ from the
    // single process's (routing depends on which tokens share a micro-batch).
    if (spec.is_moe())
      return InvalidArgument("model '" + spec.name +
                             "': context parallelism cp=" + std::to_string(cp.size) +
                             " with MoE layers is not available in this build; hint: use cp=1 "
                             "for MoE models");
    if (max_seq % (2 * cp.size) != 0)
      return InvalidArgument("sequence length " + std::to_string(max_seq) +
                             " does not split into " + "2*cp = " + std::to_string(2 * cp.size) +
                             " equal chunks (context parallelism); hint: pick a --seq-len that "
                             "is a multiple of " +
                             std::to_string(2 * cp.size));
  }
  // One range may be empty; several (interleaved chunks) must each hold a layer, in order.
  const std::vector<LayerRange> chunks = stage_chunks(spec, stage);
  int prev_end = 0;
  for (const LayerRange& c : chunks) {
    const bool empty_ok = chunks.size() == 1;
    if (c.first < prev_end || c.first > c.end || (c.first == c.end && !empty_ok) ||
        c.end > spec.num_hidden_layers || stage.slots < 1)
      return InvalidArgument("pipeline stage with layers [" + std::to_string(c.first) + ", " +
                             std::to_string(c.end) + ") and " + std::to_string(stage.slots) +
                             " activation slots does not fit model '" + spec.name + "' with " +
                             std::to_string(spec.num_hidden_layers) +
                             " layers (chunks must be non-empty and ascending)");
    prev_end = c.end;
  }
  if (ep.size > 1 && (!spec.is_moe() || spec.num_local_experts < ep.size || ep.comm == nullptr ||
                      ep.rank < 0 || ep.rank >= ep.size))
    return InvalidArgument("expert parallelism ep=" + std::to_string(ep.size) +
                           " needs a model with at least one expert per rank (model '" + spec.name +
                           "' has " + std::to_string(spec.num_local_experts) + " experts)");
  std::unique_ptr<Model> m(new Model(spec, tp.size > 1 ? tp : TensorParallel{}, stage,
                                     ep.size > 1 ? ep : ExpertParallel{},
                                     cp.size > 1 ? cp : ContextParallel{}));
  m->slots_.resize(static_cast<size_t>(stage.slots) * m->chunks_.size());
  m->recompute_ = recompute;
  m->max_batch_ = max_batch;
  m->max_seq_ = max_seq;
  m->own_params_.resize(m->table_.total_floats());
  m->params_at_ = m->own_params_.data();
  m->grads_.resize(m->table_.total_floats());
  auto off = [&](const std::string& name) { return m->table_.at(*m->table_.find(name)).offset; };
  auto opt_off = [&](const std::string& name) {
    auto i = m->table_.find(name);
    return i.ok() ? m->table_.at(*i).offset : kAbsent;
  };
  if (m->holds_embed_) m->wte_ = off("wte");
  if (m->holds_embed_) m->wpe_ = opt_off("wpe");
  if (m->holds_head_) {
    m->lnfw_ = off("lnf.w");
    m->lnfb_ = opt_off("lnf.b");
    m->head_w_ = off(spec.tie_word_embeddings ? "wte" : "lm_head");
  }
  // GShard's router stays what gpt/bert specs train with; the families (and any spec asking
  // for normalized weights, dropless routing, the sequence-wise loss or the noaux_tc bias)
  // take theirs.
  const bool gshard = (spec.family == Family::kGpt2 || spec.family == Family::kBert) &&
                      !spec.norm_topk_prob && spec.routing == MoeRouting::kCapacity &&
                      spec.aux_loss == AuxLoss::kBatch && spec.topk_method == TopkMethod::kGreedy;
  if (spec.is_moe() && !gshard) {
    kernels::RouterConfig& r = m->router_;
    r.E = spec.num_local_experts;
    r.K = spec.num_experts_per_tok;
    r.score = spec.router_score == RouterScore::kSigmoid ? kernels::RouterScore::kSigmoid
                                                          : kernels::RouterScore::kSoftmax;
    r.norm_topk_prob = spec.norm_topk_prob;
    // DeepSeek-V2's MoEGate scales the weights only when it does not normalize them
    // (modeling_deepseek.py, MoEGate.forward); DeepSeek-V3 scales after normalizing.
    const bool v2_normalized = spec.family == Family::kDeepseekV2 && spec.norm_topk_prob &&
                               spec.num_experts_per_tok > 1;
    r.routed_scaling_factor =
        v2_normalized ? 1.0f : static_cast<float>(spec.routed_scaling_factor);
    if (spec.topk_method != TopkMethod::kGreedy) {
      r.n_group = spec.n_group;
      r.topk_group = spec.topk_group;
      r.group_ranking = spec.topk_method == TopkMethod::kNoAuxTc ? kernels::GroupRanking::kTopTwoSum
                                                                 : kernels::GroupRanking::kMaxScore;
    }
    CANN_RETURN_IF_ERROR(kernels::check_router_config(r));
    m->moe_router_ = true;
  }
  if (spec.positions == PositionKind::kRotary) {
    auto freqs = kernels::rope_frequencies(rope_config(spec));
    if (!freqs.ok())
      return InvalidArgument("model '" + spec.name + "' (" + spec.source +
                             "): rotary positions: " + freqs.status().message());
    m->rope_ = kernels::rope_table(*freqs, spec.position_rows());
    // DeepSeek's softmax scale carries yarn's mscale_all_dim factor (rope_scaling.h); the
    // other families keep 1/sqrt(head_dim).
    if (spec.mla_enabled)
      m->attn_scale_ = freqs->softmax_scale_factor / std::sqrt(static_cast<float>(m->qk_hs_));
  }
  for (const LayerRange& chunk : m->chunks_) {
    m->chunk_offsets_.push_back(m->all_offsets_.size());
    for (int l = chunk.first; l < chunk.end; ++l) {
      const std::string p = "h." + std::to_string(l) + ".";
      LayerOffsets o{};
      o.ln1w = off(p + "ln1.w");
      o.ln1b = opt_off(p + "ln1.b");
      if (spec.mla_enabled) {
        // The q-down tensors (or the plain q projection) come first in the layer's attention.
        o.q_a = opt_off(p + "attn.q_a.w");
        o.q_a_b = opt_off(p + "attn.q_a.b");
        o.q_a_norm = opt_off(p + "attn.q_a_norm.w");
        o.q_b = opt_off(p + "attn.q_b.w");
        o.q = opt_off(p + "attn.q.w");
        o.kv_a = off(p + "attn.kv_a.w");
        o.kv_a_b = opt_off(p + "attn.kv_a.b");
        o.kv_a_norm = off(p + "attn.kv_a_norm.w");
        o.kv_b = off(p + "attn.kv_b.w");
        const size_t kv_lora = spec.mla.kv_lora_rank;
        o.kv_down_floats = o.kv_a_norm + kv_lora - o.kv_a;
        if (o.q_a != kAbsent) o.q_down_floats = o.q_a_norm + spec.mla.q_lora_rank - o.q_a;
        o.qkvw = o.q_a != kAbsent ? o.q_a : o.q;
        o.qkvb = kAbsent;
      } else {
        o.qkvw = off(p + "attn.qkv.w");
        o.qkvb = opt_off(p + "attn.qkv.b");
      }
      o.q_norm = opt_off(p + "attn.q_norm.w");
      o.k_norm = opt_off(p + "attn.k_norm.w");
      o.projw = off(p + "attn.proj.w");
      o.projb = opt_off(p + "attn.proj.b");
      o.ln2w = off(p + "ln2.w");
      o.ln2b = opt_off(p + "ln2.b");
      if (spec.is_moe_layer(l)) {
        o.moe.routerw = off(p + "moe.router.w");
        o.moe.fcw = off(p + "moe.fc.w");
        o.moe.fcb = opt_off(p + "moe.fc.b");
        o.moe.projw = off(p + "moe.proj.w");
        o.moe.projb = opt_off(p + "moe.proj.b");
        o.moe.router_bias = opt_off(p + "moe.router.bias");
        if (spec.has_shared_experts()) {
          o.fcw = off(p + "moe.shared.fc.w");
          o.fcb = opt_off(p + "moe.shared.fc.b");
          o.fcprojw = off(p + "moe.shared.proj.w");
          o.fcprojb = opt_off(p + "moe.shared.proj.b");
          o.shared_gate = opt_off(p + "moe.shared_gate.w");
        }
        // The router and the routed experts are contiguous, from the router to the last
        // expert tensor (the shared experts follow them).
        size_t end = 0;
        for (const TensorInfo& t : m->table_.tensors())
          if (t.name.starts_with(p + "moe.") && !t.name.starts_with(p + "moe.shared"))
            end = std::max(end, t.offset + t.numel);
        m->moe_grad_floats_ = end - o.moe.routerw;
      } else {
        o.fcw = off(p + "mlp.fc.w");
        o.fcb = opt_off(p + "mlp.fc.b");
        o.fcprojw = off(p + "mlp.proj.w");
        o.fcprojb = opt_off(p + "mlp.proj.b");
      }
      m->all_offsets_.push_back(o);
    }
  }
  m->layout_activations();
  return m;
}

MoeDims Model::moe_dims(int T) const {
  const ModelSpec& s = spec_;
  MoeDims d{s.hidden_size, s.moe_intermediate_size, s.num_local_experts, s.num_experts_per_tok,
            s.capacity_factor};
  d.swiglu = s.mlp == MlpKind::kSwiGlu;
  if (!moe_router_) return d;
  d.dropless = s.routing == MoeRouting::kDropless;
  d.router = &router_;
  d.seq_aux = s.aux_loss == AuxLoss::kSequence;
  d.seq = T;
  return d;
}

}  // namespace cann::model
