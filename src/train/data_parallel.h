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
  std::string compress = "none";  // none | bf16 | onebit | topk:RATIO
  int onebit_warmup = -1;         // -1: 15% of the run
  double bucket_mb = 25.0;
  double first_bucket_mb = 1.0;
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

class DataParallelEngine {
 public:
  static StatusOr<std::unique_ptr<DataParallelEngine>> create(model::Model& model,
                                                              comm::Group& group,
                                                              const optim::AdamWConfig& adam,
                                                              const DataParallelConfig& config,
                                                              int total_steps);
  ~DataParallelEngine();

  // A micro-step's backward, its buckets reduced while it runs: the last micro-step's only, or
  // every micro-step's when reduces_every_micro_step() (ZeRO stage 2).
  Status backward_and_reduce(float grad_scale, parallel::StepComm* stats);
  // The same in three parts, for a pipeline whose last micro-batch runs several backwards (one
  // per model chunk): begin, then layer_done from each of them, then finish.
  void begin_reduction();
  void layer_done(int layer);
  Status finish_reduction(parallel::StepComm* stats);
  bool reduces_every_micro_step() const { return config_.zero >= 2; }
  // Clears the gradients before a step (nothing to do under stages 2 and 3: the reductions did).
  void zero_grads();
  // The model's flat parameters are complete and equal on every rank (after initialization):
  // under stage 3 this rank keeps its shard of them and releases the rest. No-op otherwise.
  Status adopt_params();
  // Under stage 3, every layer gathered and kept until the next step, so that one rank may run
  // the model alone (sampling at the end of a run); a collective. No-op otherwise.
  Status materialize_params();
  // The first failure of a stage 3 parameter gather (check after each forward and backward).
  Status param_status() const;
  // The optimizer step on the reduced gradients; returns the gradient norm.
  StatusOr<double> step(float lr);
  // After the reduction: `fn` gets the reduced gradient of the flat range [begin, begin +
  // count) and may change it before the step takes it (under ZeRO a collective that assembles
  // the range from the shards and hands each rank its pieces back).
  Status with_grad_range(size_t begin, size_t count, const std::function<Status(float*)>& fn);
  // After the reduction: the whole reduced gradient in the model's layout (under ZeRO a
  // collective that gathers the shards).
  Status gather_grads(float* out);

  // A collective: every rank calls it; the returned snapshot's buffers live until the next call.
  StatusOr<OptimizerSnapshot> snapshot();
  // Loads parameters, moments and (when the checkpoint's world size matches) error buffers.
  Status restore(const ckpt::LoadedCheckpoint& ck, ResumeState* state);

  // "zero=1, 3 buckets, onebit after 15 warmup steps", for the start-up line.
  std::string describe() const;
  // Bytes of optimizer state this rank holds (moments, error buffers, ZeRO staging).
  size_t optimizer_state_bytes() const;
  // Bytes of gradients this rank holds at most: the full buffer, plus the reduced shard under
  // stage 1; under stage 2 the shard and the buckets between backward and their reduction.
  size_t gradient_bytes() const;
  // Bytes of parameters this rank holds at most: the full buffer, or under stage 3 its shard,
  // the layers kept all step (embeddings, final norm), two blocks and the gather staging.
  size_t parameter_bytes() const;

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

// Parses "topk:0.01" into the ratio; error for anything else.
StatusOr<double> parse_topk_ratio(const std::string& compress);

}  // namespace cann::train
