// One parameter-server shard's rows: the slice of every embedding table placed on it, their
// optimizer state, and the rules of a synchronous or bounded-staleness step. No sockets here:
// ps_server.h serves this over TCP, and tests drive it directly.
//
// Placement. Row r of a table (already a hash of the id, rec_spec.h's table_row) lives on shard
// r % S at local slot r / S, so a shard's slice is one dense array with no index: 20M rows over 4
// shards are 5M slots each. The arrays are mapped lazily (anonymous memory the kernel backs on
// first write), so a shard's resident memory grows with the rows it has seen, up to its slice.
//
// Admission and eviction (as Monolith, Liu et al. 2022, does for its collisionless tables): a
// row is admitted once pulls have asked for it in admit_after steps (1: on first sight; every
// worker's pull of one step counts once, so admission is the same whatever the split); until then
// it reads as zeros and its gradients are dropped, so ids seen once or twice never take a
// trained row. A row untouched for evict_after steps (0: never) is evicted: the next touch finds
// it absent, and it starts again from its initial value once readmitted.
//
// Steps. Synchronous: a push of step t waits (up to 1.5 timeouts) until all W workers pushed
// step t; the shard then
// sums the gradients in worker order (so the result does not depend on arrival) and applies
// them once, as one process with the global batch would. Bounded staleness s: each push is
// applied on arrival, and a pull of step t waits until every worker has pushed step t - 1 - s,
// so no worker runs more than s steps ahead of the slowest.
//
// Surviving the process (ShardConfig::state_dir, under --elastic). The tables then live in
// files of a memory file system (the agent's snapshot root) mapped shared, so the rows outlive
// a killed shard and its replacement maps them again: nothing is copied on the step's path nor
// on recovery. What makes them consistent: pulls change a row only in ways a repeat of the same
// step repeats exactly (a sighting counts once per step; a row's values are written before the
// metadata that admits it), so a pull cut short needs no undo; an apply first writes the old
// state of every row it will change, with the step counters, to an undo file and marks it
// valid, changes the rows, writes the new counters and clears the mark. A replacement finding
// the mark set puts the old rows back: the tables then stand exactly after the last step
// applied in full, and the workers send again what was not acknowledged (a push of a step
// already applied is acknowledged without being applied twice). The files are allocated in
// full when made, so a full memory file system is an error at the start, never a fault later.
//
// Thread safety: every public method may be called from any thread (one per connection); one
// mutex, shard_mutex_, guards all state.
#pragma once

#include <sys/mman.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/status.h"
#include "recsys/embedding_store.h"
#include "recsys/rec_spec.h"

