// ModelParts: this rank's part of the model and what runs it. One process holds the whole
// model; under model parallelism (tp, pp, cp or ep > 1) the rank holds its shards and stage,
// with the process mesh and the model's communicators (ModelParallel) and, with pp > 1, the
// pipeline runner that drives the stage's micro-batches.
//
// A step's compute: accum_steps micro-batches from the BatchSource, forward and backward each
// (the optimizer's backward reduces where it must), or one pipeline step of as many
// micro-batches; the losses averaged over the micro-batches, the MoE routing of this rank
// counted. Evaluation and the end-of-run sample run the forward alone (collectives too under
// model parallelism, so every rank calls them). Checkpoints and gradient dumps of a
// model-parallel run gather the whole model (gather_full) so they load under any strategy.
//
// Collective failures go through `on_comm_failure` (the trainer's: it names the rank, explains
// the stall and marks the step for an elastic rejoin); other errors return as they are.
//
// Thread safety: one thread (the training loop).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/group.h"
#include "core/status.h"
#include "data/dataset.h"
#include "model/model.h"
#include "model/param_table.h"
#include "parallel/pipeline_runner.h"
#include "parallel/reducer.h"
#include "train/batch_source.h"
#include "train/config.h"
#include "train/expert_rebalance.h"
#include "train/model_parallel.h"
#include "train/run_layout.h"
#include "train/step_optimizer.h"
#include "train/step_profiler.h"

namespace cann::train {

using CommFailure = std::function<Status(const Status&)>;

// What one step's forward and backward passes measured on this rank.
struct StepCompute {
  model::ForwardStats stats;  // losses averaged over the micro-batches (this stage's share)
  parallel::StepComm comm;
  double forward_s = 0, backward_s = 0;
  // MoE models: this rank's routing over the step's micro-batches and MoE layers (under a
  // pipeline, this stage's), and the assignments dropped over capacity.
  std::vector<double> expert_load;
  double dropped = 0;
  // Expert parallelism: the routed rows this rank's experts computed, at its place in the
  // expert group (ep entries, the others zero): summed over the world, each place's load.
  std::vector<double> rank_rows;
  // noaux_tc models and --expert-rebalance: the same counts per model layer,
  // num_hidden_layers x E (zero for layers this rank does not hold).
  std::vector<float> layer_load;
};

class ModelParts {
 public:
  // A collective over `world` under model parallelism (the mesh); `world` null: one process.
  static StatusOr<std::unique_ptr<ModelParts>> build(const model::ModelSpec& spec,
                                                     const RunLayout& layout, comm::Group* world,
                                                     CommFailure on_comm_failure);
  ~ModelParts();

  model::Model& model() { return *model_; }
  const model::Model& model() const { return *model_; }
  ModelParallel* model_parallel() { return mp_.get(); }
  bool pipelined() const { return pipeline_ != nullptr; }
  // The world group after an elastic rejoin (data parallelism only: under model parallelism
  // the rejoin builds the parts again, mesh and pipeline with them).
  void rebind_world(comm::Group* world) { world_ = world; }
  // The whole model's parameter count (a tensor-parallel rank's table holds only its shards).
  double num_parameters() const;

  // The optimizer of this layout: one process's, or the data-parallel engine over the world
  // (or the mesh's gradient group) with ZeRO, compression and buckets as `config` says. Built
  // again after an elastic rejoin (after rebind_world, or on the rebuilt parts).
  StatusOr<std::unique_ptr<StepOptimizer>> make_optimizer(const TrainConfig& config);

