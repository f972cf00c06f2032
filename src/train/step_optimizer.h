// StepOptimizer: the optimizer side of a training step, one interface whether the run is one
// process or a data-parallel group, so the training loop never asks which. Per step: clear the
// gradients, run each micro-step's backward (reducing over the ranks where the run has any),
// then update the parameters; for checkpoints, the full optimizer state out and back in.
//
// Two implementations: LocalOptimizer (below: AdamW on this process's gradients) and
// DataParallelEngine (data_parallel.h: the bucketed reduction overlapped with backward, and
// replicated, compressed or ZeRO-sharded optimizer state).
//
// Thread safety: one thread (the training loop).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "core/status.h"
#include "model/model.h"
#include "optim/adamw.h"
#include "parallel/reducer.h"
#include "train/train_state.h"

namespace cann::train {

class StepOptimizer {
 public:
  virtual ~StepOptimizer() = default;

  // Clears the gradients before a step.
  virtual void zero_grads() = 0;
  // One micro-step's backward; `last` is the step's last micro-step. The data-parallel engine
  // reduces during the backwards that must (the last one's, or every one's under ZeRO-2) and
  // adds the communication to `stats`.
  virtual Status backward(float grad_scale, bool last, parallel::StepComm* stats) = 0;
  // The same reduction in three parts, for a pipeline whose last micro-batch runs several
  // backwards (one per model chunk): begin, layer_done from each of them, finish.
  virtual void begin_reduction() = 0;
  virtual void layer_done(int layer) = 0;
  virtual Status finish_reduction(parallel::StepComm* stats) = 0;

  // The model's flat parameters are complete and equal on every rank (after initialization
  // or a restore): ZeRO-3 keeps its shard and releases the rest.
  virtual Status adopt_params() = 0;
  // Every parameter in place, so that one rank may run the model alone (sampling); a
  // collective under ZeRO-3.
  virtual Status materialize_params() = 0;
  // The first failure of a parameter gather (check after each forward and backward).
  virtual Status param_status() const = 0;
  // After a restore (or a start without one), on every rank of the world at once: what a
  // rank's own snapshot left to its peers (ZeRO stages 1 and 2: the parameters beyond its own
  // pieces) gathered. A collective where the state is sharded.
  virtual Status after_restore() { return OkStatus(); }

  // The update on the reduced gradients; returns the gradient norm.
  virtual StatusOr<double> step(float lr) = 0;
  // After the reduction: `fn` gets the reduced gradient of [begin, begin + count) and may
  // change it before step() takes it (a collective under ZeRO).
  virtual Status with_grad_range(size_t begin, size_t count,
                                 const std::function<Status(float*)>& fn) = 0;
  // After the reduction: the whole reduced gradient in the model's layout (a collective under
  // ZeRO).
  virtual Status gather_grads(float* out) = 0;
  // After step(): params[begin, begin + count) += delta wherever this rank keeps them (not a
  // collective; every rank holding the range passes the same delta). For state that is not
  // trained by gradient (DeepSeek-V3's expert bias).
  virtual void add_to_params(size_t begin, const float* delta, size_t count) = 0;

  // The state a checkpoint holds (a collective in a data-parallel group); the snapshot's
  // buffers live until the next call.
  virtual StatusOr<OptimizerSnapshot> snapshot() = 0;
  // The state of this rank alone, for a snapshot only this rank of this layout loads back
  // (model parallelism): no collective where the state is sharded (ZeRO); else snapshot().
  virtual StatusOr<OptimizerSnapshot> snapshot_own() { return snapshot(); }
  // Loads parameters, moments and what else the checkpoint holds for this optimizer.
  virtual Status restore(const ckpt::LoadedCheckpoint& ck, ResumeState* state) = 0;

  // State that lives in memory the caller keeps (the elastic snapshots' mappings,
  // train/state_keeper.h). Only where the whole state a snapshot holds is the model's
  // parameters and both full moments; elsewhere placeable() is false and the others do nothing.
  virtual bool placeable() const { return false; }
  // The state moves to `to` now (copied), or back into buffers of its own (to.params null).
  virtual void place_state(const optim::UpdateTarget& to) { (void)to; }
  // The next step() writes its result to `to` instead of in place; the state lives there
  // after it.
  virtual void update_into(const optim::UpdateTarget& to) { (void)to; }

  // The optimizer's state laid out like the model's parameters (AdamW's moments), where that is
  // all of its state (the optimizers placeable() names); empty elsewhere. For moving the state
  // of some parameters with them (experts changing ranks, Model::move_experts).
  virtual std::vector<float*> parameter_shaped_state() { return {}; }

  // Bytes this rank holds at most: parameters, gradients, optimizer state.
  virtual size_t parameter_bytes() const = 0;
  virtual size_t gradient_bytes() const = 0;
  virtual size_t optimizer_state_bytes() const = 0;
  // "zero=1, 3 gradient buckets, compress none", for the start-up line.
  virtual std::string describe() const = 0;
};

// One process: AdamW with global-norm clipping on the model's own gradients.
class LocalOptimizer : public StepOptimizer {
 public:
  LocalOptimizer(model::Model& model, const optim::AdamWConfig& adam);

  void zero_grads() override { model_.zero_grads(); }
  Status backward(float grad_scale, bool last, parallel::StepComm* stats) override;
  void begin_reduction() override {}
  void layer_done(int) override {}
  Status finish_reduction(parallel::StepComm*) override { return OkStatus(); }
  Status adopt_params() override { return OkStatus(); }
  Status materialize_params() override { return OkStatus(); }
  Status param_status() const override { return OkStatus(); }
  StatusOr<double> step(float lr) override;
  Status with_grad_range(size_t begin, size_t count,
                         const std::function<Status(float*)>& fn) override;
  Status gather_grads(float* out) override;
  void add_to_params(size_t begin, const float* delta, size_t count) override {
    if (into_.sums != nullptr) into_.sums->valid = false;
    for (size_t i = 0; i < count; ++i) model_.params()[begin + i] += delta[i];
  }
  StatusOr<OptimizerSnapshot> snapshot() override;
  Status restore(const ckpt::LoadedCheckpoint& ck, ResumeState* state) override;
  size_t parameter_bytes() const override;
  size_t gradient_bytes() const override { return parameter_bytes(); }
  size_t optimizer_state_bytes() const override { return 2 * parameter_bytes(); }
  std::string describe() const override { return "AdamW on one process"; }
  bool placeable() const override { return true; }
  void place_state(const optim::UpdateTarget& to) override;
  void update_into(const optim::UpdateTarget& to) override { into_ = to; }
  std::vector<float*> parameter_shaped_state() override { return {adam_.m(), adam_.v()}; }

 private:
  model::Model& model_;
  optim::AdamW adam_;
  optim::UpdateTarget into_;  // the next step's output; params null: in place
};

}  // namespace cann::train
