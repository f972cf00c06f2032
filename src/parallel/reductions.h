// The ways a gradient bucket is reduced over the data-parallel group (each a BucketReduction
// run on the reducer's thread):
//   FullReduction       fp32 all-reduce (average), or bf16 on the wire (--compress bf16):
//                       converted, all-reduced with fp32 accumulation, converted back;
//   TopKReduction       top-k sparsification with error feedback (--compress topk:R);
//   OneBitMomentum      1-bit Adam's compression stage: the bucket's momentum is updated with
//                       the local gradient, then averaged through the 1-bit all-reduce with
//                       error feedback on worker and server side (--compress onebit).
// Error buffers are exported and imported as flat (one value per parameter) arrays so
// checkpoints store them in the ParamTable layout.
#pragma once

#include <memory>
#include <vector>

#include "comm/compressed_allreduce.h"
#include "comm/group.h"
#include "model/param_table.h"
#include "parallel/reducer.h"

namespace cann::parallel {

class FullReduction : public BucketReduction {
 public:
  FullReduction(comm::Group& group, bool bf16) : group_(group), bf16_(bf16) {}
  Status reduce(const plan::Bucket& bucket, size_t index, float* grads) override;
  bool bf16() const { return bf16_; }

 private:
  comm::Group& group_;
  bool bf16_;
  std::vector<uint16_t> wire_;  // bf16 staging, reused
};

// Expert parallelism: a bucket's dense tensors are averaged over the data-parallel group; its
// expert tensors (each rank holds other experts) over the expert-data group, the ranks holding
// the same experts, and then divided by ep: an expert's owner already summed the gradients of
// the ep data ranks of its expert group, so (sum over groups) / (dp/ep) / ep = the mean over
// all dp ranks, what one process accumulating their micro-batches gets.
class ExpertAwareReduction : public BucketReduction {
 public:
  ExpertAwareReduction(const model::ParamTable& table, comm::Group& dp, comm::Group& expert_dp,
                       int ep)
      : table_(table), dp_(dp), expert_dp_(expert_dp), ep_(ep) {}
  Status reduce(const plan::Bucket& bucket, size_t index, float* grads) override;

 private:
  const model::ParamTable& table_;
  comm::Group& dp_;
  comm::Group& expert_dp_;
  int ep_;
};

class TopKReduction : public BucketReduction {
 public:
  TopKReduction(comm::Group& group, const std::vector<plan::Bucket>& buckets, double ratio);
  Status reduce(const plan::Bucket& bucket, size_t index, float* grads) override;
  // The share of each bucket sent from the next reduction on.
  void set_ratio(double ratio);
  // Error-feedback state in the flat layout (total floats of the buffer).
  void export_error(float* flat) const;
  void import_error(const float* flat);
  // Saved by `old_world` ranks (old_world flat copies, rank after rank): their mean.
  void import_error_resharded(const float* all, int old_world);

 private:
  std::vector<plan::Bucket> buckets_;
  std::vector<std::unique_ptr<comm::TopKAllreduce>> per_bucket_;
};

class OneBitMomentum : public BucketReduction {
 public:
  // m is the optimizer's flat momentum buffer; beta1 its decay.
  OneBitMomentum(comm::Group& group, const std::vector<plan::Bucket>& buckets, float* m,
                 float beta1);
  Status reduce(const plan::Bucket& bucket, size_t index, float* grads) override;
  // Worker-side errors in the flat layout; server-side errors concatenated bucket by bucket
  // (server_error_floats() of them).
  void export_errors(float* worker_flat, float* server) const;
  void import_errors(const float* worker_flat, const float* server);
  size_t server_error_floats() const;
  // What `old_world` ranks exported (worker_all: old_world flat copies; server_all: each old
  // rank's server errors, rank after rank), resharded onto this rank (comm::
  // reshard_onebit_errors, bucket by bucket); false when the sizes do not match the buckets.
  bool import_errors_resharded(const float* worker_all, const float* server_all,
                               size_t server_all_floats, int old_world, int world, int rank);

 private:
  std::vector<plan::Bucket> buckets_;
  float* m_;
  float beta1_;
  std::vector<std::unique_ptr<comm::OneBitAllreduce>> per_bucket_;
};

}  // namespace cann::parallel
