// A parameter-server shard's rows and step rules; see ps_shard.h.
#include "recsys/ps_shard.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <utility>

#include "core/check.h"

namespace cann::recsys {
namespace {

std::string seconds_text(std::chrono::milliseconds t) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", t.count() / 1000.0);
  return buf;
}

}  // namespace

ShardTables::ShardTables(const RecSpec& spec, const ShardConfig& config)
    : ShardTables(spec, config, true) {
  CANN_CHECK(config.state_dir.empty()) << "ShardTables with a state_dir: use ShardTables::open";
}

ShardTables::ShardTables(const RecSpec& spec, const ShardConfig& config, bool anonymous)
    : spec_(spec),
      config_(config),
      C_(spec.embedding_dim),
      state_width_(sparse_state_width(config.optimizer.kind, spec.embedding_dim)),
      pushed_(config.workers, 0),
      finished_(config.workers, false) {
  if (!anonymous) return;  // open() maps the files
  for (int t = 0; t < spec.sparse_features; ++t) {
    const int64_t mine = slice_rows(t);
    values_.emplace_back(static_cast<size_t>(mine) * C_);
    state_.emplace_back(static_cast<size_t>(mine) * state_width_);
    meta_.emplace_back(static_cast<size_t>(mine));
  }
}

int64_t ShardTables::slice_rows(int table) const {
  // Rows r with r % S == shard: ceil((rows - shard) / S) of them.
  const int64_t rows = spec_.table_rows[table];
  return rows > config_.shard ? (rows - config_.shard + config_.shards - 1) / config_.shards : 0;
}

bool ShardTables::touch(int table, int64_t r, int step, bool count_sighting) {
  RowMeta& m = meta_[table].data()[slot(r)];
  m.dirty = 1;
  // A row counts one sighting per step, however many workers pull it in that step: so its
  // admission does not depend on which worker's pull arrives first, nor on the split.
  const bool new_step = static_cast<int>(m.last_step) != step;
  if (m.admitted && config_.evict_after > 0 &&
      step - static_cast<int>(m.last_step) > config_.evict_after) {
    m.admitted = 0;
    m.seen = 0;
    --admitted_;
  }
  if (!m.admitted) {
    if (!count_sighting) return false;
    if (new_step && m.seen < UINT16_MAX) ++m.seen;
    m.last_step = static_cast<uint32_t>(step);
    if (m.seen < config_.admit_after) return false;
    const int64_t s = slot(r);
    init_row(values_[table].data() + s * C_, C_, spec_.table_rows[table], config_.seed, table, r);
    std::memset(state_[table].data() + s * state_width_, 0, sizeof(float) * state_width_);
    // The row is whole before its metadata says so: a shard killed here leaves it unadmitted,
    // and the repeated pull admits it again, identically.
    std::atomic_signal_fence(std::memory_order_seq_cst);
    m.admitted = 1;
    ++admitted_;
  }
  m.last_step = static_cast<uint32_t>(step);
  return true;
}

Status ShardTables::check_rows(int table, const int64_t* row_ids, size_t n) const {
  if (table < 0 || table >= spec_.sparse_features)
    return InvalidArgument("parameter-server shard: table " + std::to_string(table) +
                           " out of range; hint: workers and shards must run the same spec");
  for (size_t i = 0; i < n; ++i) {
    const int64_t r = row_ids[i];
    if (r < 0 || r >= spec_.table_rows[table] || r % config_.shards != config_.shard)
      return InvalidArgument("parameter-server shard " + std::to_string(config_.shard) + ": row " +
                             std::to_string(r) + " of table " + std::to_string(table) +
                             " is not on this shard; hint: workers and shards must agree on "
                             "the spec and --ps-shards");
  }
  return OkStatus();
}

