// The reducer's bucket bookkeeping and communication thread.
#include "parallel/reducer.h"

#include <algorithm>

#include "core/timer.h"

namespace cann::parallel {

GradReducer::GradReducer(std::vector<plan::Bucket> buckets, comm::Group& group)
    : buckets_(std::move(buckets)), group_(group) {
  thread_ = std::thread([this] { thread_main(); });
}

GradReducer::~GradReducer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void GradReducer::begin_step(float* grads, BucketReduction* reduction) {
  std::lock_guard<std::mutex> lock(mutex_);
  grads_ = grads;
  reduction_ = reduction;
  pending_layers_.clear();
  for (const plan::Bucket& b : buckets_)
    pending_layers_.push_back(static_cast<int>(b.layers.size()));
  next_launch_ = 0;
  final_from_ = static_cast<size_t>(-1);
  held_s_ = 0.0;
  completed_ = 0;
  busy_s_ = 0.0;
  error_ = OkStatus();
  bytes_before_ = group_.stats().bytes_sent;
}

void GradReducer::layer_done(int layer) {
  for (size_t i = next_launch_; i < buckets_.size(); ++i) {
    const auto& layers = buckets_[i].layers;
    if (std::find(layers.begin(), layers.end(), layer) != layers.end()) --pending_layers_[i];
  }
  launch_ready();
}

void GradReducer::grads_final_from(size_t offset) {
  final_from_ = std::min(final_from_, offset);
  launch_ready();
}

void GradReducer::launch_ready() {
  std::unique_lock<std::mutex> lock(mutex_);
  bool launched = false;
  while (next_launch_ < buckets_.size() && (pending_layers_[next_launch_] <= 0 ||
                                            buckets_[next_launch_].begin >= final_from_)) {
    queue_.push_back(next_launch_++);
    launched = true;
  }
  if (!launched) return;
  cv_.notify_all();
  if (queue_.size() <= max_queued_) return;
  // The communication thread pops a bucket before reducing it and notifies, and on an error it
  // keeps draining the queue, so this wait ends. The wait is exposed communication.
  const double t0 = now_seconds();
  cv_.wait(lock, [&] { return queue_.size() <= max_queued_; });
  held_s_ += now_seconds() - t0;
}

Status GradReducer::finish(StepComm* stats) {
  for (int& p : pending_layers_) p = 0;
  launch_ready();
  const double t0 = now_seconds();
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return completed_ == buckets_.size(); });
  if (stats != nullptr) {
    stats->comm_exposed_s = now_seconds() - t0 + held_s_;
    stats->comm_time_s = busy_s_;
    stats->comm_bytes = group_.stats().bytes_sent - bytes_before_;
  }
  return error_;
}

void GradReducer::thread_main() {
  while (true) {
    size_t index;
    float* grads;
    BucketReduction* reduction;
    bool skip;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      index = queue_.front();
      queue_.pop_front();
      grads = grads_;
      reduction = reduction_;
      skip = !error_.ok();  // after a failure the remaining buckets only count as done
    }
    cv_.notify_all();  // a training thread held back by set_max_queued may go on
    const double t0 = now_seconds();
    Status s = skip ? OkStatus() : reduction->reduce(buckets_[index], index, grads);
    const double dt = now_seconds() - t0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      busy_s_ += dt;
      if (!s.ok() && error_.ok()) error_ = s;
      ++completed_;
    }
    cv_.notify_all();
  }
}

}  // namespace cann::parallel
