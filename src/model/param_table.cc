// ParamTable construction and queries.
#include "model/param_table.h"

#include <algorithm>

#include "model/expert_placement.h"

namespace cann::model {

size_t ParamTable::add(std::string name, std::vector<int64_t> shape, int layer, TpSplit split,
                       bool decay, bool expert) {
  TensorInfo t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.numel = 1;
  for (int64_t d : t.shape) t.numel *= static_cast<size_t>(d);
  t.offset = (total_ + kAlign - 1) / kAlign * kAlign;
  t.layer = layer;
  t.tp_split = split;
  t.weight_decay = decay;
  t.expert = expert;
  t.full_shape = t.shape;
  total_ = t.offset + t.numel;
  tensors_.push_back(std::move(t));
  return tensors_.size() - 1;
}

size_t ParamTable::add_sharded(std::string name, std::vector<int64_t> full, int layer,
                               TpSplit split, bool decay, int tp, std::vector<int64_t> parts) {
  std::vector<int64_t> shape = full;
  if (tp > 1 && split == TpSplit::kRow) {
    shape.back() /= tp;
  } else if (tp > 1 && (split == TpSplit::kColumn || split == TpSplit::kVocab)) {
    if (parts.empty()) parts = {full[0]};
    shape[0] = 0;
    for (int64_t p : parts) shape[0] += (p + tp - 1) / tp;
  }
  const size_t i = add(std::move(name), std::move(shape), layer, split, decay);
  tensors_[i].full_shape = std::move(full);
  if (tp > 1 && (split == TpSplit::kColumn || split == TpSplit::kVocab))
    tensors_[i].tp_parts = std::move(parts);
  return i;
}

StatusOr<size_t> ParamTable::find(const std::string& name) const {
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (tensors_[i].name == name) return i;
  return NotFound("no parameter tensor named '" + name + "'");
}

size_t ParamTable::num_parameters() const {
  size_t n = 0;
  for (const auto& t : tensors_)
    if (t.trained) n += t.numel;
  return n;
}

std::pair<size_t, size_t> ParamTable::layer_range(int layer) const {
  size_t begin = total_, end = 0;
  for (const auto& t : tensors_) {
    if (t.layer != layer) continue;
    begin = std::min(begin, t.offset);
    end = std::max(end, t.offset + t.numel);
  }
  if (begin > end) return {0, 0};
  return {begin, end};
}

uint64_t ParamTable::fingerprint() const {
  // FNV-1a over names, shapes and offsets.
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&](const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ULL;
  };
  for (const auto& t : tensors_) {
    mix(t.name.data(), t.name.size());
    for (int64_t d : t.shape) mix(&d, sizeof(d));
    mix(&t.offset, sizeof(t.offset));
  }
  return h;
}

Status check_tp_divides(const ModelSpec& s, int tp) {
  if (tp < 1) return InvalidArgument("tp=" + std::to_string(tp) + ": must be at least 1");
  auto refuse = [&](const char* what, int n) {
    return InvalidArgument("tp=" + std::to_string(tp) + " does not divide " + what + " " +
                           std::to_string(n) + " of model '" + s.name +
                           "'; hint: pick a tp that divides the attention heads, the kv heads "
                           "and the intermediate size");
  };
  if (s.num_attention_heads % tp != 0) return refuse("num_attention_heads", s.num_attention_heads);
  if (s.num_key_value_heads % tp != 0) return refuse("num_key_value_heads", s.num_key_value_heads);
  if (s.hidden_size % tp != 0) return refuse("hidden_size", s.hidden_size);
  if (s.intermediate_size % tp != 0) return refuse("intermediate_size", s.intermediate_size);
  if (s.has_shared_experts() && s.shared_expert_intermediate_size % tp != 0)
    return refuse("the shared experts' width", s.shared_expert_intermediate_size);
  return OkStatus();
}

