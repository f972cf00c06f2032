// AsyncCheckpointWriter: checkpoints written in the background so training does not wait for
// the disk.
//
// submit() copies the sections into memory owned by the writer (the snapshot: after it
// returns, the caller may change its buffers, i.e. run the next step) and hands the write to a
// background thread, which calls write_checkpoint (fsync, checksums, atomic rename, pruning).
// At most one write is in flight: a submit while the previous write still runs waits for it
// first, so memory holds at most one extra copy of the state (kept between writes and reused,
// so a periodic checkpoint's copy does not fault in fresh pages each time). The result of every
// write goes to the `on_done` callback, on the writer thread.
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
#include "core/aligned_buffer.h"
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
  // Has the writer thread allocate and touch buffers for sections of these sizes now, while
  // training runs, so that the first submit() copies into memory already in place instead of
  // paying for fresh pages on the training thread. Optional; ignored once buffers exist.
  void prepare(std::vector<size_t> section_bytes);
  // Waits until no write is in flight; returns the status of the last write (OK if none).
  Status wait();

 private:
  // A section's copy: `bytes` of `storage` (which may be larger: buffers are reused).
  struct Buffer {
    AlignedBuffer<char> storage;
    size_t bytes = 0;
  };
  struct Job {
    int64_t step = 0;
    std::string meta_json;
    std::vector<std::string> names;
    std::vector<Buffer> data;
    double copy_s = 0.0;
  };
  void loop();
  static std::vector<Buffer> touched_buffers(const std::vector<size_t>& sizes);

  const std::string dir_;
  const WriteOptions options_;
  const Callback on_done_;
  std::mutex mutex_;  // guards pending_, spare_, prepare_, busy_, last_status_, stop_
  std::condition_variable cv_;
  std::optional<Job> pending_;
  // The section buffers of the last write, handed back by the writer thread: the next copy
  // lands in memory already mapped. Fresh buffers are AlignedBuffers (2 MiB-aligned, marked
  // for transparent huge pages), so even a first copy faults in a few huge pages instead of
  // thousands of small ones, which cost several times the copy itself where faults are dear
  // (a virtual machine: 106 ms for a 37 MB copy, 12 us a page).
  std::vector<Buffer> spare_;
  std::vector<size_t> prepare_;  // sizes prepare() asked for, until the thread takes them
  bool busy_ = false;
  bool stop_ = false;
  Status last_status_;
  std::thread thread_;
};

}  // namespace cann::ckpt
