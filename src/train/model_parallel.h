// ModelParallel: the trainer's side of model parallelism. For a strategy with tp, pp, cp or
// ep > 1 (resolved by resolve_run_layout, checked by plan::engine_supports) it builds the
// process mesh over the world group, the model's
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
#include "plan/strategy.h"

namespace cann::comm {
class Group;
}
namespace cann::model {
class Model;
struct ModelSpec;
struct PipelineStage;
}  // namespace cann::model
namespace cann::parallel {
enum class PipelineSchedule;
class ProcessMesh;
class GroupTensorParallelComm;
class GroupExpertParallelComm;
}  // namespace cann::parallel

namespace cann::train {

class ModelParallel {
 public:
  // A collective over `world` (layout.tp > 1): builds the mesh and its groups.
  // `s` fully resolved (dp set, mbs the micro-batch).
  static StatusOr<std::unique_ptr<ModelParallel>> create(comm::Group& world,
                                                         const plan::Strategy& s);
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
  // interleaving the layers are balanced by cost over the stages: the planner's partition of
  // its per-layer costs for this strategy at seq_len (plan::engine_stage_bounds), so the run
  // trains the stages the planner prices; interleaved, stage s holds chunks s, s+pp, ... of
  // pp*vpp equal chunks (Megatron-LM's and the planner's split).
  int stage() const;
  int pp_prev() const;
  int pp_next() const;
  std::vector<int> stage_ranks() const;
  comm::Group& pp_group();
  model::PipelineStage pipeline_stage(const model::ModelSpec& spec, int seq_len, int micro_batches,
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
  // Whether this rank is the one owner of its copy of a tensor in the whole model:
  // data-parallel rank 0 (the first expert group for experts), tensor-parallel rank 0 for
  // replicated tensors, context-parallel rank 0, never the last stage's copy of the tied wte.
  // Every element of the whole model has exactly one owner over the world.
  std::function<bool(const model::TensorInfo&)> owned_in_full() const;
  // The tensors this rank holds on behalf of every rank holding the same elements (its data-,
  // context- and expert-data-parallel replicas; for tensors tensor parallelism replicates, the
  // tensor-parallel ranks, which tensor-parallel rank 0 stands for): the dense ones or, with
  // `experts`, the experts. Two ranks whose selections land on the same elements hold equal
  // values (synchronous training keeps replicas equal), so either one's part serves for both.
  std::function<bool(const model::TensorInfo&)> held_in_full(bool experts) const;
  // A collective over `world`: out (count x full.total_floats(), zeroed here) <- the whole
  // model's buffers, one per entry of `locals` (this rank's buffers in `local`'s layout:
  // parameters, AdamW moments). Each tensor comes from its owner (owned_in_full) and lands in
  // a buffer that is otherwise zero on every rank, so a sum over the ranks assembles it
  // exactly. Costs an all-reduce of count full
  // models: fine for checkpoints, which are rare.
  // `at`: shard_place() with the model's expert placement.
  Status gather_full(comm::Group& world, const model::ParamTable& local,
                     const model::ParamTable& full, const model::ShardPlace& at,
                     const std::vector<const float*>& locals, float* out);
  // "dp=2 pp=1 tp=2 cp=1 ep=1, sp on; rank 3 is tp 1, ..." and the rank table.
  std::string describe() const;
  std::string rank_table() const;

 private:
  ModelParallel() = default;

  plan::Strategy layout_;
  std::unique_ptr<parallel::ProcessMesh> mesh_;
  std::unique_ptr<parallel::GroupTensorParallelComm> tp_comm_;
  std::unique_ptr<parallel::GroupTensorParallelComm> cp_comm_;
  std::unique_ptr<parallel::GroupExpertParallelComm> ep_comm_;
  Status status_;
  std::vector<float> zero_wte_;  // a middle stage's share of the tied-embedding sum
};

}  // namespace cann::train
