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
#pragma once

#include <memory>
#include <vector>

#include "comm/group.h"
#include "optim/adamw.h"
#include "parallel/reductions.h"

namespace cann::parallel {

class OneBitAdam {
 public:
  OneBitAdam(const model::ParamTable& table, optim::AdamWConfig config, comm::Group& group,
             const std::vector<Bucket>& buckets, int warmup_steps);

  // Whether the next step() runs in the compression stage.
  bool compressing() const { return adam_.step_count() >= warmup_steps_; }
  // The bucket reduction for the coming step: fp32 gradients in warmup, momenta after.
  BucketReduction* reduction() {
    return compressing() ? static_cast<BucketReduction*>(momentum_.get()) : full_.get();
  }
  // One update. Returns the gradient norm (warmup: of the averaged gradient; compression: the
  // root mean square over ranks of the local gradients' norms, an all-reduce of one number).
  StatusOr<double> step(float* params, const float* grads, float lr);

  optim::AdamW& adam() { return adam_; }
  OneBitMomentum& momentum() { return *momentum_; }
  int warmup_steps() const { return warmup_steps_; }

 private:
  const model::ParamTable& table_;
  comm::Group& group_;
  optim::AdamW adam_;
  const int warmup_steps_;
  std::unique_ptr<FullReduction> full_;
  std::unique_ptr<OneBitMomentum> momentum_;
};

}  // namespace cann::parallel
