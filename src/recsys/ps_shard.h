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
// Thread safety: every public method may be called from any thread (one per connection); one
// mutex, shard_mutex_, guards all state.
#pragma once

#include <sys/mman.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
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
};

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
  ShardTables(const RecSpec& spec, const ShardConfig& config);

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
  void finish(int worker);

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
  int64_t slot(int64_t r) const { return r / config_.shards; }
  // Every row is in the table and on this shard.
  Status check_rows(int table, const int64_t* row_ids, size_t n) const;
  // Admission and eviction bookkeeping of one touch; returns whether the row is admitted.
  bool touch(int table, int64_t r, int step, bool count_sighting);
  // One push's gradients (per table: rows and their (n, C) gradients), applied at once.
  void apply_locked(int step, const std::vector<std::vector<int64_t>>& rows,
                    const std::vector<std::vector<float>>& grads);
  void apply_sum_locked(int step);  // every worker's, summed in worker order

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
};

}  // namespace cann::recsys
