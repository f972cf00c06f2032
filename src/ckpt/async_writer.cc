// The background checkpoint thread: one job at a time, handed over under a mutex.
#include "ckpt/async_writer.h"

#include <chrono>
#include <cstring>
#include <utility>

namespace cann::ckpt {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// Buffers for the first copy, every page written once here so the training thread finds them
// in place.
std::vector<AsyncCheckpointWriter::Buffer> AsyncCheckpointWriter::touched_buffers(
    const std::vector<size_t>& sizes) {
  std::vector<Buffer> made(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    made[i].storage.resize(sizes[i]);
    if (sizes[i] > 0) std::memset(made[i].storage.data(), 0, sizes[i]);
  }
  return made;
}

AsyncCheckpointWriter::AsyncCheckpointWriter(std::string dir, WriteOptions options,
                                             Callback on_done)
    : dir_(std::move(dir)), options_(options), on_done_(std::move(on_done)) {
  thread_ = std::thread([this] { loop(); });
}

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [this] { return !pending_ && !busy_; });
    prepare_.clear();
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void AsyncCheckpointWriter::submit(const CheckpointWrite& w) {
  std::vector<Buffer> spare;
  {
    // One write in flight at most: wait for the previous one before taking another copy.
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [this] { return !pending_ && !busy_; });
    spare.swap(spare_);
  }
  const auto t0 = std::chrono::steady_clock::now();
  Job job;
  job.step = w.step;
  job.meta_json = w.meta_json;
  for (const SectionView& s : w.sections) {
    job.names.push_back(s.name);
    // The smallest spare buffer that holds the section, else a new one.
    auto best = spare.end();
    for (auto it = spare.begin(); it != spare.end(); ++it)
      if (it->storage.size() >= s.bytes &&
          (best == spare.end() || it->storage.size() < best->storage.size()))
        best = it;
    Buffer b;
    if (best != spare.end()) {
      b = std::move(*best);
      spare.erase(best);
    } else {
      b.storage.resize(s.bytes);
    }
    b.bytes = s.bytes;
    if (s.bytes > 0) std::memcpy(b.storage.data(), s.data, s.bytes);
    job.data.push_back(std::move(b));
  }
  job.copy_s = seconds_since(t0);
  {
    std::lock_guard lock(mutex_);
    pending_ = std::move(job);
  }
  cv_.notify_all();
}

void AsyncCheckpointWriter::prepare(std::vector<size_t> section_bytes) {
  {
    std::lock_guard lock(mutex_);
    if (pending_ || busy_ || !spare_.empty() || !prepare_.empty()) return;
    prepare_ = std::move(section_bytes);
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
      cv_.wait(lock, [this] { return stop_ || pending_.has_value() || !prepare_.empty(); });
      if (!pending_ && prepare_.empty()) return;  // stop_ and nothing queued
      if (!pending_) {
        const std::vector<size_t> sizes = std::exchange(prepare_, {});
        busy_ = true;
        lock.unlock();
        std::vector<Buffer> made = touched_buffers(sizes);
        lock.lock();
        spare_ = std::move(made);
        busy_ = false;
        lock.unlock();
        cv_.notify_all();
        continue;
      }
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
      w.sections.push_back({job.names[i], job.data[i].storage.data(), job.data[i].bytes});
      result.bytes += job.data[i].bytes;
    }
    StatusOr<std::string> path = write_checkpoint(dir_, w, options_);
    result.write_s = seconds_since(t0);
    result.status = path.status();
    if (path.ok()) result.path = *path;
    if (on_done_) on_done_(result);
    {
      std::lock_guard lock(mutex_);
      last_status_ = result.status;
      spare_ = std::move(job.data);
      busy_ = false;
    }
    cv_.notify_all();
  }
}

}  // namespace cann::ckpt