Status ShardTables::pull(int worker, int step, int table, const int64_t* row_ids, size_t n,
                         float* out) {
  std::unique_lock<std::mutex> lock(shard_mutex_);
  if (config_.staleness >= 0) {
    const int need = step - 1 - config_.staleness;
    auto ready = [&] {
      for (int w = 0; w < config_.workers; ++w)
        if (w != worker && !finished_[w] && pushed_[w] < need) return false;
      return true;
    };
    if (!changed_.wait_for(lock, config_.timeout, ready)) {
      int late = 0;
      while (late < config_.workers && (late == worker || finished_[late] || pushed_[late] >= need))
        ++late;
      return FailedPrecondition(
          "parameter-server shard " + std::to_string(config_.shard) + ": worker " +
          std::to_string(worker) + "'s pull of step " + std::to_string(step) + " waited " +
          seconds_text(config_.timeout) + " s for worker " + std::to_string(late) +
          " to push step " + std::to_string(need) +
          "; hint: that worker is stuck or dead (see its log), or raise --comm-timeout");
    }
  }
  CANN_RETURN_IF_ERROR(check_rows(table, row_ids, n));
  for (size_t i = 0; i < n; ++i) {
    const int64_t r = row_ids[i];
    float* o = out + i * C_;
    if (touch(table, r, step, true))
      std::memcpy(o, values_[table].data() + slot(r) * C_, sizeof(float) * C_);
    else
      std::memset(o, 0, sizeof(float) * C_);
  }
  return OkStatus();
}

Status ShardTables::read(int table, const int64_t* row_ids, size_t n, float* out) {
  std::lock_guard<std::mutex> lock(shard_mutex_);
  CANN_RETURN_IF_ERROR(check_rows(table, row_ids, n));
  for (size_t i = 0; i < n; ++i) {
    const int64_t r = row_ids[i];
    const RowMeta& m = meta_[table].data()[slot(r)];
    float* o = out + i * C_;
    if (m.admitted)
      std::memcpy(o, values_[table].data() + slot(r) * C_, sizeof(float) * C_);
    else
      std::memset(o, 0, sizeof(float) * C_);
  }
  return OkStatus();
}

void ShardTables::apply_locked(int step, const std::vector<std::vector<int64_t>>& pushed_rows,
                               const std::vector<std::vector<float>>& pushed_grads) {
  std::vector<char> live;
  for (size_t t = 0; t < pushed_rows.size(); ++t) {
    const std::vector<int64_t>& rows = pushed_rows[t];
    const int64_t n = static_cast<int64_t>(rows.size());
    // The bookkeeping on one thread (it counts admitted rows), the updates on all: the rows of
    // one push are distinct, so no two threads write one row.
    live.resize(n);
    for (int64_t i = 0; i < n; ++i) live[i] = touch(static_cast<int>(t), rows[i], step, false);
    float* values = values_[t].data();
    float* state = state_[t].data();
    const float* grads = pushed_grads[t].data();
#pragma omp parallel for schedule(static) if (n > 256)
    for (int64_t i = 0; i < n; ++i) {
      if (!live[i]) continue;
      const int64_t s = slot(rows[i]);
      sparse_update_row(values + s * C_, state + s * state_width_, grads + i * C_, C_,
                        config_.optimizer);
    }
  }
}

Status ShardTables::apply_sum_locked(int step) {
  std::map<int, Pending>& by_worker = pending_[step];
  struct Entry {
    int64_t row;
    int worker;
    size_t index;
  };
  // Every worker's rows of each table, by row and then by worker: each row's gradients are
  // summed in worker order, so the result does not depend on which push came first.
  const int F = spec_.sparse_features;
  std::vector<std::vector<Entry>> entries(F);
  std::vector<std::vector<int64_t>> changing(F);  // each table's distinct rows
  for (int t = 0; t < F; ++t) {
    for (auto& [w, p] : by_worker)
      if (static_cast<size_t>(t) < p.rows.size())
        for (size_t i = 0; i < p.rows[t].size(); ++i) entries[t].push_back({p.rows[t][i], w, i});
    std::sort(entries[t].begin(), entries[t].end(), [](const Entry& a, const Entry& b) {
      return a.row != b.row ? a.row < b.row : a.worker < b.worker;
    });
    for (size_t k = 0; k < entries[t].size(); ++k)
      if (k == 0 || entries[t][k].row != entries[t][k - 1].row)
        changing[t].push_back(entries[t][k].row);
  }
  CANN_RETURN_IF_ERROR(begin_apply_locked(changing));
  std::vector<float> sum(C_);
  for (int t = 0; t < F; ++t) {
    const std::vector<Entry>& e = entries[t];
    for (size_t k = 0; k < e.size();) {
      const int64_t r = e[k].row;
      std::fill(sum.begin(), sum.end(), 0.0f);
      for (; k < e.size() && e[k].row == r; ++k) {
        const float* g = by_worker[e[k].worker].grads[t].data() + e[k].index * C_;
        for (int c = 0; c < C_; ++c) sum[c] += g[c];
      }
      if (!touch(t, r, step, false)) continue;
      const int64_t s = slot(r);
      sparse_update_row(values_[t].data() + s * C_, state_[t].data() + s * state_width_, sum.data(),
                        C_, config_.optimizer);
    }
  }
  pending_.erase(step);
  for (int& s : pushed_) s = step;
  applied_step_ = step;
  return persist_locked();
}

