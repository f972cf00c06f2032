// DataParallelEngine: the optimizer side of a data-parallel worker, a short composer. It owns
// the gradient reducer (buckets overlapped with backward) and one parallel::OptimizerStage,
// the reduction and optimizer the run asked for:
//   zero=0, --compress none|bf16   ReplicatedStage: AdamW on averaged gradients;
//   zero=0, --compress onebit|topk CompressedStage: a warmup, then 1-bit momenta or each
//                                  rank's momentum sent top-k (Deep Gradient Compression);
//   zero=1|2|3                     ZeroStage: optimizer state, then gradients, then
//                                  parameters sharded over the ranks.
// It turns the stage's state into checkpoints and back: full AdamW moments (gathered from the
// shards under ZeRO) plus the buffers each rank holds alone, gathered so rank 0 can write them
// all and handed back by rank on restore (when the world size and --compress match).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "comm/group.h"
#include "model/model.h"
#include "optim/adamw.h"
#include "parallel/optimizer_stage.h"
#include "parallel/reducer.h"
#include "plan/buckets.h"
#include "train/step_optimizer.h"
#include "train/train_state.h"

namespace cann::train {

struct DataParallelConfig : parallel::OptimizerStageConfig {
  plan::EngineBuckets buckets;
  // Model parallelism: checkpoints hold the whole model; restore takes this rank's part (a
  // rank's own snapshot, marked with its rank, is in its own layout and loads as it is).
  CheckpointShards shards;
};

// The combinations are plan::engine_supports's: create() assumes a supported one.
class DataParallelEngine : public StepOptimizer {
 public:
  static StatusOr<std::unique_ptr<DataParallelEngine>> create(model::Model& model,
                                                              comm::Group& group,
                                                              const optim::AdamWConfig& adam,
                                                              const DataParallelConfig& config,
                                                              int total_steps);
  ~DataParallelEngine() override;

  // A micro-step's backward, its buckets reduced while it runs: the last micro-step's only, or
  // every micro-step's under ZeRO stage 2 (which keeps no full gradient between them).
  Status backward(float grad_scale, bool last, parallel::StepComm* stats) override;
  Status backward_and_reduce(float grad_scale, parallel::StepComm* stats);
  void begin_reduction() override;
  void layer_done(int layer) override;
  Status finish_reduction(parallel::StepComm* stats) override;
  // Nothing to clear under stages 2 and 3: the reductions did.
  void zero_grads() override;
  Status adopt_params() override { return stage_->adopt_params(); }
  Status materialize_params() override { return stage_->materialize_params(); }
  Status after_restore() override { return stage_->after_restore(); }
  Status param_status() const override { return stage_->param_status(); }
  StatusOr<double> step(float lr) override { return stage_->step(lr); }
  bool placeable() const override { return stage_->placeable(); }
  void place_state(const optim::UpdateTarget& to) override { stage_->place_state(to); }
  void update_into(const optim::UpdateTarget& to) override { stage_->update_into(to); }
  std::vector<float*> parameter_shaped_state() override { return stage_->moments(); }
  Status with_grad_range(size_t begin, size_t count,
                         const std::function<Status(float*)>& fn) override {
    return stage_->with_grad_range(begin, count, fn);
  }
  Status gather_grads(float* out) override { return stage_->gather_grads(out); }
  void add_to_params(size_t begin, const float* delta, size_t count) override {
    stage_->add_to_params(begin, delta, count);
  }
  StatusOr<OptimizerSnapshot> snapshot() override;
  StatusOr<OptimizerSnapshot> snapshot_own() override;
  Status restore(const ckpt::LoadedCheckpoint& ck, ResumeState* state) override;
  // "zero=1, 3 gradient buckets, compress none", for the start-up line.
  std::string describe() const override;
  size_t optimizer_state_bytes() const override { return stage_->optimizer_state_bytes(); }
  size_t gradient_bytes() const override { return stage_->gradient_bytes(); }
  size_t parameter_bytes() const override { return stage_->parameter_bytes(); }

 private:
  DataParallelEngine(model::Model& model, comm::Group& group, DataParallelConfig config)
      : model_(model), group_(group), config_(std::move(config)) {}

  model::Model& model_;
  comm::Group& group_;
  DataParallelConfig config_;
  std::unique_ptr<parallel::GradReducer> reducer_;
  std::unique_ptr<parallel::OptimizerStage> stage_;
  const std::string& extra_meta(const std::string& stage_meta);

  // Snapshot staging: every rank's copy of the buffers each holds alone.
  std::vector<std::vector<float>> gathered_;
  std::string extra_meta_, extra_meta_of_;  // the snapshots' optimizer metadata, and its source
};

}  // namespace cann::train
