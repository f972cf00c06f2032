// ModelParallel: the trainer's side of model parallelism. From the strategy string it derives
// the layout `run` can train (dp x pp x cp x tp with vpp chunks per stage, with sequence
// parallelism on or off, and the activation recomputation) and refuses, with one line naming
// the key, what this build cannot train (ep combined with sp or cp). The expert groups
// live inside one pipeline stage and one tensor-parallel rank (see parallel/mesh.h).
// For tp, pp, cp or ep > 1 it builds the process mesh over the world group, the model's
// tensor- and context-parallel communicators over the mesh's tp and cp groups, this rank's
// pipeline stage (layers balanced by cost with the planner's partition), the gradient norm
// over the model-parallel shards, and the sum of the tied embedding's two copies (first and
// last stage). Under context parallelism gradients are reduced over the data x context ranks
// (gradient_group), which hold the same parameters.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/param_table.h"
#include "model/recompute.h"
#include "model/tensor_parallel.h"

namespace cann::comm {
class Group;
}
namespace cann::model {
class Model;
struct ModelSpec;
struct PipelineStage;
}  // namespace cann::model
namespace cann::plan {
struct Strategy;
}
namespace cann::parallel {
enum class PipelineSchedule;
class ProcessMesh;
class GroupTensorParallelComm;
class GroupExpertParallelComm;
}  // namespace cann::parallel

namespace cann::train {

struct ParallelLayout {
  int dp = 1;
  int tp = 1;
  int pp = 1;
  int ep = 1;   // expert groups carved out of dp (ep divides dp)
  int vpp = 1;  // model chunks per pipeline stage (interleaved 1F1B when > 1)
  int cp = 1;   // context parallelism: each sequence's positions split over cp ranks
  bool sp = false;
  model::Recompute recompute = model::Recompute::kNone;
  bool model_parallel() const { return tp > 1 || pp > 1 || ep > 1 || cp > 1; }
};

// `text` is the strategy as the user wrote it (for messages); `world` the processes started.
StatusOr<ParallelLayout> parallel_layout(const plan::Strategy& s, const std::string& text,
                                         int world);

// What the launcher checks before it starts `world` workers, so a strategy that cannot run is
// reported once (not once per rank): the strategy's syntax, the layout, and for tp > 1 whether
// the model splits that way. `model` is a shipped name or a spec path.
// `batch`: the run's --batch-size, --grad-accum and --pipeline-schedule, for the pipeline
// schedule's checks, and --seq-len, for context parallelism's chunks (0 / empty: not given).
struct LaunchBatch {
  int batch_size = 0;
  int grad_accum = 0;
  std::string pipeline_schedule;
  int seq_len = 0;
};
Status check_strategy_for_launch(const std::string& strategy, const std::string& model, int world,
                                 const LaunchBatch& batch = {});

// The schedule a pipelined run uses: --pipeline-schedule as given ("" or "auto": 1f1b, or
// interleaved with vpp > 1), checked against vpp and the M micro-batches per step (interleaved
// needs vpp > 1 and M a multiple of pp; gpipe and 1f1b need vpp = 1). `where` prefixes errors.
StatusOr<parallel::PipelineSchedule> resolve_pipeline_schedule(const std::string& flag,
                                                               const ParallelLayout& layout,
                                                               int micro_batches,
                                                               const std::string& where);

// Interleaved pipelining cuts the layers into pp*vpp equal chunks: they must divide.
Status check_pipeline_chunks(const model::ModelSpec& spec, const ParallelLayout& layout,
                             const std::string& where);

class ModelParallel {
 public:
  // A collective over `world` (layout.tp > 1): builds the mesh and its groups.
  static StatusOr<std::unique_ptr<ModelParallel>> create(comm::Group& world,
                                                         const ParallelLayout& layout);
  ~ModelParallel();

