// 1-bit Adam (Tang et al. 2021): Adam whose communication is compressed to one bit per
// parameter once the variance has settled.
//
//   warmup (the first warmup_steps steps): ordinary AdamW on gradients all-reduced in fp32;
//   then: the variance is frozen (bias-corrected once, at the switch); each rank updates the
//         momentum with its local gradient and the momenta are averaged through the 1-bit
//         all-reduce with error feedback on both sides (OneBitMomentum, per bucket, overlapped
//         with backward); the update is p -= lr (m / (1 - beta1^t)) / (sqrt(v) + eps), with
//         AdamW's decoupled weight decay. Gradient clipping applies during warmup only (the
//         compression stage never sees the averaged gradient).
// State beyond AdamW's: the error buffers of every bucket (export/import for checkpoints).
//
// Top-k (--compress topk:R) runs in the same two stages with another compressed stage: the
// gradients' top-k all-reduce with error feedback (TopKReduction), then m = beta1 m +
// (1 - beta1) g with the sparse average and the same update on the frozen variance. Plain
// AdamW on top-k gradients stalls: a coordinate that is sent once every 1/R steps arrives with
// about 1/R steps of gradient, and Adam divides it by the root of its own square, so it moves
// the weight by about one step's worth instead of 1/R of them (+20% validation loss after
// 120 steps at R = 1%). With the variance frozen at the dense gradients' scale, the sent
// mass moves the weights as far as the dense gradients would have.
#pragma once

#include <memory>
#include <vector>

#include "comm/group.h"
#include "optim/adamw.h"
#include "parallel/reductions.h"

namespace cann::parallel {

class OneBitAdam {
 public:
  // gradient_compressor (not owned): the compressed stage's gradient reduction for top-k;
  // null: 1-bit momenta.
  OneBitAdam(const model::ParamTable& table, optim::AdamWConfig config, comm::Group& group,
             const std::vector<Bucket>& buckets, int warmup_steps,
             BucketReduction* gradient_compressor = nullptr);

  // Whether the next step() runs in the compression stage.
  bool compressing() const { return adam_.step_count() >= warmup_steps_; }
  // The bucket reduction for the coming step: fp32 gradients in warmup, momenta after.
  BucketReduction* reduction() { return compressing() ? compressed_ : full_.get(); }
  // One update. Returns the gradient norm (warmup: of the averaged gradient; compression: the
  // root mean square over ranks of the local gradients' norms, an all-reduce of one number).
  StatusOr<double> step(float* params, const float* grads, float lr);

  optim::AdamW& adam() { return adam_; }
  OneBitMomentum& momentum() { return *momentum_; }  // 1-bit only
  bool one_bit() const { return momentum_ != nullptr; }
  int warmup_steps() const { return warmup_steps_; }

 private:
  const model::ParamTable& table_;
  comm::Group& group_;
  optim::AdamW adam_;
  const int warmup_steps_;
  std::unique_ptr<FullReduction> full_;
  std::unique_ptr<OneBitMomentum> momentum_;
  std::unique_ptr<BucketReduction> sparse_momentum_;  // top-k
  BucketReduction* compressed_ = nullptr;
};

}  // namespace cann::parallel
