// 1-bit Adam (Tang et al. 2021): Adam whose communication is compressed to one bit per
// parameter once the variance has settled.
//
//   warmup (the first warmup_steps steps): ordinary AdamW on gradients all-reduced in bf16
//         (by default: the warmup then costs half the fp32 all-reduce, as in Tang et al. 2021,
//         whose warmup all-reduced fp16 gradients) or in fp32;
//   then: the variance is frozen (bias-corrected once, at the switch); each rank updates the
//         momentum with its local gradient and the momenta are averaged through the 1-bit
//         all-reduce with error feedback on both sides (OneBitMomentum, per bucket, overlapped
//         with backward); the update is p -= lr (m / (1 - beta1^t)) / (sqrt(v) + eps), with
//         AdamW's decoupled weight decay. Gradient clipping applies during warmup only (the
//         compression stage never sees the averaged gradient).
// State beyond AdamW's: the error buffers of every bucket (export/import for checkpoints).
//
// Top-k (--compress topk:R) runs in the same two stages with another compressed stage, after
// Deep Gradient Compression (Lin et al. 2018, sections 3.2 and 3.3):
//   momentum correction: each rank keeps its own momentum u = beta1 u + (1 - beta1) g of its
//     local gradients (starting from the averaged momentum at the switch) and sends the top-k
//     of u with error feedback (TopKReduction); the sparse average is the step's momentum m,
//     applied with the same update on the frozen variance. Without compression this is the
//     frozen-variance Adam exactly; with it, a coordinate's momentum leaves in one piece when
//     it is sent, instead of its gradients leaving late and then being smoothed over another
//     1 / (1 - beta1) steps.
//   density warmup: the share sent starts at 25% at the switch and falls by 4x every
//     warmup_steps steps down to R, so the error feedback starts from a dense picture rather
//     than a 1% one. On the dp_vs_ddp benchmark (R = 1%, 18 fp32 steps of 120) the two took
//     top-k's final validation loss from 4.0% above the uncompressed run to 1.5%.
// AdamW on the top-k gradients directly stalls: a coordinate that is sent once every 1/R steps
// arrives with about 1/R steps of gradient, and Adam divides it by the root of its own square,
// so it moves the weight by about one step's worth instead of 1/R of them (+20% validation
// loss after 120 steps at R = 1%). With the variance frozen at the dense gradients' scale, the
// sent mass moves the weights as far as the dense gradients would have.
#pragma once

#include <memory>
#include <vector>

#include "comm/group.h"
#include "optim/adamw.h"
#include "parallel/reductions.h"

namespace cann::parallel {

class SparseMomentum;

class OneBitAdam {
 public:
  // topk (not owned): the compressed stage's reduction for top-k, sent `topk_ratio` of each
  // bucket once its density warmup is over; null: 1-bit momenta.
  OneBitAdam(const model::ParamTable& table, optim::AdamWConfig config, comm::Group& group,
             const std::vector<plan::Bucket>& buckets, int warmup_steps, bool warmup_bf16,
             TopKReduction* topk = nullptr, double topk_ratio = 0.0);
  ~OneBitAdam();

  // Whether the next step() runs in the compression stage.
  bool compressing() const { return adam_.step_count() >= warmup_steps_; }
  // The bucket reduction for the coming step: full gradients in warmup, momenta after.
  BucketReduction* reduction();
  // Top-k's share of each bucket sent at compressed step j (0 at the switch).
  double topk_density(int j) const;
  // One update. Returns the gradient norm (warmup: of the averaged gradient; compression: the
  // root mean square over ranks of the local gradients' norms, an all-reduce of one number).
  StatusOr<double> step(float* params, const float* grads, float lr);

  optim::AdamW& adam() { return adam_; }
  OneBitMomentum& momentum() { return *momentum_; }  // 1-bit only
  bool one_bit() const { return momentum_ != nullptr; }
  // Top-k only: this rank's momentum (flat layout). Each rank's differs from the others'.
  std::vector<float>& local_momentum();
  int warmup_steps() const { return warmup_steps_; }
  bool warmup_bf16() const { return full_->bf16(); }

 private:
  const model::ParamTable& table_;
  comm::Group& group_;
  optim::AdamW adam_;
  const int warmup_steps_;
  std::unique_ptr<FullReduction> full_;
  std::unique_ptr<OneBitMomentum> momentum_;
  TopKReduction* topk_ = nullptr;
  double topk_ratio_ = 0.0;
  std::unique_ptr<SparseMomentum> sparse_momentum_;  // top-k
  BucketReduction* compressed_ = nullptr;
};

}  // namespace cann::parallel