namespace cann::recsys {

struct ShardConfig {
  int shard = 0, shards = 1, workers = 1;
  int staleness = -1;  // -1: synchronous; s >= 0: bounded staleness s
  int admit_after = 1;
  int evict_after = 0;
  uint64_t seed = 1;
  SparseOptimizerConfig optimizer;
  std::chrono::milliseconds timeout{60000};
  std::string checkpoint_dir;  // where kCheckpoint requests save (ps_server.h)
  // Non-empty: the tables live in files under this directory and survive the process (above).
  std::string state_dir;
};

// `bytes` of the file at `path` mapped shared (LazyArray::map_file).
StatusOr<void*> map_shared_file(const std::string& path, size_t bytes, bool fresh);

// Anonymous memory of n elements of T, zero, backed by the kernel page by page on first write.
template <typename T>
class LazyArray {
 public:
  LazyArray() = default;
  explicit LazyArray(size_t n) : size_(n) {
    if (n == 0) return;
    void* p = mmap(nullptr, n * sizeof(T), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CANN_CHECK(p != MAP_FAILED) << "out of address space mapping " << n * sizeof(T) << " bytes";
    data_ = static_cast<T*>(p);
  }
  ~LazyArray() { release(); }
  LazyArray(LazyArray&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  LazyArray& operator=(LazyArray&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  // n elements of T in the file at `path`, mapped shared: with `fresh`, made anew (zero,
  // allocated in full), else mapped as it stands (it must hold exactly n elements). The
  // mapping is released as an anonymous one is; the file stays.
  static StatusOr<LazyArray> map_file(const std::string& path, size_t n, bool fresh) {
    LazyArray a;
    a.size_ = n;
    if (n == 0) return a;
    CANN_ASSIGN_OR_RETURN(void* p, map_shared_file(path, n * sizeof(T), fresh));
    a.data_ = static_cast<T*>(p);
    return a;
  }
  LazyArray(const LazyArray&) = delete;
  LazyArray& operator=(const LazyArray&) = delete;
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void release() {
    if (data_) munmap(data_, size_ * sizeof(T));
    data_ = nullptr;
  }
  T* data_ = nullptr;
  size_t size_ = 0;
};

// Where shard `shard` of `shards` keeps its checkpoint files under a job's checkpoint directory.
std::string shard_checkpoint_dir(const std::string& dir, int shard, int shards);

class ShardTables {
 public:
  // In anonymous memory (config.state_dir must be empty).
  ShardTables(const RecSpec& spec, const ShardConfig& config);
  // In files under config.state_dir when it is set, restored from them when they exist (a
  // replacement of a lost shard); otherwise as the constructor.
  static StatusOr<std::unique_ptr<ShardTables>> open(const RecSpec& spec,
                                                     const ShardConfig& config);
  ~ShardTables();
  ShardTables(const ShardTables&) = delete;
  ShardTables& operator=(const ShardTables&) = delete;
  // open() found the tables of an earlier process: the step they stand after (else -1), and
  // whether an apply cut short was undone.
  int restored_step() const { return restored_step_; }
  bool undid_apply() const { return undid_apply_; }
  // Workers that finished before this process started (a replacement serves only the others).
  int finished_workers() const;

  // Rows row_ids (each on this shard) of `table` into out (n, C), for `worker` at `step`
  // (1-based). Blocks under bounded staleness as described above.
  Status pull(int worker, int step, int table, const int64_t* row_ids, size_t n, float* out);
  // Rows as they stand, for evaluation: zeros for rows not admitted; counts no sighting.
  Status read(int table, const int64_t* row_ids, size_t n, float* out);
  // One worker's gradients of step `step`: for every table, rows and (n, C) gradients. Returns
  // when they are applied (synchronous: once every worker's are in).
  Status push(int worker, int step, const std::vector<std::vector<int64_t>>& rows,
              const std::vector<std::vector<float>>& grads);
  // The worker is finished: it no longer holds back bounded-staleness pulls.
  Status finish(int worker);

  int tables() const { return spec_.sparse_features; }
  int dim() const { return C_; }
  // Rows of `table` this shard holds (its slice).
  int64_t local_rows(int table) const { return static_cast<int64_t>(meta_[table].size()); }
  int64_t admitted_rows() const;
  int64_t applied_steps() const;
  // A row's values as they stand (zeros when not admitted), for tests.
  std::vector<float> row(int table, int64_t r) const;

  // Checkpoints (ps_checkpoint.cc). save() writes, under dir/ps/shard-K-of-S/, the state after
  // `step`: every row touched since the previous save (a delta), or every row ever seen
  // (`full`, a base); the first call for a step writes, later ones return at once. load()
  // restores the state of a saved step: the newest base at or before it and the deltas after
  // that base, in order; files of later steps (saved but never committed) are ignored.
  Status save(const std::string& dir, int step, bool full);
  Status load(const std::string& dir, int step);

 private:
  struct RowMeta {
    uint32_t last_step = 0;  // the last step that touched it (0: never)
    uint16_t seen = 0;       // steps that pulled it before admission, saturating
    uint8_t admitted = 0;
    uint8_t dirty = 0;  // touched since the last checkpoint
  };
  ShardTables(const RecSpec& spec, const ShardConfig& config, bool anonymous);
  int64_t slot(int64_t r) const { return r / config_.shards; }
  int64_t slice_rows(int table) const;  // rows of `table` placed on this shard
  // Every row is in the table and on this shard.
  Status check_rows(int table, const int64_t* row_ids, size_t n) const;
  // Admission and eviction bookkeeping of one touch; returns whether the row is admitted.
  bool touch(int table, int64_t r, int step, bool count_sighting);
  // One push's gradients (per table: rows and their (n, C) gradients), applied at once.
  void apply_locked(int step, const std::vector<std::vector<int64_t>>& rows,
                    const std::vector<std::vector<float>>& grads);
  Status apply_sum_locked(int step);  // every worker's, summed in worker order
  // Persistence (ps_shard_files.cc; no-ops in anonymous memory). begin_apply_locked writes the
  // undo record of the rows about to change (per table) and marks it valid; persist_locked
  // writes the counters with the mark cleared (after an apply, its commit).
  Status begin_apply_locked(const std::vector<std::vector<int64_t>>& rows);
  Status persist_locked();
  // The counters as the counters and undo files hold them: applied step, saved step, per
  // worker the last step pushed and whether it finished (int32 each).
  std::string counters_record() const;
  // open()'s work: map the files, or restore from them (undoing an apply cut short).
  Status attach_files();

  RecSpec spec_;
  ShardConfig config_;
  int C_ = 0, state_width_ = 0;
  mutable std::mutex shard_mutex_;
  std::condition_variable changed_;
  std::vector<LazyArray<float>> values_, state_;
  std::vector<LazyArray<RowMeta>> meta_;
  // Pending pushes: by step, by worker.
  struct Pending {
    std::vector<std::vector<int64_t>> rows;
    std::vector<std::vector<float>> grads;
  };
  std::map<int, std::map<int, Pending>> pending_;
  std::vector<int> pushed_;  // per worker: the last step pushed (applied)
  std::vector<bool> finished_;
  int applied_step_ = 0;  // synchronous: the last step applied
  int saved_step_ = 0;    // the last step save() wrote
  int64_t admitted_ = 0;
  // Persistence: the counters' file and the undo file (-1: anonymous memory).
  int header_fd_ = -1, undo_fd_ = -1;
  int restored_step_ = -1;
  bool undid_apply_ = false;
  std::vector<char> undo_buffer_;
};

}  // namespace cann::recsys
