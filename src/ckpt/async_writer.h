// AsyncCheckpointWriter: checkpoints written in the background so training does not wait for
// the disk.
//
// submit() copies the sections into memory owned by the writer (the snapshot: after it
// returns, the caller may change its buffers, i.e. run the next step) and hands the write to a
// background thread, which calls write_checkpoint (fsync, checksums, atomic rename, pruning).
// At most one write is in flight: a submit while the previous write still runs waits for it
// first, so memory holds at most one extra copy of the state. The result of every write goes
// to the `on_done` callback, on the writer thread.
//
// Thread safety: submit(), wait() and the destructor are called from one thread (the training
// loop); `mutex_` guards the hand-over to the writer thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpoint.h"
#include "core/status.h"

namespace cann::ckpt {

struct AsyncWriteResult {
  int64_t step = 0;
  Status status;
  std::string path;      // the step directory, when the write succeeded
  uint64_t bytes = 0;    // sum of the section sizes
  double copy_s = 0.0;   // time submit() spent copying the snapshot (what the step paid)
  double write_s = 0.0;  // time the background write took
};

class AsyncCheckpointWriter {
 public:
  using Callback = std::function<void(const AsyncWriteResult&)>;
  AsyncCheckpointWriter(std::string dir, WriteOptions options, Callback on_done);
  // Waits for a write in flight (a checkpoint being written is never abandoned).
  ~AsyncCheckpointWriter();
  AsyncCheckpointWriter(const AsyncCheckpointWriter&) = delete;
  AsyncCheckpointWriter& operator=(const AsyncCheckpointWriter&) = delete;

  // Copies w and queues its write; returns once the copy is taken.
  void submit(const CheckpointWrite& w);
  // Waits until no write is in flight; returns the status of the last write (OK if none).
  Status wait();

 private:
  struct Job {
    int64_t step = 0;
    std::string meta_json;
    std::vector<std::string> names;
    std::vector<std::vector<char>> data;
    double copy_s = 0.0;
  };
  void loop();

  const std::string dir_;
  const WriteOptions options_;
  const Callback on_done_;
  std::mutex mutex_;  // guards pending_, busy_, last_status_, stop_
  std::condition_variable cv_;
  std::optional<Job> pending_;
  bool busy_ = false;
  bool stop_ = false;
  Status last_status_;
  std::thread thread_;
};

}  // namespace cann::ckpt
