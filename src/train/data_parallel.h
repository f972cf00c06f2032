// DataParallelEngine: the optimizer side of a data-parallel worker. It owns the gradient
// reducer (buckets overlapped with backward), the reduction the run asked for, and the
// optimizer that goes with it:
//   --zero 0, --compress none|bf16          AdamW on averaged gradients (replicated state);
//   --zero 0, --compress onebit             1-bit Adam (fp32 warmup, then 1-bit momenta);
//   --zero 0, --compress topk:R             the same warmup, then each rank's momentum sent
//                                           top-k with error feedback, Adam's update on the
//                                           frozen variance (Deep Gradient Compression);
//   --zero 1                                AdamW state sharded over the ranks (ZeRO stage 1);
//   --zero 2                                gradients sharded too (ZeRO stage 2);
//   --zero 3                                parameters sharded too, gathered a layer at a
//                                           time around its use (ZeRO stage 3).
// Checkpoints see full AdamW moments (gathered from the shards under ZeRO) plus per-rank
// error-feedback buffers, gathered so rank 0 can write them all.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "comm/group.h"
#include "model/model.h"
#include "optim/adamw.h"
#include "parallel/reducer.h"
#include "plan/buckets.h"
#include "plan/engine_support.h"
#include "train/step_optimizer.h"
#include "train/train_state.h"

namespace cann::parallel {
class OneBitAdam;
class TopKReduction;
class FullReduction;
class ExpertAwareReduction;
class ZeroOptimizer;
class LayerGatherer;
}  // namespace cann::parallel

namespace cann::train {

struct DataParallelConfig {
  int zero = 0;
  plan::Compression compress;
  int onebit_warmup = -1;  // -1: 15% of the run
  plan::EngineBuckets buckets;
  // Tensor parallelism: the whole model's gradient sum of squares from this rank's shards
  // (empty: the local buffer is the whole model). Needs zero=0 and no 1-bit Adam.
  std::function<double(const float*)> grad_sum_of_squares;
  // Expert parallelism (ep > 1): the group of ranks holding the same experts; expert tensors are
  // reduced over it instead of the data-parallel group. Needs zero=0 and --compress none.
  comm::Group* expert_dp_group = nullptr;
  int ep = 1;
  // Model parallelism: checkpoints hold the whole model; restore takes this rank's part.
  CheckpointShards shards;
  // Tensor parallelism under ZeRO (ZeroOptimizer::set_model_parallel_norm): which tensors'
  // squares this rank counts, and the sum of the data-parallel total over the tensor group.
  std::function<bool(const model::TensorInfo&)> norm_counted;
  std::function<Status(double*)> norm_across;
};

// The combinations are plan::engine_supports's: create() assumes a supported one.
class DataParallelEngine : public StepOptimizer {
 public:
  static StatusOr<std::unique_ptr<DataParallelEngine>> create(model::Model& model,
                                                              comm::Group& group,
                                                              const optim::AdamWConfig& adam,
                                                              const DataParallelConfig& config,
                                                              int total_steps);
  ~DataParallelEngine();

  // A micro-step's backward, its buckets reduced while it runs: the last micro-step's only, or
  // every micro-step's under ZeRO stage 2 (which keeps no full gradient between them).
  Status backward(float grad_scale, bool last, parallel::StepComm* stats) override;
  Status backward_and_reduce(float grad_scale, parallel::StepComm* stats);
  void begin_reduction() override;
  void layer_done(int layer) override;
  Status finish_reduction(parallel::StepComm* stats) override;
  // Nothing to clear under stages 2 and 3: the reductions did.
  void zero_grads() override;
  // Stage 3: this rank keeps its shard of the parameters and releases the rest.
  Status adopt_params() override;
  // Stage 3: every layer gathered and kept until the next step (a collective).
  Status materialize_params() override;
  Status param_status() const override;
  StatusOr<double> step(float lr) override;
  // Under ZeRO a collective that assembles the range from the shards and hands each rank its
  // pieces back.
  Status with_grad_range(size_t begin, size_t count,
                         const std::function<Status(float*)>& fn) override;
  Status gather_grads(float* out) override;

  // Full moments (gathered from the shards under ZeRO) and every rank's error buffers.
  StatusOr<OptimizerSnapshot> snapshot() override;
  // Loads parameters, moments and (when the checkpoint's world size matches) error buffers.
  Status restore(const ckpt::LoadedCheckpoint& ck, ResumeState* state) override;

  // "zero=1, 3 buckets, onebit after 15 warmup steps", for the start-up line.
  std::string describe() const override;
  // Moments, error buffers, ZeRO staging.
  size_t optimizer_state_bytes() const override;
  // The full buffer, plus the reduced shard under stage 1; under stage 2 the shard and the
  // buckets between backward and their reduction.
  size_t gradient_bytes() const override;
  // The full buffer, or under stage 3 its shard, the layers kept all step (embeddings, final
  // norm), two blocks and the gather staging.
  size_t parameter_bytes() const override;

 private:
  DataParallelEngine(model::Model& model, comm::Group& group, DataParallelConfig config);
  parallel::BucketReduction* reduction();
  Status gather_rank_buffers(const std::vector<float>& mine, std::vector<float>* all);

  model::Model& model_;
  comm::Group& group_;
  DataParallelConfig config_;
  std::unique_ptr<parallel::GradReducer> reducer_;
  std::unique_ptr<optim::AdamW> adam_;  // zero=0 without onebit
  std::unique_ptr<parallel::FullReduction> full_;
  std::unique_ptr<parallel::ExpertAwareReduction> expert_aware_;
  std::unique_ptr<parallel::TopKReduction> topk_;
  std::unique_ptr<parallel::OneBitAdam> onebit_;
  std::unique_ptr<parallel::ZeroOptimizer> zero_;
  std::unique_ptr<comm::Group> param_group_;  // stage 3's gathers
  std::unique_ptr<parallel::LayerGatherer> gatherer_;
  // Snapshot staging (full moments under ZeRO, gathered error buffers).
  std::vector<float> snap_m_, snap_v_, snap_a_, snap_b_, snap_p_;
};

}  // namespace cann::train
