// OptimizerStage: what a data-parallel group does with the gradients between backward and the
// parameters' update, behind one interface, so that the data-parallel engine is a gradient
// reducer (reducer.h) composed with one stage:
//   ReplicatedStage  AdamW on fully averaged gradients (fp32 on the wire, or bf16; under ep
//                    the expert tensors averaged over their expert-data group); every rank
//                    holds the whole optimizer state;
//   CompressedStage  1-bit Adam, or top-k momenta with error feedback, after a warmup on full
//                    gradients (onebit_adam.h; Adam's update on the variance frozen at the
//                    switch);
//   ZeroStage        ZeRO: AdamW state sharded over the ranks (stage 1), gradients too (2),
//                    parameters too (3, gathered a layer at a time around their use).
// Checkpoints see every stage alike: the full moments (gathered from the shards), the step
// count, full parameters where the model's buffer lacks them (stage 3), and the buffers each
// rank holds alone (error feedback, a rank's own momentum) as named vectors the engine
// gathers from every rank and hands back the same way.
//
// Thread safety: the training thread calls everything; reduction() runs on the reducer's
// communication thread, as reducer.h describes.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/group.h"
#include "core/status.h"
#include "model/model.h"
#include "optim/adamw.h"
#include "parallel/reducer.h"
#include "plan/buckets.h"
#include "plan/engine_support.h"

namespace cann::parallel {

// The combinations are plan::engine_supports's: the stages assume a supported one.
struct OptimizerStageConfig {
  int zero = 0;
  plan::Compression compress;
  int onebit_warmup = -1;          // full-gradient steps before compressing; -1: 15% of the run
  bool onebit_warmup_bf16 = true;  // those steps' gradients all-reduced in bf16 (else fp32)
  // Tensor parallelism: the whole model's gradient sum of squares from this rank's shards
  // (empty: the local buffer is the whole model). Needs zero=0 and no compression.
  std::function<double(const float*)> grad_sum_of_squares;
  // Expert parallelism (ep > 1): the group of ranks holding the same experts; expert tensors
  // are reduced over it instead of the data-parallel group. Needs zero=0 and --compress none.
  comm::Group* expert_dp_group = nullptr;
  int ep = 1;
  // Tensor parallelism under ZeRO (ZeroOptimizer::set_model_parallel_norm): which tensors'
  // squares this rank counts, and the sum of the data-parallel total over the tensor group.
  std::function<bool(const model::TensorInfo&)> norm_counted;
  std::function<Status(double*)> norm_across;
};

// The optimizer state a checkpoint holds, full whatever the stage keeps.
struct StageState {
  const float* params = nullptr;  // full parameters where the model's buffer lacks them
  const float* m = nullptr;
  const float* v = nullptr;
  int step = 0;
};

// A buffer this rank holds alone, by the name its checkpoint section takes.
struct RankBuffer {
  std::string name;
  std::vector<float> data;
};
// A buffer of this rank's own state, by view (own_buffers()).
struct OwnBuffer {
  std::string name;
  const float* data = nullptr;
  size_t floats = 0;
};
// This rank's part of a gathered rank buffer in a checkpoint (`floats` long), null when the
// checkpoint has none of that name and size.
using RankBufferLookup = std::function<const float*(const std::string& name, size_t floats)>;

class OptimizerStage {
 public:
  virtual ~OptimizerStage() = default;

  // What the reducer runs on each bucket.
  virtual BucketReduction* reduction() = 0;
  // ZeRO 2 and 3 keep no full gradient between micro-steps: every backward reduces, and the
  // reductions leave the buckets zeroed.
  virtual bool reduces_every_micro_step() const { return false; }
  // The model's parameters are complete and equal on every rank (initialization, a restore):
  // ZeRO-3 keeps its shard and releases the rest.
  virtual Status adopt_params() { return OkStatus(); }
  // ZeRO-3: every layer gathered and kept until the next step (a collective).
  virtual Status materialize_params() { return OkStatus(); }
  // After a restore, on every rank of the group at once (a collective under ZeRO stages 1 and
  // 2, whose own snapshots hold only the parameter pieces each rank updates: the pieces are
  // all-gathered into the parameters).
  virtual Status after_restore() { return OkStatus(); }
  virtual Status param_status() const { return OkStatus(); }
  // The update on the reduced gradients; returns the gradient norm before clipping.
  virtual StatusOr<double> step(float lr) = 0;
  // After the reduction: `fn` gets the reduced gradient of the flat range [begin, begin +
  // count) and may change it (under ZeRO a collective over the shards).
  virtual Status with_grad_range(size_t begin, size_t count,
                                 const std::function<Status(float*)>& fn) = 0;
  // After the reduction: the whole reduced gradient in the model's layout.
  virtual Status gather_grads(float* out) = 0;
  // After step(): params[begin, begin + count) += delta, in the copy the next forward reads
  // (the model's buffer, or under ZeRO-3 this rank's pieces of the range), for state moved by a
  // rule of its own (DeepSeek-V3's expert bias). Every rank passes the same delta.
  virtual void add_to_params(size_t begin, const float* delta, size_t count) = 0;