namespace {

// Calls fn(shard_offset, full_offset, len) for each contiguous run of the shard, in shard
// order; a run with full_offset == SIZE_MAX is padding. Worked example: qkv.w of a model with
// 4 heads, 2 kv heads, head size 8, C = 32 has full shape (128, 32) and parts {32, 16, 16};
// over tp = 2, rank 1's shard has rows 16..31 (its 2 q heads), 40..47 (its k head) and
// 56..63 (its v head): three runs of 16*32, 8*32 and 8*32 floats.
template <typename Fn>
void for_each_shard_run(const TensorInfo& t, int rank, int tp, Fn fn) {
  constexpr size_t kPad = static_cast<size_t>(-1);
  if (tp == 1 || t.tp_split == TpSplit::kReplicated) {
    fn(size_t{0}, size_t{0}, t.numel);
    return;
  }
  const auto& full = t.full_shape;
  if (t.tp_split == TpSplit::kRow) {
    const size_t cols = static_cast<size_t>(full.back()), local = cols / tp;
    const size_t rows = t.numel / local;
    for (size_t r = 0; r < rows; ++r) fn(r * local, r * cols + rank * local, local);
    return;
  }
  const size_t inner = t.numel / static_cast<size_t>(t.shape[0]);
  size_t shard_row = 0, part_begin = 0;
  for (int64_t p : t.tp_parts) {
    const size_t part = static_cast<size_t>(p), local = (part + tp - 1) / tp;
    const size_t first = rank * local;
    const size_t valid = first >= part ? 0 : std::min(local, part - first);
    if (valid > 0) fn(shard_row * inner, (part_begin + first) * inner, valid * inner);
    if (valid < local) fn((shard_row + valid) * inner, kPad, (local - valid) * inner);
    shard_row += local;
    part_begin += part;
  }
}

}  // namespace

void copy_tp_shard(const TensorInfo& t, const float* full, float* shard, int rank, int tp) {
  for_each_shard_run(t, rank, tp, [&](size_t s, size_t f, size_t n) {
    if (f == static_cast<size_t>(-1))
      std::fill(shard + s, shard + s + n, 0.0f);
    else
      std::copy(full + f, full + f + n, shard + s);
  });
}

void place_tp_shard(const TensorInfo& t, const float* shard, float* full, int rank, int tp) {
  for_each_shard_run(t, rank, tp, [&](size_t s, size_t f, size_t n) {
    if (f != static_cast<size_t>(-1)) std::copy(shard + s, shard + s + n, full + f);
  });
}

namespace {

// Each local expert slot of expert tensor t (its dim 0 holds shape[0] of them): fn(offset in
// t, offset in the whole tensor, floats), the whole tensor's expert as `at` places it, or
// fn(offset in t, npos, floats) for a slot that holds no expert (ep does not divide the
// whole tensor's `experts`).
template <typename Fn>
void for_each_expert(const TensorInfo& t, int experts, const ShardPlace& at, Fn fn) {
  const int El = static_cast<int>(t.shape[0]);
  const size_t per = t.numel / static_cast<size_t>(El);
  for (int j = 0; j < El; ++j) {
    const int e =
        at.expert ? at.expert(t.layer, j) : identity_expert(experts, at.ep, at.ep_rank, j);
    const bool held = e >= 0 && e < experts;
    fn(static_cast<size_t>(j) * per, held ? static_cast<size_t>(e) * per : std::string::npos, per);
  }
}

}  // namespace

void slice_from_full(const ParamTable& full, const float* full_buf, const ParamTable& local,
                     const ShardPlace& at, float* local_buf) {
  for (const TensorInfo& t : local.tensors()) {
    const TensorInfo& whole = full.at(*full.find(t.name));
    if (t.expert && at.ep > 1) {
      for_each_expert(
          t, static_cast<int>(whole.shape[0]), at, [&](size_t local, size_t global, size_t n) {
            float* to = local_buf + t.offset + local;
            if (global == std::string::npos)
              std::fill(to, to + n, 0.0f);
            else
              std::copy(full_buf + whole.offset + global, full_buf + whole.offset + global + n, to);
          });
      continue;
    }
    copy_tp_shard(t, full_buf + whole.offset, local_buf + t.offset, at.tp_rank, at.tp);
  }
}

