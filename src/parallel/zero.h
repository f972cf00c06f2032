// ZeRO stage 1 (Rajbhandari et al. 2020): the AdamW state is sharded over the data-parallel
// ranks. Each gradient bucket is reduce-scattered instead of all-reduced, so rank r receives
// the averaged gradient of the r-th piece of every bucket; rank r updates those pieces (its
// shard of the parameters, with its shard of m and v), and the pieces are all-gathered back
// into every rank's full parameter buffer.
//
// Pieces. Bucket [b, e) of n floats is cut into P pieces of c = ceil(n/P): piece r is
// [b + r*c, min(e, b + (r+1)*c)). Example: a bucket [100, 110) over P = 3 ranks has c = 4 and
// pieces [100,104), [104,108), [108,110); the reduce-scatter runs on a copy padded to 12.
// A rank's shard is its piece of every bucket, stored bucket after bucket, c floats each.
//
// Memory per rank: parameters and gradients in full (4N + 4N bytes), AdamW moments for N/P
// parameters (8N/P bytes), plus one bucket of staging.
//
// ZeRO stage 2 shards the gradients as well. Every micro-step's backward reduce-scatters its
// buckets (not only the last one's), each rank adding its piece into its gradient shard; once a
// bucket has been copied out for the reduce-scatter, its range of the flat gradient buffer is
// zeroed and its pages released (core/pages.h). The model keeps writing gradients at their
// offsets, so a rank's resident gradients are its shard (4N/P bytes) and the buckets between
// backward and reduction, not 4N. Gradient accumulation then costs one reduce-scatter per
// micro-step, as in DeepSpeed's stage 2.
//
// ZeRO stage 3 shards the parameters as well: the buckets are whole layers
// (plan_layer_buckets), rank r keeps its piece of every layer's parameters in a shard of its
// own (the fp32 master copy the optimizer updates, no all-gather after the step), and
// LayerGatherer (zero_params.h) all-gathers a layer into the model's flat buffer just before
// forward or backward needs it and releases its pages right after. Gradients as in stage 2.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "comm/group.h"
#include "core/aligned_buffer.h"
#include "model/param_table.h"
#include "optim/adamw.h"
#include "parallel/reducer.h"

namespace cann::parallel {

struct ShardPiece {
  size_t flat_begin = 0;    // first parameter of this rank's piece
  size_t len = 0;           // parameters in the piece (may be 0 for the last ranks)
  size_t padded = 0;        // c: the piece size every rank uses for this bucket
  size_t shard_offset = 0;  // where the piece starts in the rank's shard buffers
};

std::vector<ShardPiece> shard_pieces(const std::vector<plan::Bucket>& buckets, int rank, int world);

class ZeroOptimizer {
 public:
  // stage is 1, 2 or 3 (stage 3 wants one bucket per layer: plan_layer_buckets).
  ZeroOptimizer(const model::ParamTable& table, optim::AdamWConfig config, comm::Group& group,
                const std::vector<plan::Bucket>& buckets, int stage);
  ~ZeroOptimizer();

  // The reduction to give the GradReducer: reduce-scatter into this rank's gradient shard.
  BucketReduction* reduction();
  // Clips by the global norm (one all-reduce of the shards' squared norms), updates this rank's
  // pieces and all-gathers the parameters (stages 1 and 2; stage 3 updates its parameter shard
  // and leaves `params` alone). Returns the global gradient norm before clipping.
  StatusOr<double> step(float* params, float lr);
  // Tensor parallelism: the shard holds this rank's part of a tp-split model, so the global
  // norm counts only the tensors `counted` selects (a replicated tensor on one tp rank) and
  // adds the data-parallel total over the tensor group with `across` (in place, a collective).
  void set_model_parallel_norm(const std::function<bool(const model::TensorInfo&)>& counted,
                               std::function<Status(double*)> across);

  // Stage 3: takes this rank's pieces of full parameters (after initialization or a restore).
  void load_params(const float* full);
  // Stages 1 and 2: every rank's pieces of `params` (each rank's own pieces, which its step
  // updates) all-gathered into all of `params`; a collective, as at the end of step().
  Status allgather_params(float* params);
  // Stage 3: every rank's pieces gathered into full parameters; a collective.
  Status gather_params(float* full);
  // Every rank's reduced gradient pieces gathered into a full gradient; a collective.
  Status gather_grads(float* full) { return gather_pieces(full, grad_shard_.data()); }
  // Stage 3: params[begin, begin + count) += delta on this rank's pieces of that range.
  void add_to_param_shard(size_t begin, const float* delta, size_t count);
  // Stage 3: this rank's parameter pieces, laid out as grad_shard().
  const float* param_shard() const { return param_shard_.data(); }
  const std::vector<ShardPiece>& pieces() const { return pieces_; }
  const std::vector<plan::Bucket>& buckets() const { return buckets_; }

  // A collective over the data-parallel group, after the reductions: `fn` gets the reduced
  // gradient of the flat range [begin, begin + count), assembled from every rank's pieces, and
  // may change it; each rank then takes its own pieces of the result back. The pipeline's tied
  // embedding is summed this way, its two copies lying in differently cut buffers.
  Status with_grad_range(size_t begin, size_t count, const std::function<Status(float*)>& fn);

  int step_count() const { return step_; }
  void set_step_count(int s) { step_ = s; }
  // Full (unsharded) moments on every rank, for checkpoints; a collective.
  Status gather_state(float* m_full, float* v_full);
  // Takes this rank's pieces of full moments (loading a checkpoint, any world size).
  void scatter_state(const float* m_full, const float* v_full);
  // This rank's own moments and (stage 3) parameter pieces as it holds them, shard_floats()
  // each: a snapshot that only this rank of this layout loads back, with no collective.
  const float* m_shard() const { return m_.data(); }
  const float* v_shard() const { return v_.data(); }
  void load_shards(const float* m, const float* v, const float* param_shard);
  size_t shard_floats() const { return shard_floats_; }
  // This rank's reduced gradient pieces (bucket after bucket, as shard_pieces lays them out).
  const float* grad_shard() const { return grad_shard_.data(); }
  int stage() const { return stage_; }
  // Floats of communication staging this optimizer allocates (sized by the largest bucket).
  size_t staging_floats() const;

 private:
  class ShardReduction;
  Status gather_pieces(float* full, const float* shard);

  const model::ParamTable& table_;
  const optim::AdamWConfig config_;
  comm::Group& group_;
  const std::vector<plan::Bucket> buckets_;
  const int stage_;
  std::vector<ShardPiece> pieces_;
  size_t shard_floats_ = 0;
  AlignedBuffer<float> grad_shard_, m_, v_;
  AlignedBuffer<float> param_shard_;  // stage 3
  std::vector<float> staging_;  // one padded bucket (P * c), training thread only
  std::unique_ptr<ShardReduction> reduction_;
  int step_ = 0;
  // Tensor parallelism: the shard ranges (offset, length) whose squares count, and the sum
  // over the tensor group; empty: the whole shard counts and the sum stops at the dp group.
  std::vector<std::pair<size_t, size_t>> norm_ranges_;
  std::function<Status(double*)> norm_across_;
};

}  // namespace cann::parallel