  model::TensorParallel tensor_parallel() const;
  model::ExpertParallel expert_parallel() const;
  model::ContextParallel context_parallel() const;
  // The ranks holding the same experts (expert tensors are reduced over it).
  comm::Group& expert_dp_group();
  comm::Group& dp_group();
  // Where dense gradients are averaged: the data-parallel group, or with cp > 1 the data x
  // context group (the cp ranks' gradients are parts of one replica's, which the trainer
  // scales by cp so that the average over dp x cp is the data-parallel mean of their sums).
  comm::Group& gradient_group();
  int dp_rank() const;
  // Pipeline: this rank's stage, its neighbours (world ranks, -1 at the ends), the world ranks
  // of every stage of its pipeline, the pipeline group, and the stage's layers with one
  // activation slot per micro-batch (and chunk) in flight under `schedule`. Without
  // interleaving the layers are balanced by cost over the stages (the planner's contiguous
  // partition of per-layer FLOPs, the head counted with the last layer); interleaved, stage s
  // holds chunks s, s+pp, ... of pp*vpp equal chunks (Megatron-LM's and the planner's split).
  int stage() const;
  int pp_prev() const;
  int pp_next() const;
  std::vector<int> stage_ranks() const;
  comm::Group& pp_group();
  model::PipelineStage pipeline_stage(const model::ModelSpec& spec, int micro_batches,
                                      parallel::PipelineSchedule schedule) const;
  // Adds the wte gradient of the first and last stage (each holds a copy of the tied
  // embedding) so both copies take the same update. A collective over the pipeline group;
  // a no-op without pipeline parallelism. `access(offset, count, fn)` hands fn the reduced
  // gradient of that flat range and keeps what fn leaves there (DataParallelEngine::
  // with_grad_range, which under ZeRO assembles it from the shards); empty: the model's own
  // gradient buffer.
  using GradAccess =
      std::function<Status(size_t, size_t, const std::function<Status(float*)>&)>;
  Status sync_tied_embedding(model::Model& model, const GradAccess& access = {});
  // Sum of squares of the whole model's gradients from this rank's shards: split tensors
  // counted on every tp rank, replicated ones on tp rank 0 only, the last stage's copy of the
  // tied embedding not at all, summed over the model-parallel (tp x pp) group; expert tensors
  // (ep > 1) summed over the expert group (each stage's own; counted by tp rank 0 only, as
  // every tensor-parallel rank holds the same experts).
  // A communication failure is kept in status() and the local sum is returned.
  std::function<double(const float*)> grad_sum_of_squares(const model::ParamTable& table);
  const Status& status() const { return status_; }
  // The same norm in two halves, for ZeRO, whose shards are flat ranges across tensors: whether
  // this rank counts a tensor's squares, and the sum over the model-parallel group (a
  // collective; fp32 on the wire, as above).
  std::function<bool(const model::TensorInfo&)> norm_counted() const;
  Status sum_over_model_parallel(double* value);

  // Checkpoints of a model-parallel run hold the whole model in the single-process layout, so
  // they load under any strategy (and world size) by slicing. This rank's place in that layout:
  model::ShardPlace shard_place() const;
  // A collective over `world`: out (count x full.total_floats(), zeroed here) <- the whole
  // model's buffers, one per entry of `locals` (this rank's buffers in `local`'s layout:
  // parameters, AdamW moments). Each tensor comes from one owner (data-parallel rank 0, or the
  // first expert group for experts; tensor-parallel rank 0 for replicated tensors; never the
  // last stage's copy of the tied wte) and lands in a buffer that is otherwise zero on every
  // rank, so a sum over the ranks assembles it exactly. Costs an all-reduce of count full
  // models: fine for checkpoints, which are rare.
  Status gather_full(comm::Group& world, const model::ParamTable& local,
                     const model::ParamTable& full, const std::vector<const float*>& locals,
                     float* out);
  // "dp=2 pp=1 tp=2 cp=1 ep=1, sp on; rank 3 is tp 1, ..." and the rank table.
  std::string describe() const;
  std::string rank_table() const;

 private:
  ModelParallel() = default;

  ParallelLayout layout_;
  std::unique_ptr<parallel::ProcessMesh> mesh_;
  std::unique_ptr<parallel::GroupTensorParallelComm> tp_comm_;
  std::unique_ptr<parallel::GroupTensorParallelComm> cp_comm_;
  std::unique_ptr<parallel::GroupExpertParallelComm> ep_comm_;
  Status status_;
  std::vector<float> zero_wte_;  // a middle stage's share of the tied-embedding sum
};

}  // namespace cann::train
