// ParamTable: the map of a model's one flat parameter buffer. Gradients and the optimizer's
// moments use the same layout in buffers of their own, so a tensor is found in all of them by
// the same offset. See DESIGN.md, "Memory layout: flat buffers".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/spec.h"

namespace cann::model {

// How a tensor is split under tensor parallelism (Megatron-LM's layout).
enum class TpSplit {
  kReplicated,  // layernorm parameters, row-parallel biases
  kColumn,      // split along output features (QKV, first MLP projection): rows of (OC,C)
  kRow,         // split along input features (attention output, second MLP projection)
  kVocab,       // split along the vocabulary (token embedding / tied output head)
};

struct TensorInfo {
  std::string name;            // "h.3.attn.qkv.w"
  std::vector<int64_t> shape;  // row-major
  size_t offset = 0;           // in floats, from the start of the flat buffer
  size_t numel = 0;
  int layer = -1;  // -1 embeddings, num_hidden_layers for the final norm
  TpSplit tp_split = TpSplit::kReplicated;
  bool weight_decay = false;  // matrices decay; biases, norms and position tables do not
  bool expert = false;        // one slice per expert along dim 0
};

class ParamTable {
 public:
  // Appends a tensor at the next offset aligned to kAlign floats and returns its index.
  size_t add(std::string name, std::vector<int64_t> shape, int layer, TpSplit split, bool decay,
             bool expert = false);
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo& at(size_t i) const { return tensors_[i]; }
  // Index of a tensor by name, or an error naming it.
  StatusOr<size_t> find(const std::string& name) const;
  // Total floats, including alignment padding between tensors (padding stays zero).
  size_t total_floats() const { return total_; }
  // Parameters proper, without padding.
  size_t num_parameters() const;
  // [begin, end) float range covering all tensors of `layer`.
  std::pair<size_t, size_t> layer_range(int layer) const;
  // A stable fingerprint of names, shapes and offsets, stored in checkpoints.
  uint64_t fingerprint() const;

  static constexpr size_t kAlign = 16;  // 64 bytes: whole cache lines, aligned vector loads

 private:
  std::vector<TensorInfo> tensors_;
  size_t total_ = 0;
};

// The parameter layout of a gpt or bert model (with MoE layers where the spec says). Layer l's
// tensors are named "h.<l>.<part>"; "wte" is tied to the output head.
ParamTable build_param_table(const ModelSpec& spec);

}  // namespace cann::model
