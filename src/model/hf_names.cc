// The Hugging Face names of each family's tensors (see hf_names.h).
#include "model/hf_names.h"

#include <algorithm>

namespace cann::model {
namespace {

// Emits the HfTensors of one table tensor.
class Namer {
 public:
  Namer(const ModelSpec& s, std::vector<HfTensor>* out) : s_(s), out_(out) {}

  // The whole tensor.
  void whole(const std::string& hf, const TensorInfo& t) {
    out_->push_back({hf, t.shape, t.name, 0, false});
  }
  // Rows [first, first + rows) of a 2-D tensor, or elements of a 1-D one; `base` floats in
  // (an expert's slice).
  void rows(const std::string& hf, const TensorInfo& t, int64_t first, int64_t rows,
            size_t base = 0, int dims = 0) {
    const std::vector<int64_t> inner(t.shape.end() - (dims ? dims : t.shape.size()) + 1,
                                     t.shape.end());
    size_t width = 1;
    for (int64_t d : inner) width *= static_cast<size_t>(d);
    std::vector<int64_t> shape{rows};
    shape.insert(shape.end(), inner.begin(), inner.end());
    out_->push_back({hf, shape, t.name, base + static_cast<size_t>(first) * width, false});
  }
  // GPT-2's Conv1D: the whole (out, in) tensor stored as (in, out).
  void conv1d(const std::string& hf, const TensorInfo& t) {
    out_->push_back({hf, {t.shape[1], t.shape[0]}, t.name, 0, true});
  }
  // A SwiGLU fc of F rows per part (gate then up): 2-D weight (2F,C) or 1-D bias (2F), at
  // `base` floats into the tensor (an expert's slice), `dims` the dimensions of one expert.
  void gate_up(const std::string& gate, const std::string& up, const std::string& suffix,
               const TensorInfo& t, size_t base, int dims) {
    const int64_t F = t.shape[t.shape.size() - dims] / 2;
    rows(gate + suffix, t, 0, F, base, dims);
    rows(up + suffix, t, F, F, base, dims);
  }
  Status layer(const std::string& p, const std::string& part, const TensorInfo& t);
  Status gpt2_layer(const std::string& p, const std::string& part, const TensorInfo& t);

