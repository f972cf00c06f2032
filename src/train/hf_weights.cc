// Hugging Face weights in and out (see hf_weights.h).
#include "train/hf_weights.h"

#include <map>
#include <nlohmann/json.hpp>

#include "ckpt/safetensors_file.h"
#include "core/fs.h"
#include "model/hf_names.h"
#include "model/param_table.h"
#include "model/spec_json.h"

namespace cann::train {
namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// GPT-2 checkpoints name their tensors with or without the "transformer." of GPT2LMHeadModel,
// and older ones carry each layer's causal-mask buffers (attn.bias, attn.masked_bias), which
// are not parameters.
std::string gpt2_bare(const std::string& name) {
  return name.starts_with("transformer.") ? name.substr(12) : name;
}
bool gpt2_mask_buffer(const std::string& name) {
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
}

}  // namespace

StatusOr<model::ModelSpec> hf_dir_spec(const std::string& dir) {
  if (!is_directory(dir))
    return NotFound("--init-from " + dir +
                    ": no such directory; hint: pass a directory with "
                    "config.json and *.safetensors (a Hugging Face model or `run --export-hf`)");
  const std::string config = join_path(dir, "config.json");
  if (!path_exists(config))
    return NotFound(dir +
                    " has no config.json; hint: copy the model's config.json beside its "
                    "safetensors");
  return model::load_model_spec(config);
}

Status check_same_model(const model::ModelSpec& given, const model::ModelSpec& in_dir,
                        const std::string& dir) {
  const auto a = nlohmann::json::parse(model::spec_to_json(given));
  const auto b = nlohmann::json::parse(model::spec_to_json(in_dir));
  if (a == b) return OkStatus();
  // The first key whose value differs, or that only one of them has.
  std::string key;
  for (auto it = a.begin(); it != a.end() && key.empty(); ++it)
    if (!b.contains(it.key()) || b[it.key()] != *it) key = it.key();
  for (auto it = b.begin(); it != b.end() && key.empty(); ++it)
    if (!a.contains(it.key())) key = it.key();
  const auto value = [&](const nlohmann::json& j) {
    return j.contains(key) ? j[key].dump() : std::string("(absent)");
  };
  return InvalidArgument("--model " + given.source + " and --init-from " + dir +
                         "/config.json describe different models (" + key + ": " + value(a) +
                         " against " + value(b) + "); hint: drop --model to train the model in " +
                         dir);
}

Status load_hf_weights(const model::ModelSpec& spec, const std::string& dir,
                       std::vector<float>* full) {
  CANN_ASSIGN_OR_RETURN(const std::vector<model::HfTensor> want, model::hf_tensors(spec));
  CANN_ASSIGN_OR_RETURN(const ckpt::WeightDir w, ckpt::open_weight_dir(dir));
  const bool gpt2 = spec.family == model::Family::kGpt2;
  const std::string config = join_path(dir, "config.json");
  // Where each wanted tensor is found in the directory, checked before any is read.
  std::map<std::string, const model::HfTensor*> found;
  for (const model::HfTensor& h : want) {
    std::string name = h.name;
    if (gpt2 && !w.tensors.count(name) && w.tensors.count(gpt2_bare(name))) name = gpt2_bare(name);
    auto it = w.tensors.find(name);
    if (it == w.tensors.end())
      return DataLoss("tensor " + h.name + " is missing from the weights in " + dir + " (" +
                      config +
                      " calls for it); hint: check that the config belongs to these "
                      "weights, or re-download the checkpoint");
    const ckpt::TensorEntry& e = it->second;
    if (e.shape != h.shape)
      return DataLoss("tensor " + name + " in " + w.file_of(name) + " has shape " +
                      shape_text(e.shape) + " but " + config + " makes it " + shape_text(h.shape) +
                      "; hint: check that the config belongs to these "
                      "weights");
    if (ckpt::readable_dtype_size(e.dtype) == 0)
      return DataLoss("tensor " + name + " in " + w.file_of(name) + " is " + e.dtype +
                      ", which cann-train does not read; hint: convert the checkpoint to F32, "
                      "BF16 or F16");
    found[name] = &h;
  }
  for (const auto& [name, e] : w.tensors)
    if (!found.count(name) && !(gpt2 && gpt2_mask_buffer(name)))
      return DataLoss("tensor " + name + " in " + w.file_of(name) + " is not a parameter of " +
                      std::string(model::family_name(spec.family)) + " model " + config +
                      "; hint: check that the config belongs to these weights");
  // Every check passed: read one tensor at a time into a staging copy, so a read error
  // leaves `full` untouched.
  const model::ParamTable table = model::build_param_table(spec);
  std::vector<float> staged(table.total_floats(), 0.0f);
  for (const auto& [name, h] : found) {
    CANN_ASSIGN_OR_RETURN(const std::vector<float> block, w.read(name));
    if (h->param.empty()) {  // a tensor the engine keeps no parameter for: must be zero
      for (float v : block)
        if (v != 0.0f)
          return DataLoss("tensor " + name + " in " + w.file_of(name) +
                          " is not zero, and cann-train keeps no parameter for it; hint: "
                          "zero it to train without it");
      continue;
    }
    const model::TensorInfo& t = table.at(*table.find(h->param));
    model::hf_block_to_param(*h, block.data(), staged.data() + t.offset);
  }
  *full = std::move(staged);
  return OkStatus();
}

Status export_hf(const model::ModelSpec& spec, const float* full, const std::string& dir,
                 uint64_t max_shard_bytes) {
  CANN_ASSIGN_OR_RETURN(const std::vector<model::HfTensor> tensors, model::hf_tensors(spec));
  const model::ParamTable table = model::build_param_table(spec);
  std::vector<ckpt::TensorSource> sources;
  for (const model::HfTensor& h : tensors) {
    ckpt::TensorSource src{h.name, h.shape, nullptr};
    if (h.param.empty()) {
      const size_t n = h.numel();
      src.fill = [n](float* out) { std::fill(out, out + n, 0.0f); };
    } else {
      const float* param = full + table.at(*table.find(h.param)).offset;
      src.fill = [&h, param](float* out) { model::hf_block_from_param(h, param, out); };
    }
    sources.push_back(std::move(src));
  }
  CANN_RETURN_IF_ERROR(ckpt::write_weight_shards(dir, sources, max_shard_bytes).status());
  return write_file_atomic(join_path(dir, "config.json"), model::spec_to_json(spec) + "\n");
}

}  // namespace cann::train
