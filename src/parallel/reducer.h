// GradReducer: overlaps the data-parallel gradient reduction with backward.
//
// Backward reports each layer as its gradients become final (Model::backward's layer_done). A
// bucket whose layers are all done is handed, in bucket order (the same on every rank, so the
// collectives match), to the reducer's communication thread, which runs the step's
// BucketReduction on it while the main thread keeps computing the layers below. finish() is
// called before the optimizer: it hands over any bucket not yet started and waits for all.
//
// Per step it measures: comm_time_s, the time the communication thread spent reducing;
// comm_exposed_s, the time finish() waited (communication that did not hide behind backward);
// comm_bytes, payload bytes this rank sent (the group's counters).
//
// Threads: begin_step, layer_done and finish on the training thread; reductions on the
// reducer's own thread. mutex_ guards the queue and the per-step results.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/group.h"
#include "core/status.h"
#include "plan/buckets.h"

namespace cann::parallel {

// One way of reducing a bucket; runs on the reducer's thread, one bucket at a time, in bucket
// order. `grads` is the flat gradient buffer.
class BucketReduction {
 public:
  virtual ~BucketReduction() = default;
  virtual Status reduce(const plan::Bucket& bucket, size_t index, float* grads) = 0;
};

struct StepComm {
  double comm_time_s = 0.0;
  double comm_exposed_s = 0.0;
  uint64_t comm_bytes = 0;
};

class GradReducer {
 public:
  GradReducer(std::vector<plan::Bucket> buckets, comm::Group& group);
  ~GradReducer();

  const std::vector<plan::Bucket>& buckets() const { return buckets_; }

  // Arms the reducer for one backward whose gradients go to `grads`, reduced by `reduction`.
  void begin_step(float* grads, BucketReduction* reduction);
  // Backward finished layer `layer`: launch every bucket that became ready, in order.
  void layer_done(int layer);
  // Backward says every gradient from float `offset` to the end of the buffer is final
  // (Model::set_grad_ready_hook): launch, in order, the buckets that lie wholly above it, even
  // though a layer they share is not finished. Buckets are taken from the end of the buffer,
  // so with a 4 MiB bucket and a 7 MiB block the bucket holding the block's feed-forward half
  // leaves before its attention half is computed.
  void grads_final_from(size_t offset);
  // Launches what is left, waits for every bucket, returns the first error.
  Status finish(StepComm* stats);
  // Back-pressure: layer_done does not return while more than n handed-over buckets wait for
  // the communication thread to start them (default: no limit). ZeRO stage 2 sets 1, which
  // bounds the gradient memory a rank holds to about two buckets when communication is slower
  // than backward.
  void set_max_queued(size_t n) { max_queued_ = n; }

 private:
  void launch_ready();
  void thread_main();

  const std::vector<plan::Bucket> buckets_;
  comm::Group& group_;
  // Training-thread state of the current step.
  std::vector<int> pending_layers_;  // per bucket: layers not yet done
  size_t next_launch_ = 0;
  size_t final_from_ = static_cast<size_t>(-1);  // gradients at and above it are final
  float* grads_ = nullptr;
  BucketReduction* reduction_ = nullptr;
  uint64_t bytes_before_ = 0;
  double held_s_ = 0.0;  // back-pressure waits in layer_done (training thread; under mutex_)

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<size_t> queue_;  // buckets handed over, not yet started
  size_t max_queued_ = static_cast<size_t>(-1);
  size_t completed_ = 0;
  double busy_s_ = 0.0;
  Status error_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace cann::parallel