void for_each_full_run(const ParamTable& local, const ParamTable& full, const ShardPlace& at,
                       const std::function<bool(const TensorInfo&)>& owned,
                       const std::function<void(size_t, size_t, size_t)>& fn) {
  for (const TensorInfo& t : local.tensors()) {
    if (!owned(t)) continue;
    const TensorInfo& whole = full.at(*full.find(t.name));
    if (t.expert && at.ep > 1) {
      for_each_expert(t, static_cast<int>(whole.shape[0]), at,
                      [&](size_t in_local, size_t global, size_t n) {
                        if (global != std::string::npos)
                          fn(t.offset + in_local, whole.offset + global, n);
                      });
      continue;
    }
    for_each_shard_run(t, at.tp_rank, at.tp, [&](size_t s, size_t f, size_t n) {
      if (f != static_cast<size_t>(-1)) fn(t.offset + s, whole.offset + f, n);
    });
  }
}

std::vector<int64_t> full_run_groups(const ParamTable& local, const ParamTable& full,
                                     const ShardPlace& at,
                                     const std::function<bool(const TensorInfo&)>& owned) {
  std::vector<int64_t> g;
  for_each_full_run(local, full, at, owned, [&g](size_t from_u, size_t to_u, size_t n_u) {
    const int64_t from = static_cast<int64_t>(from_u), to = static_cast<int64_t>(to_u),
                  n = static_cast<int64_t>(n_u);
    if (!g.empty()) {
      int64_t* last = &g[g.size() - 6];
      if (last[3] == 1 && from == last[0] + last[2] && to == last[1] + last[2]) {
        last[2] += n;  // contiguous in both layouts: one run
        return;
      }
      if (n == last[2] && last[3] == 1) {
        last[3] = 2;  // a second run of the same size: a strided group
        last[4] = from - last[0];
        last[5] = to - last[1];
        return;
      }
      if (n == last[2] && from == last[0] + last[3] * last[4] &&
          to == last[1] + last[3] * last[5]) {
        ++last[3];
        return;
      }
    }
    g.insert(g.end(), {from, to, n, 1, 0, 0});
  });
  return g;
}

bool place_run_groups(const std::vector<int64_t>& groups, const float* local_buf,
                      size_t local_floats, float* full_buf, size_t full_floats) {
  if (groups.size() % 6 != 0) return false;
  const int64_t nl = static_cast<int64_t>(local_floats), nf = static_cast<int64_t>(full_floats);
  for (size_t k = 0; k < groups.size(); k += 6) {
    const int64_t* g = &groups[k];
    const int64_t len = g[2], repeat = g[3];
    if (len < 0 || repeat < 1 || repeat > nf) return false;
    const int64_t last_here = g[0] + (repeat - 1) * g[4], last_there = g[1] + (repeat - 1) * g[5];
    if (std::min({g[0], g[1], last_here, last_there}) < 0 || std::max(g[0], last_here) + len > nl ||
        std::max(g[1], last_there) + len > nf)
      return false;
    for (int64_t j = 0; j < repeat; ++j)
      std::copy(local_buf + g[0] + j * g[4], local_buf + g[0] + j * g[4] + len,
                full_buf + g[1] + j * g[5]);
  }
  return true;
}

void place_into_full(const ParamTable& local, const float* local_buf, const ParamTable& full,
                     const ShardPlace& at, const std::function<bool(const TensorInfo&)>& owned,
                     float* full_buf) {
  for_each_full_run(local, full, at, owned, [&](size_t from, size_t to, size_t n) {
    std::copy(local_buf + from, local_buf + from + n, full_buf + to);
  });
}

ParamTable build_param_table(const ModelSpec& s, int tp) {
  return build_stage_param_table(s, tp, 0, s.num_hidden_layers);
}

ParamTable build_stage_param_table(const ModelSpec& s, int tp, int first_layer, int end_layer,
                                   int ep) {
  return build_chunked_param_table(s, tp, {{first_layer, end_layer}}, ep);
}

