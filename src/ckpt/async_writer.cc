// The background checkpoint thread: one job at a time, handed over under a mutex.
#include "ckpt/async_writer.h"

#include <chrono>
#include <cstring>

namespace cann::ckpt {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

AsyncCheckpointWriter::AsyncCheckpointWriter(std::string dir, WriteOptions options,
                                             Callback on_done)
    : dir_(std::move(dir)), options_(options), on_done_(std::move(on_done)) {
  thread_ = std::thread([this] { loop(); });
}

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [this] { return !pending_ && !busy_; });
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void AsyncCheckpointWriter::submit(const CheckpointWrite& w) {
  {
    // One write in flight at most: wait for the previous one before taking another copy.
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [this] { return !pending_ && !busy_; });
  }
  const auto t0 = std::chrono::steady_clock::now();
  Job job;
  job.step = w.step;
  job.meta_json = w.meta_json;
  for (const SectionView& s : w.sections) {
    job.names.push_back(s.name);
    const char* p = static_cast<const char*>(s.data);
    job.data.emplace_back(p, p + s.bytes);
  }
  job.copy_s = seconds_since(t0);
  {
    std::lock_guard lock(mutex_);
    pending_ = std::move(job);
  }
  cv_.notify_all();
}

Status AsyncCheckpointWriter::wait() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [this] { return !pending_ && !busy_; });
  return last_status_;
}

void AsyncCheckpointWriter::loop() {
  while (true) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [this] { return stop_ || pending_.has_value(); });
      if (!pending_) return;  // stop_ and nothing queued
      job = std::move(*pending_);
      pending_.reset();
      busy_ = true;
    }
    const auto t0 = std::chrono::steady_clock::now();
    CheckpointWrite w;
    w.step = job.step;
    w.meta_json = job.meta_json;
    AsyncWriteResult result;
    result.step = job.step;
    result.copy_s = job.copy_s;
    for (size_t i = 0; i < job.names.size(); ++i) {
      w.sections.push_back({job.names[i], job.data[i].data(), job.data[i].size()});
      result.bytes += job.data[i].size();
    }
    StatusOr<std::string> path = write_checkpoint(dir_, w, options_);
    result.write_s = seconds_since(t0);
    result.status = path.status();
    if (path.ok()) result.path = *path;
    if (on_done_) on_done_(result);
    {
      std::lock_guard lock(mutex_);
      last_status_ = result.status;
      busy_ = false;
    }
    cv_.notify_all();
  }
}

}  // namespace cann::ckpt