  // State placed in memory the caller keeps (StepOptimizer::placeable, train/step_optimizer.h):
  // only a stage whose whole state is the model's parameters and both full moments.
  virtual bool placeable() const { return false; }
  virtual void place_state(const optim::UpdateTarget& to) { (void)to; }
  virtual void update_into(const optim::UpdateTarget& to) { (void)to; }
  // Where placeable(): the moments, laid out like the parameters.
  virtual std::vector<float*> moments() { return {}; }

  // The full state (a collective under ZeRO); buffers live until the next call.
  virtual StatusOr<StageState> state() = 0;
  // Full moments and step count back in (any world size).
  virtual Status load_state(const float* m, const float* v, int step) = 0;
  // The buffers this rank holds alone, and whether the stage has any at all.
  virtual std::vector<RankBuffer> rank_buffers() const { return {}; }
  virtual bool keeps_rank_buffers() const { return false; }
  // A checkpoint of another --compress: whether resuming can go on without its rank buffers
  // (past the warmup it cannot: the frozen variance belongs to the run that compressed).
  virtual bool resumes_without_rank_buffers() const { return true; }
  virtual Status load_rank_buffers(const RankBufferLookup& find, const std::string& path) {
    (void)find;
    (void)path;
    return OkStatus();
  }
  // The same from a checkpoint saved by `old_world` ranks (another world size): `find_all`
  // gives a whole gathered section (old_world copies, rank after rank) by name and size, or
  // null. False, with the buffers left at zero, when they cannot be carried over.
  virtual bool reshard_rank_buffers(
      const std::function<const float*(const std::string& name, size_t* floats)>& find_all,
      int old_world) {
    (void)find_all;
    (void)old_world;
    return true;
  }
  // A snapshot of this rank alone, for a rank that only it loads back (model parallelism):
  // the stage's sharded state as this rank holds it, with no collective; empty when the stage
  // holds nothing sharded (its state() gathers nothing). `load_own_buffers` takes them back
  // (`find` as for load_rank_buffers, with this rank's own sizes) with the step count.
  virtual std::vector<OwnBuffer> own_buffers() const { return {}; }
  virtual int own_step() const { return 0; }  // the optimizer's step count, with own_buffers
  virtual Status load_own_buffers(const RankBufferLookup& find, int step, const std::string& path) {
    (void)find;
    (void)step;
    (void)path;
    return OkStatus();
  }
  // Extra checkpoint metadata (JSON members without the braces, "" for none).
  virtual std::string meta_json() const { return ""; }

  // Bytes this rank holds at most.
  virtual size_t optimizer_state_bytes() const = 0;
  virtual size_t gradient_bytes() const = 0;
  virtual size_t parameter_bytes() const = 0;
  // What the start-up line adds about the stage, e.g. " after 15 warmup steps on bf16
  // gradients" ("" for none).
  virtual std::string describe() const { return ""; }
};

// The buckets the stage for `config` reduces: ZeRO-3 gathers parameters a layer at a time, so
// its buckets are whole layers; without ZeRO they are cut where backward reports gradients
// final; stages 1 and 2 keep cuts by size, which their shards and the planner follow. Empty:
// ZeRO-3 and a model whose layers are not contiguous.
std::vector<plan::Bucket> stage_buckets(const model::Model& model,
                                        const OptimizerStageConfig& config,
                                        const plan::EngineBuckets& sizes);

StatusOr<std::unique_ptr<OptimizerStage>> make_optimizer_stage(
    model::Model& model, comm::Group& group, const std::vector<plan::Bucket>& buckets,
    const optim::AdamWConfig& adam, const OptimizerStageConfig& config, int total_steps);

}  // namespace cann::parallel