namespace {

// A norm's parameters: weight, and bias for LayerNorm.
void add_norm(ParamTable& t, const std::string& name, int64_t C, int layer, NormKind kind) {
  t.add(name + ".w", {C}, layer, TpSplit::kReplicated, false);
  if (kind == NormKind::kLayerNorm) t.add(name + ".b", {C}, layer, TpSplit::kReplicated, false);
}

// The attention block of layer l. Multi-head (with grouped KV heads): one fused QKV projection
// whose three parts are split by heads over tp, and a row-split output projection. Latent
// attention (MLA): the down projections (q_a, kv_a) are replicated over tp, as Megatron-Core
// does, the up projections (q_b, kv_b) are split by heads, and the output projection by rows.
void add_attention(ParamTable& t, const ModelSpec& s, const std::string& p, int l, int tp) {
  const int64_t C = s.hidden_size, H = s.num_attention_heads;
  if (s.mla_enabled) {
    const MlaSpec& m = s.mla;
    const int64_t qk = m.qk_head_dim();
    if (m.q_lora_rank > 0) {
      t.add(p + "attn.q_a.w", {m.q_lora_rank, C}, l, TpSplit::kReplicated, true);
      if (s.qkv_bias) t.add(p + "attn.q_a.b", {m.q_lora_rank}, l, TpSplit::kReplicated, false);
      t.add(p + "attn.q_a_norm.w", {m.q_lora_rank}, l, TpSplit::kReplicated, false);
      t.add_sharded(p + "attn.q_b.w", {H * qk, m.q_lora_rank}, l, TpSplit::kColumn, true, tp);
    } else {
      t.add_sharded(p + "attn.q.w", {H * qk, C}, l, TpSplit::kColumn, true, tp);
    }
    const int64_t kv_a = m.kv_lora_rank + m.qk_rope_head_dim;
    t.add(p + "attn.kv_a.w", {kv_a, C}, l, TpSplit::kReplicated, true);
    if (s.qkv_bias) t.add(p + "attn.kv_a.b", {kv_a}, l, TpSplit::kReplicated, false);
    t.add(p + "attn.kv_a_norm.w", {m.kv_lora_rank}, l, TpSplit::kReplicated, false);
    t.add_sharded(p + "attn.kv_b.w", {H * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank}, l,
                  TpSplit::kColumn, true, tp);
  } else {
    const int64_t QKV = s.qkv_size();
    const int64_t Q = H * s.head_size();
    const int64_t KV = static_cast<int64_t>(s.num_key_value_heads) * s.head_size();
    t.add_sharded(p + "attn.qkv.w", {QKV, C}, l, TpSplit::kColumn, true, tp, {Q, KV, KV});
    if (s.qkv_bias)
      t.add_sharded(p + "attn.qkv.b", {QKV}, l, TpSplit::kColumn, false, tp, {Q, KV, KV});
    if (s.qk_norm) {
      t.add(p + "attn.q_norm.w", {s.head_size()}, l, TpSplit::kReplicated, false);
      t.add(p + "attn.k_norm.w", {s.head_size()}, l, TpSplit::kReplicated, false);
    }
  }
  const int64_t O = s.attention_out_size();
  t.add_sharded(p + "attn.proj.w", {C, O}, l, TpSplit::kRow, true, tp);
  if (s.o_bias) t.add(p + "attn.proj.b", {C}, l, TpSplit::kReplicated, false);
}

// A dense MLP of width F under `name`: fc (C -> F, or C -> 2F holding SwiGLU's gate and up
// rows, each part split over tp) and proj (F -> C, split by rows).
void add_mlp(ParamTable& t, const ModelSpec& s, const std::string& name, int64_t F, int l, int tp) {
  const int64_t C = s.hidden_size;
  const bool glu = s.mlp == MlpKind::kSwiGlu;
  std::vector<int64_t> parts = glu ? std::vector<int64_t>{F, F} : std::vector<int64_t>{F};
  const int64_t FC = glu ? 2 * F : F;
  t.add_sharded(name + ".fc.w", {FC, C}, l, TpSplit::kColumn, true, tp, parts);
  if (s.mlp_bias) t.add_sharded(name + ".fc.b", {FC}, l, TpSplit::kColumn, false, tp, parts);
  t.add_sharded(name + ".proj.w", {C, F}, l, TpSplit::kRow, true, tp);
  if (s.mlp_bias) t.add(name + ".proj.b", {C}, l, TpSplit::kReplicated, false);
}

// An MoE feed-forward: the router (with DeepSeek-V3's selection bias), this rank's ceil(E/ep)
// routed expert slots (whole on every tensor-parallel rank: experts are sharded by expert
// parallelism, not by tp), and the shared experts (one MLP of their summed width, split over tp
// as a dense MLP) with Qwen2-MoE's gate.
void add_moe(ParamTable& t, const ModelSpec& s, const std::string& p, int l, int tp, int ep) {
  // A rank's expert slots: ceil(E / ep) (model/expert_placement.h; a slot may be empty).
  const int64_t C = s.hidden_size, E = (s.num_local_experts + ep - 1) / ep,
                FM = s.moe_intermediate_size;
  const int64_t FC = s.mlp == MlpKind::kSwiGlu ? 2 * FM : FM;
  t.add(p + "moe.router.w", {s.num_local_experts, C}, l, TpSplit::kReplicated, true);
  if (s.has_expert_bias()) {
    const size_t i =
        t.add(p + "moe.router.bias", {s.num_local_experts}, l, TpSplit::kReplicated, false);
    t.set_untrained(i);
  }
  t.add(p + "moe.fc.w", {E, FC, C}, l, TpSplit::kReplicated, true, true);
  if (s.mlp_bias) t.add(p + "moe.fc.b", {E, FC}, l, TpSplit::kReplicated, false, true);
  t.add(p + "moe.proj.w", {E, C, FM}, l, TpSplit::kReplicated, true, true);
  if (s.mlp_bias) t.add(p + "moe.proj.b", {E, C}, l, TpSplit::kReplicated, false, true);
  if (s.has_shared_experts()) {
    add_mlp(t, s, p + "moe.shared", s.shared_expert_intermediate_size, l, tp);
    if (s.shared_expert_gate) t.add(p + "moe.shared_gate.w", {1, C}, l, TpSplit::kReplicated, true);
  }
}

}  // namespace

