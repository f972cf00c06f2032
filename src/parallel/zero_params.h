// LayerGatherer: ZeRO stage 3's parameters, gathered into the model's flat buffer one layer at
// a time just before they are used and released right after (Rajbhandari et al. 2020, the
// "P_os+g+p" stage). Each rank holds its piece of every layer (ZeroOptimizer::param_shard());
// a layer's all-gather (allgatherv of the ranks' exact piece lengths, which tile the layer's
// range in rank order) writes straight into its range of the flat buffer, and releasing hands the range's
// pages back to the kernel (core/pages.h), so a rank keeps in memory its shard, the layers
// outside the transformer blocks (embeddings, final norm: needed at both ends of every pass,
// gathered once per optimizer step) and at most two blocks: the one being computed and the
// next, whose gather was started early (prefetch) so it overlaps the current block's compute.
//
// The gathers run on a group of their own: the training thread issues them while the gradient
// reducer's thread issues reduce-scatters on the data-parallel group, and each group needs one
// issuing order on every rank. Every rank calls the same sequence (forward and backward visit
// the blocks in the same order everywhere), so the gathers match.
//
// Failures: the first error is kept in status(); later calls do nothing (the released ranges
// read as zeros), and the caller checks status() after each forward and backward.
#pragma once

#include <memory>
#include <vector>

#include "comm/group.h"
#include "core/status.h"
#include "parallel/zero.h"
#include "plan/buckets.h"

namespace cann::parallel {

class LayerGatherer {
 public:
  // buckets: one per layer (plan_layer_buckets); pieces: this rank's (shard_pieces); params:
  // the model's flat buffer; shard: this rank's parameter pieces; blocks: the layer indices
  // gathered per use (the transformer blocks), every other layer is kept for the whole step.
  LayerGatherer(std::vector<plan::Bucket> buckets, std::vector<ShardPiece> pieces,
                comm::Group& group, float* params, const float* shard,
                const std::vector<int>& blocks);
  ~LayerGatherer();

  // Start of a forward: the kept layers in place, and the gather of block `prefetch` started
  // (-1: none).
  void begin_forward(int prefetch);
  // Block `layer` in place (waits for its gather, or gathers it now); then starts the gather of
  // block `prefetch` (-1: none).
  void before(int layer, int prefetch);
  // Block `layer` is not needed until its next before(): its range is released.
  void after(int layer);
  // The parameters changed (optimizer step, restore): every gathered copy is dropped.
  void invalidate();
  // Every layer in place and kept until invalidate() (for inference outside a training step).
  Status gather_all();
  const Status& status() const { return status_; }
  // Floats of the flat buffer resident at most during a step: kept layers + two largest blocks.
  size_t resident_floats_bound() const;

 private:
  enum class State { kReleased, kInFlight, kResident };
  struct Slot {
    std::shared_ptr<comm::Work> work;
    int bucket = -1;
  };
  int bucket_of(int layer) const;
  void start(int b);
  void finish(int b);
  void release(int b);

  const std::vector<plan::Bucket> buckets_;
  const std::vector<ShardPiece> pieces_;
  comm::Group& group_;
  float* const params_;
  const float* const shard_;
  std::vector<int> layer_to_bucket_;  // by layer + 1 (layer -1 is the embeddings)
  std::vector<bool> is_block_;        // per bucket
  std::vector<State> state_;          // per bucket
  std::vector<std::vector<size_t>> counts_;  // per bucket: every rank's piece length
  Slot slots_[2];
  bool keep_all_ = false;
  Status status_;
};

}  // namespace cann::parallel