Status ShardTables::push(int worker, int step, const std::vector<std::vector<int64_t>>& rows,
                         const std::vector<std::vector<float>>& grads) {
  std::unique_lock<std::mutex> lock(shard_mutex_);
  if (rows.size() > static_cast<size_t>(spec_.sparse_features) || grads.size() != rows.size())
    return InvalidArgument("parameter-server shard " + std::to_string(config_.shard) +
                           ": a push of step " + std::to_string(step) +
                           " does not match the tables; hint: workers and shards must run the "
                           "same spec");
  for (size_t t = 0; t < rows.size(); ++t) {
    CANN_RETURN_IF_ERROR(check_rows(static_cast<int>(t), rows[t].data(), rows[t].size()));
    if (grads[t].size() != rows[t].size() * C_)
      return InvalidArgument("parameter-server shard " + std::to_string(config_.shard) +
                             ": a push of step " + std::to_string(step) + " carries " +
                             std::to_string(grads[t].size()) + " gradient values for " +
                             std::to_string(rows[t].size()) + " rows of width " +
                             std::to_string(C_) + "; hint: a corrupt request");
  }
  // Bounded staleness applies on arrival; so does a lone worker (its sum is its own push). A
  // push of a step already applied is one sent again to a lost shard's replacement: the first
  // was applied before the loss, only its answer was lost.
  if (config_.staleness >= 0 || config_.workers == 1) {
    if (pushed_[worker] >= step) return OkStatus();
    CANN_RETURN_IF_ERROR(begin_apply_locked(rows));
    apply_locked(step, rows, grads);
    pushed_[worker] = step;
    CANN_RETURN_IF_ERROR(persist_locked());
    changed_.notify_all();
    return OkStatus();
  }
  if (applied_step_ >= step) return OkStatus();
  Pending& p = pending_[step][worker];
  p.rows = rows;
  p.grads = grads;
  if (static_cast<int>(pending_[step].size()) == config_.workers) {
    Status applied = apply_sum_locked(step);
    changed_.notify_all();
    return applied;
  }
  // Half as long again as a worker waits for a pull's answer: when a shard stops, the workers
  // waiting on it fail first and name it, before the other shards blame those workers.
  const auto wait = config_.timeout * 3 / 2;
  if (!changed_.wait_for(lock, wait, [&] { return applied_step_ >= step; })) {
    std::string missing;
    for (int w = 0; w < config_.workers; ++w)
      if (!pending_[step].count(w)) missing += (missing.empty() ? "" : ", ") + std::to_string(w);
    return FailedPrecondition("parameter-server shard " + std::to_string(config_.shard) +
                              ": step " + std::to_string(step) + " waited " + seconds_text(wait) +
                              " s for the gradients of worker(s) " + missing +
                              "; hint: those workers are stuck or dead (see their log), or raise "
                              "--comm-timeout");
  }
  return OkStatus();
}

Status ShardTables::finish(int worker) {
  std::lock_guard<std::mutex> lock(shard_mutex_);
  finished_[worker] = true;
  changed_.notify_all();
  return persist_locked();
}

int ShardTables::finished_workers() const {
  std::lock_guard<std::mutex> lock(shard_mutex_);
  return static_cast<int>(std::count(finished_.begin(), finished_.end(), true));
}

int64_t ShardTables::admitted_rows() const {
  std::lock_guard<std::mutex> lock(shard_mutex_);
  return admitted_;
}

int64_t ShardTables::applied_steps() const {
  std::lock_guard<std::mutex> lock(shard_mutex_);
  int lo = INT32_MAX;
  for (int s : pushed_) lo = std::min(lo, s);
  return lo;
}

std::vector<float> ShardTables::row(int table, int64_t r) const {
  std::lock_guard<std::mutex> lock(shard_mutex_);
  std::vector<float> out(C_, 0.0f);
  const RowMeta& m = meta_[table].data()[slot(r)];
  if (m.admitted) std::memcpy(out.data(), values_[table].data() + slot(r) * C_, sizeof(float) * C_);
  return out;
}

}  // namespace cann::recsys