ParamTable build_chunked_param_table(const ModelSpec& s, int tp,
                                     const std::vector<LayerRange>& chunks, int ep) {
  ParamTable table;
  bool embed = false, head = false;
  for (const LayerRange& c : chunks) {
    embed = embed || c.first == 0;
    head = head || c.end == s.num_hidden_layers;
  }
  const int64_t C = s.hidden_size, V = s.vocab_size;
  if (embed) {
    table.add_sharded("wte", {V, C}, -1, TpSplit::kVocab, true, tp);
    if (s.positions == PositionKind::kLearned)
      table.add("wpe", {s.position_rows(), C}, -1, TpSplit::kReplicated, false);
  }
  for (const LayerRange& chunk : chunks)
    for (int l = chunk.first; l < chunk.end; ++l) {
      const std::string p = "h." + std::to_string(l) + ".";
      add_norm(table, p + "ln1", C, l, s.norm);
      add_attention(table, s, p, l, tp);
      add_norm(table, p + "ln2", C, l, s.norm);
      if (s.is_moe_layer(l)) {
        add_moe(table, s, p, l, tp, ep);
      } else {
        add_mlp(table, s, p + "mlp", s.intermediate_size, l, tp);
      }
    }
  if (head) {
    const int L = s.num_hidden_layers;
    add_norm(table, "lnf", C, L, s.norm);
    if (!s.tie_word_embeddings) {
      table.add_sharded("lm_head", {V, C}, L, TpSplit::kVocab, true, tp);
    } else if (!embed) {
      table.add_sharded("wte", {V, C}, L, TpSplit::kVocab, true, tp);
    }
  }
  return table;
}

}  // namespace cann::model
