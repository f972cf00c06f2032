// ParamTable construction and queries.
#include "model/param_table.h"

#include <algorithm>

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
  total_ = t.offset + t.numel;
  tensors_.push_back(std::move(t));
  return tensors_.size() - 1;
}

StatusOr<size_t> ParamTable::find(const std::string& name) const {
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (tensors_[i].name == name) return i;
  return NotFound("no parameter tensor named '" + name + "'");
}

size_t ParamTable::num_parameters() const {
  size_t n = 0;
  for (const auto& t : tensors_) n += t.numel;
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

ParamTable build_param_table(const ModelSpec& s) {
  ParamTable table;
  const int64_t C = s.hidden_size, V = s.vocab_size, T = s.seq_length;
  const int64_t QKV = s.qkv_size(), F = s.intermediate_size;
  table.add("wte", {V, C}, -1, TpSplit::kVocab, true);
  table.add("wpe", {T, C}, -1, TpSplit::kReplicated, false);
  for (int l = 0; l < s.num_hidden_layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    table.add(p + "ln1.w", {C}, l, TpSplit::kReplicated, false);
    table.add(p + "ln1.b", {C}, l, TpSplit::kReplicated, false);
    table.add(p + "attn.qkv.w", {QKV, C}, l, TpSplit::kColumn, true);
    table.add(p + "attn.qkv.b", {QKV}, l, TpSplit::kColumn, false);
    table.add(p + "attn.proj.w", {C, C}, l, TpSplit::kRow, true);
    table.add(p + "attn.proj.b", {C}, l, TpSplit::kReplicated, false);
    table.add(p + "ln2.w", {C}, l, TpSplit::kReplicated, false);
    table.add(p + "ln2.b", {C}, l, TpSplit::kReplicated, false);
    if (s.is_moe_layer(l)) {
      const int64_t E = s.num_local_experts, FM = s.moe_intermediate_size;
      table.add(p + "moe.router.w", {E, C}, l, TpSplit::kReplicated, true);
      table.add(p + "moe.fc.w", {E, FM, C}, l, TpSplit::kColumn, true, true);
      table.add(p + "moe.fc.b", {E, FM}, l, TpSplit::kColumn, false, true);
      table.add(p + "moe.proj.w", {E, C, FM}, l, TpSplit::kRow, true, true);
      table.add(p + "moe.proj.b", {E, C}, l, TpSplit::kReplicated, false, true);
    } else {
      table.add(p + "mlp.fc.w", {F, C}, l, TpSplit::kColumn, true);
      table.add(p + "mlp.fc.b", {F}, l, TpSplit::kColumn, false);
      table.add(p + "mlp.proj.w", {C, F}, l, TpSplit::kRow, true);
      table.add(p + "mlp.proj.b", {C}, l, TpSplit::kReplicated, false);
    }
  }
  table.add("lnf.w", {C}, s.num_hidden_layers, TpSplit::kReplicated, false);
  table.add("lnf.b", {C}, s.num_hidden_layers, TpSplit::kReplicated, false);
  return table;
}

}  // namespace cann::model