  // The step's forward and backward passes; `step` is 0-based (for messages).
  StatusOr<StepCompute> forward_backward(BatchSource& batches, StepOptimizer& opt, int step,
                                         StepProfiler* profiler);
  // The sum of eval_batches x accum_steps micro-batches' language-model losses on this rank
  // (under a pipeline, the last stage's; the caller averages over the ranks).
  StatusOr<float> evaluation_loss_sum(const BatchSource& batches, const StepOptimizer& opt,
                                      int eval_batches);
  // Adds the tied embedding's two gradients (first and last stage); a no-op without pp.
  Status sync_tied_embedding(StepOptimizer& opt);
  // After the optimizer's step, DeepSeek-V3's auxiliary-loss-free balancing (DeepSeek-AI 2024,
  // DeepSeek-V3 report section 2.1.2): each MoE layer's expert bias moves by the spec's
  // expert_bias_update_speed towards balance, from the step's loads summed over the world
  // (each data-parallel rank routes its own tokens; a tensor-parallel group's ranks route the
  // same ones and count once; pipeline stages hold disjoint layers), so every rank holding a
  // layer moves its bias alike. A collective over the world; a no-op without the bias or at
  // speed 0.
  Status update_expert_bias(const StepCompute& c, StepOptimizer& opt);
  // --expert-rebalance (expert_rebalance.h): from now on the steps' routing is counted per layer
  // and rebalance_experts acts on it.
  void set_expert_rebalance(const ExpertRebalance& config);
  // After the optimizer's step `done` (1-based): adds the step's routing to the window, and at
  // the window's end (a collective over the world) sums it, decides, and moves the experts that
  // pay, parameters and the optimizer's moments with them. The move: this stage's new slots
  // (`to`, empty: none) and every stage's moved layers (`layers`).
  StatusOr<ExpertMove> rebalance_experts(const StepCompute& c, StepOptimizer& opt, int done);
  // The first failure of the model-parallel collectives outside the model (gradient norms).
  Status status() const;

  // A collective over the world: out <- the whole model's buffers, one per entry of `locals`
  // (this rank's buffers in its own layout), laid out as full_table(). Model parallelism only.
  Status gather_full(const std::vector<const float*>& locals, float* out);
  const model::ParamTable& full_table() const { return *full_table_; }
  // Where this rank's buffers (its own layout) land in full_table()'s, as
  // model::full_run_groups, for the dense tensors or (`experts`) the experts it holds on behalf
  // of every rank holding the same elements (ModelParallel::held_in_full): ranks whose runs are
  // equal hold equal values. Model parallelism only.
  std::vector<int64_t> replica_runs(bool experts) const;
  model::ShardPlace shard_place() const;

  // Hugging Face weights (hf_weights.h). load_hf sets this rank's parameters (its shard, stage
  // or experts) from DIR; export_hf writes the whole model into DIR from the rank that `writes`,
  // a collective under model parallelism (ZeRO-3 parameters must be materialized first).
  Status load_hf(const model::ModelSpec& spec, const std::string& dir);
  Status export_hf(const model::ModelSpec& spec, const std::string& dir, bool writes);

  // The end-of-run sample (sample.cc); a collective under model parallelism.
  StatusOr<std::string> generate_sample(const data::Dataset& data, uint64_t seed, int tokens);

  // The start-up lines: the mesh and rank table, the pipeline (empty without them).
  std::string describe_mesh() const;
  std::string describe_pipeline() const;

 private:
  ModelParts(const RunLayout& layout, comm::Group* world, CommFailure on_comm_failure)
      : layout_(layout), world_(world), on_comm_failure_(std::move(on_comm_failure)) {}
  Status pipeline_step(float grad_scale, BatchSource& batches, StepOptimizer& opt, int step,
                       StepCompute* out);
  void record_expert_load(StepCompute* out);
  Status sum_over_world(std::vector<float>* values, const char* tag);
  Status sum_layer_load(std::vector<float>* load, const char* tag);
  Status check_loss(double loss, int step) const;

  RunLayout layout_;
  comm::Group* world_;
  CommFailure on_comm_failure_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<ModelParallel> mp_;
  std::unique_ptr<parallel::PipelineRunner> pipeline_;
  // Model parallelism: the whole model's layout, which checkpoints and dumps use.
  std::unique_ptr<model::ParamTable> full_table_;
  std::unique_ptr<ExpertRebalancer> rebalancer_;  // --expert-rebalance; null: off
};

}  // namespace cann::train
