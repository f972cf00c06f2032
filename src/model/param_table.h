// ParamTable: the map of a model's one flat parameter buffer. Gradients and the optimizer's
// moments use the same layout in buffers of their own, so a tensor is found in all of them by
// the same offset. See DESIGN.md, "Memory layout: flat buffers".
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/spec.h"

namespace cann::model {

// How a tensor is split under tensor parallelism (Megatron-LM's layout, Shoeybi et al. 2019).
// Under tp ranks, rank r's table holds only its shard of each split tensor, so its flat buffer
// is about 1/tp of the model; copy_tp_shard / place_tp_shard map a shard to the full tensor.
enum class TpSplit {
  kReplicated,  // layernorm parameters, row-parallel biases, position table, MoE experts
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
  // False for state the optimizer leaves alone and parameter counts leave out (a Hugging Face
  // buffer): DeepSeek-V3's expert selection bias, moved by its own rule after each step.
  bool trained = true;
  // Tensor parallelism: the unsplit shape, and for dim-0 splits (kColumn, kVocab) the parts of
  // dim 0 that are each split over the ranks. The fused QKV weight has three parts (q, k, v
  // heads) so that a rank's shard holds its own heads' q, k and v rows; every other dim-0
  // split has one part. A kVocab part that tp does not divide is padded: every rank holds
  // ceil(V/tp) rows and the last rank's extra rows are zero and never scored.
  std::vector<int64_t> full_shape;
  std::vector<int64_t> tp_parts;
};

class ParamTable {
 public:
  // Appends a tensor at the next offset aligned to kAlign floats and returns its index.
  size_t add(std::string name, std::vector<int64_t> shape, int layer, TpSplit split, bool decay,
             bool expert = false);
  // Adds rank `tp_rank`'s shard of a tensor of full shape `full` split over `tp` ranks (parts:
  // see TensorInfo::tp_parts; empty means one part). tp == 1 adds the full tensor.
  size_t add_sharded(std::string name, std::vector<int64_t> full, int layer, TpSplit split,
                     bool decay, int tp, std::vector<int64_t> parts = {});
  // Marks tensor i as state the optimizer does not train (TensorInfo::trained).
  void set_untrained(size_t i) { tensors_[i].trained = false; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo& at(size_t i) const { return tensors_[i]; }
  // Index of a tensor by name, or an error naming it.
  StatusOr<size_t> find(const std::string& name) const;
  // Total floats, including alignment padding between tensors (padding stays zero).
  size_t total_floats() const { return total_; }
  // Parameters proper: trained tensors, without padding.
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
// With tp > 1: the table of one tensor-parallel rank (every rank's table has the same names,
// shapes and offsets; only the data differs). Requires tp to divide the heads, the kv heads and
// the intermediate size (check_tp_divides says which does not).
ParamTable build_param_table(const ModelSpec& spec, int tp = 1);

// The tensors of one pipeline stage holding layers [first_layer, end_layer): the embeddings
// (wte, wpe) when first_layer == 0; the final norm when end_layer == num_hidden_layers, and
// there, when the stage does not also hold the embeddings, its own copy of the tied wte (layer
// index num_hidden_layers; its gradient is summed with the first stage's before the update,
// as Megatron does). Names match the full table's, so tensors are found across layouts by name.
// With ep > 1 the MoE expert tensors hold this rank's ceil(E/ep) expert slots (expert
// parallelism; model/expert_placement.h).
ParamTable build_stage_param_table(const ModelSpec& spec, int tp, int first_layer, int end_layer,
                                   int ep = 1);

// Layers [first, end) of the model: one chunk of an interleaved pipeline stage.
struct LayerRange {
  int first = 0;
  int end = 0;
};
// The tensors of a stage holding several chunks (interleaved pipelining), in chunk order: the
// embeddings if a chunk starts at layer 0, each chunk's layers, and the final norm (with the
// tied wte copy, as above) if a chunk ends at the last layer. One chunk: the table above.
ParamTable build_chunked_param_table(const ModelSpec& spec, int tp,
                                     const std::vector<LayerRange>& chunks, int ep = 1);

// Whether the model can be split over tp ranks; the error names the dimension and the fix.
Status check_tp_divides(const ModelSpec& spec, int tp);

// shard <- rank's part of the full tensor (shard is laid out as `info`, a tensor of a table
// built for `tp` ranks; full is the unsplit tensor, row-major). Padding rows become 0.
void copy_tp_shard(const TensorInfo& info, const float* full, float* shard, int rank, int tp);
// The inverse: writes rank's shard into its place in the full tensor (padding is skipped).
void place_tp_shard(const TensorInfo& info, const float* shard, float* full, int rank, int tp);

// Where a rank's table sits in the full model: its tensor-parallel rank and its place in the
// expert group, whose experts are a contiguous block of each expert tensor's dim 0 (rank r of
// ep holds model::identity_slots(E, ep)'s block; ceil(E/ep) slots, some maybe empty, which
// slicing fills with zeros) unless `expert` says otherwise.
struct ShardPlace {
  int tp_rank = 0, tp = 1;
  int ep_rank = 0, ep = 1;
  // Under ep, when experts have moved (model/expert_placement.h): the full tensor's expert
  // held in local slot j of model layer `layer`, (layer, j) -> expert (kNoExpert: an empty
  // slot). Null: the contiguous blocks.
  std::function<int(int layer, int j)> expert;
};
// local_buf <- this rank's part of every tensor of `local` (a stage's or a sharded table; each
// tensor found by name in `full`, the single-process table): its tensor-parallel shard, its
// block of experts, or the whole tensor. The last stage's copy of the tied wte takes wte.
void slice_from_full(const ParamTable& full, const float* full_buf, const ParamTable& local,
                     const ShardPlace& at, float* local_buf);
// The runs of the tensors of `local` that `owned` selects, in the whole model's layout:
// fn(offset in local, offset in full, floats) for each contiguous piece (a tensor-parallel
// shard's rows, an expert), padding and empty expert slots left out.
void for_each_full_run(const ParamTable& local, const ParamTable& full, const ShardPlace& at,
                       const std::function<bool(const TensorInfo&)>& owned,
                       const std::function<void(size_t, size_t, size_t)>& fn);
// The same runs as strided groups, six numbers each, flat: offset in local, offset in full,
// floats, repeat, and the steps between repeats in local and in full (a row-split tensor's
// rows are one group, runs adjacent in both layouts one run): a few groups a tensor.
std::vector<int64_t> full_run_groups(const ParamTable& local, const ParamTable& full,
                                     const ShardPlace& at,
                                     const std::function<bool(const TensorInfo&)>& owned);
// full_buf (full_floats long) <- local_buf (local_floats long) by `groups`; false, with nothing
// guaranteed written, when a group is malformed or reaches outside either buffer.
bool place_run_groups(const std::vector<int64_t>& groups, const float* local_buf,
                      size_t local_floats, float* full_buf, size_t full_floats);
// The inverse, for the tensors of `local` that `owned` selects: writes each into its place in
// full_buf and leaves the rest of full_buf untouched.
void place_into_full(const ParamTable& local, const float* local_buf, const ParamTable& full,
                     const ShardPlace& at, const std::function<bool(const TensorInfo&)>& owned,
                     float* full_buf);

}  // namespace cann::model