 private:
  const ModelSpec& s_;
  std::vector<HfTensor>* out_;
};

Status Namer::gpt2_layer(const std::string& p, const std::string& part, const TensorInfo& t) {
  static const std::pair<const char*, const char*> kSame[] = {
      {"ln1.w", "ln_1.weight"},           {"ln1.b", "ln_1.bias"},
      {"ln2.w", "ln_2.weight"},           {"ln2.b", "ln_2.bias"},
      {"attn.qkv.b", "attn.c_attn.bias"}, {"attn.proj.b", "attn.c_proj.bias"},
      {"mlp.fc.b", "mlp.c_fc.bias"},      {"mlp.proj.b", "mlp.c_proj.bias"}};
  static const std::pair<const char*, const char*> kConv[] = {{"attn.qkv.w", "attn.c_attn.weight"},
                                                              {"attn.proj.w", "attn.c_proj.weight"},
                                                              {"mlp.fc.w", "mlp.c_fc.weight"},
                                                              {"mlp.proj.w", "mlp.c_proj.weight"}};
  for (const auto& [ours, theirs] : kSame)
    if (part == ours) return whole(p + theirs, t), OkStatus();
  for (const auto& [ours, theirs] : kConv)
    if (part == ours) return conv1d(p + theirs, t), OkStatus();
  return Internal("no GPT-2 name for " + t.name);
}

Status Namer::layer(const std::string& p, const std::string& part, const TensorInfo& t) {
  const Family f = s_.family;
  const std::string at = p + "self_attn.";
  static const std::pair<const char*, const char*> kAttn[] = {
      {"attn.q_a.w", "q_a_proj.weight"},
      {"attn.q_a.b", "q_a_proj.bias"},
      {"attn.q_a_norm.w", "q_a_layernorm.weight"},
      {"attn.q_b.w", "q_b_proj.weight"},
      {"attn.q.w", "q_proj.weight"},
      {"attn.kv_a.w", "kv_a_proj_with_mqa.weight"},
      {"attn.kv_a.b", "kv_a_proj_with_mqa.bias"},
      {"attn.kv_a_norm.w", "kv_a_layernorm.weight"},
      {"attn.kv_b.w", "kv_b_proj.weight"},
      {"attn.q_norm.w", "q_norm.weight"},
      {"attn.k_norm.w", "k_norm.weight"},
      {"attn.proj.w", "o_proj.weight"},
      {"attn.proj.b", "o_proj.bias"}};
  if (part == "ln1.w") return whole(p + "input_layernorm.weight", t), OkStatus();
  if (part == "ln2.w") return whole(p + "post_attention_layernorm.weight", t), OkStatus();
  for (const auto& [ours, theirs] : kAttn)
    if (part == ours) return whole(at + theirs, t), OkStatus();
  if (part == "attn.qkv.w" || part == "attn.qkv.b") {
    const std::string sfx = part.back() == 'w' ? ".weight" : ".bias";
    const int64_t Q = static_cast<int64_t>(s_.num_attention_heads) * s_.head_size();
    const int64_t KV = static_cast<int64_t>(s_.num_key_value_heads) * s_.head_size();
    rows(at + "q_proj" + sfx, t, 0, Q);
    rows(at + "k_proj" + sfx, t, Q, KV);
    rows(at + "v_proj" + sfx, t, Q + KV, KV);
    return OkStatus();
  }
  // Feed-forward: a dense MLP, or an MoE block's router, experts and shared experts.
  const bool mixtral = f == Family::kMixtral;
  const std::string moe = p + (mixtral ? "block_sparse_moe." : "mlp.");
  const std::string shared = moe + (f == Family::kQwen2Moe ? "shared_expert." : "shared_experts.");
  auto mlp = [&](const std::string& m, const std::string& rest) -> Status {
    const std::string sfx = rest.back() == 'w' ? ".weight" : ".bias";
    if (rest.starts_with("fc.")) {
      gate_up(m + "gate_proj", m + "up_proj", sfx, t, 0, static_cast<int>(t.shape.size()));
    } else {
      whole(m + "down_proj" + sfx, t);
    }
    return OkStatus();
  };
  if (part.starts_with("mlp.")) return mlp(p + "mlp.", part.substr(4));
  if (part.starts_with("moe.shared.")) return mlp(shared, part.substr(11));
  if (part == "moe.shared_gate.w") return whole(moe + "shared_expert_gate.weight", t), OkStatus();
  if (part == "moe.router.w") return whole(moe + "gate.weight", t), OkStatus();
  if (part == "moe.router.bias") return whole(moe + "gate.e_score_correction_bias", t), OkStatus();
  if (part.starts_with("moe.fc.") || part.starts_with("moe.proj.")) {
    const std::string sfx = part.back() == 'w' ? ".weight" : ".bias";
    const int dims = static_cast<int>(t.shape.size()) - 1;
    const size_t per = t.numel / static_cast<size_t>(t.shape[0]);
    for (int64_t e = 0; e < t.shape[0]; ++e) {
      const std::string x = moe + "experts." + std::to_string(e) + ".";
      const size_t base = static_cast<size_t>(e) * per;
      if (part.starts_with("moe.fc.")) {
        gate_up(x + (mixtral ? "w1" : "gate_proj"), x + (mixtral ? "w3" : "up_proj"), sfx, t, base,
                dims);
      } else {
        rows(x + (mixtral ? "w2" : "down_proj") + sfx, t, 0, t.shape[1], base, dims);
      }
    }
    return OkStatus();
  }
  return Internal("no Hugging Face name for " + t.name);
}

}  // namespace

size_t HfTensor::numel() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

StatusOr<std::vector<HfTensor>> hf_tensors(const ModelSpec& s) {
  const bool gpt2 = s.family == Family::kGpt2;
  if (s.architecture != Architecture::kGpt || (gpt2 && s.is_moe()))
    return InvalidArgument("model '" + s.name + "' (" + std::string(family_name(s.family)) + ", " +
                           std::string(architecture_name(s.architecture)) +
                           (s.is_moe() ? ", MoE" : "") +
                           ") has no Hugging Face checkpoint layout; hint: Hugging Face weights "
                           "are read and written for GPT-2 and the Llama, Mistral, Mixtral, "
                           "Qwen2/3(-MoE) and DeepSeek-V2/V3 families");
  const ParamTable table = build_param_table(s);
  std::vector<HfTensor> out;
  Namer namer(s, &out);
  const std::string root = gpt2 ? "transformer." : "model.";
  for (const TensorInfo& t : table.tensors()) {
    if (t.name == "wte") {
      namer.whole(root + (gpt2 ? "wte.weight" : "embed_tokens.weight"), t);
    } else if (t.name == "wpe") {
      namer.whole(root + "wpe.weight", t);
    } else if (t.name == "lnf.w" || t.name == "lnf.b") {
      const std::string sfx = t.name.back() == 'w' ? "weight" : "bias";
      namer.whole(root + (gpt2 ? "ln_f." : "norm.") + sfx, t);
    } else if (t.name == "lm_head") {
      namer.whole("lm_head.weight", t);
    } else {
      const size_t dot = t.name.find('.', 2);
      const std::string p = root + (gpt2 ? "h." : "layers.") + t.name.substr(2, dot - 2) + ".";
      const std::string part = t.name.substr(dot + 1);
      CANN_RETURN_IF_ERROR(gpt2 ? namer.gpt2_layer(p, part, t) : namer.layer(p, part, t));
    }
  }
  return out;
}

namespace {

// The checkpoint's block <-> the parameter's floats. Transposed (GPT-2's Conv1D): the block is
// (in, out) = (shape[0], shape[1]) of our (out, in) rows.
void copy_block(const HfTensor& h, const float* from, float* to, bool to_param) {
  if (!h.transposed) {
    std::copy(from, from + h.numel(), to);
    return;
  }
  const size_t in = static_cast<size_t>(h.shape[0]), out = static_cast<size_t>(h.shape[1]);
  for (size_t i = 0; i < in; ++i)
    for (size_t j = 0; j < out; ++j) {
      const size_t block = i * out + j, param = j * in + i;
      to[to_param ? param : block] = from[to_param ? block : param];
    }
}

}  // namespace

void hf_block_from_param(const HfTensor& h, const float* param, float* out) {
  copy_block(h, param + h.offset, out, false);
}

void hf_block_to_param(const HfTensor& h, const float* block, float* param) {
  copy_block(h, block, param + h.offset, true);
}

}  // namespace cann::model
