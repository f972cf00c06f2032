// A shard's tables in files that outlive its process (ShardConfig::state_dir; ps_shard.h says
// why they stay consistent). Under state_dir:
//   values-T, state-T, meta-T  table T's slice: values (rows x C floats), optimizer state
//                              (rows x W floats), RowMeta per row; mapped shared
//   counters                   int32 magic "CPSC", version, shard, shards, workers, tables, C,
//                              W (the layout, checked on restore), then `applying` (1 while an
//                              apply is under way), then the counters: applied step, saved step,
//                              per worker the last step pushed, per worker finished (0/1)
//   undo                       the counters before the apply under way, uint64 n, then n records
//                              (int32 table, int64 slot, RowMeta, C + W floats): the rows' state
//                              before it
// Every write of the small files is a pwrite: it lands in the page cache whole and in order, so
// a shard killed at any instruction leaves them as its last completed call did.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/fs.h"
#include "recsys/ps_shard.h"

namespace cann::recsys {
namespace {

constexpr int32_t kCountersMagic = 0x43535043;  // "CPSC"
constexpr int32_t kCountersVersion = 1;
constexpr int kLayoutInts = 8;
constexpr off_t kApplyingAt = kLayoutInts * sizeof(int32_t);
constexpr off_t kCountersAt = kApplyingAt + sizeof(int32_t);

Status pwrite_all(int fd, const void* data, size_t size, off_t at, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t w = ::pwrite(fd, p, size, at);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0)
      return IoError(path + ": cannot write the shard's state: " + errno_text() +
                     "; hint: the memory file system holding it is full, free memory or run "
                     "fewer shards per node");
    p += w;
    at += w;
    size -= static_cast<size_t>(w);
  }
  return OkStatus();
}

StatusOr<std::string> pread_file(int fd, const std::string& path) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return IoError(path + ": " + errno_text());
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t r = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return IoError(path + ": cannot read the shard's state: " + errno_text());
    done += static_cast<size_t>(r);
  }
  return out;
}

template <typename T>
void put(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

}  // namespace

StatusOr<void*> map_shared_file(const std::string& path, size_t bytes, bool fresh) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | (fresh ? O_CREAT | O_TRUNC : 0), 0600);
  if (fd < 0) return IoError(path + ": cannot open the shard's table file: " + errno_text());
  struct stat st {};
  Status s;
  if (fresh) {
    // Allocated now, in full: a memory file system that fills up later would fault a write
    // into the mapping (SIGBUS) instead of returning an error.
    if (const int e = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); e != 0)
      s = IoError(path + ": cannot allocate " + std::to_string(bytes >> 20) +
                  " MiB for the shard's table: " + std::strerror(e) +
                  "; hint: the memory file system (/dev/shm) is too small for the tables under "
                  "--elastic, enlarge it or drop --elastic");
  } else if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    s = DataLoss(path + ": the shard's table file holds " + std::to_string(st.st_size) +
                 " bytes, not " + std::to_string(bytes) +
                 "; hint: it was written by another job layout");
  }
  void* p = MAP_FAILED;
  if (s.ok()) {
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) s = IoError(path + ": cannot map the shard's table: " + errno_text());
  }
  ::close(fd);
  if (!s.ok()) return s;
  return p;
}

StatusOr<std::unique_ptr<ShardTables>> ShardTables::open(const RecSpec& spec,
                                                         const ShardConfig& config) {
  if (config.state_dir.empty()) return std::make_unique<ShardTables>(spec, config);
  std::unique_ptr<ShardTables> t(new ShardTables(spec, config, false));
  CANN_RETURN_IF_ERROR(t->attach_files());
  return t;
}

ShardTables::~ShardTables() {
  if (header_fd_ >= 0) ::close(header_fd_);
  if (undo_fd_ >= 0) ::close(undo_fd_);
}

Status ShardTables::attach_files() {
  const std::string& dir = config_.state_dir;
  CANN_RETURN_IF_ERROR(make_dirs(dir));
  const std::string counters = join_path(dir, "counters"), undo = join_path(dir, "undo");
  // The counters file is written last when the files are made: without it they are remade.
  const bool fresh = !path_exists(counters);
  const int F = spec_.sparse_features;
  for (int t = 0; t < F; ++t) {
    const size_t n = static_cast<size_t>(slice_rows(t));
    const std::string tt = std::to_string(t);
    CANN_ASSIGN_OR_RETURN(
        auto v, LazyArray<float>::map_file(join_path(dir, "values-" + tt), n * C_, fresh));
    CANN_ASSIGN_OR_RETURN(auto st, LazyArray<float>::map_file(join_path(dir, "state-" + tt),
                                                              n * state_width_, fresh));
    CANN_ASSIGN_OR_RETURN(auto m,
                          LazyArray<RowMeta>::map_file(join_path(dir, "meta-" + tt), n, fresh));
    values_.push_back(std::move(v));
    state_.push_back(std::move(st));
    meta_.push_back(std::move(m));
  }
  undo_fd_ = ::open(undo.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (undo_fd_ < 0) return IoError(undo + ": cannot open: " + errno_text());
  if (fresh) {
    const std::string temp = counters + ".new";
    header_fd_ = ::open(temp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (header_fd_ < 0) return IoError(temp + ": cannot open: " + errno_text());
    CANN_RETURN_IF_ERROR(persist_locked());
    if (::rename(temp.c_str(), counters.c_str()) != 0)
      return IoError(counters + ": cannot rename into place: " + errno_text());
    return OkStatus();
  }
  header_fd_ = ::open(counters.c_str(), O_RDWR | O_CLOEXEC);
  if (header_fd_ < 0) return IoError(counters + ": cannot open: " + errno_text());
  CANN_ASSIGN_OR_RETURN(const std::string head, pread_file(header_fd_, counters));
  const int W = config_.workers;
  const size_t counters_bytes = (2 + 2 * static_cast<size_t>(W)) * sizeof(int32_t);
  const auto corrupt = [&](const std::string& path, const std::string& what) {
    return DataLoss(path + ": " + what +
                    "; hint: the shard's state is not this job's, start the job again");
  };
  int32_t layout[kLayoutInts] = {}, applying = 0;
  if (head.size() >= sizeof(layout)) std::memcpy(layout, head.data(), sizeof(layout));
  const int32_t want[kLayoutInts] = {
      kCountersMagic, kCountersVersion, config_.shard, config_.shards, W, F, C_, state_width_};
  if (std::memcmp(layout, want, sizeof(want)) != 0)
    return corrupt(counters, "written by another layout");
  if (head.size() != kCountersAt + counters_bytes) return corrupt(counters, "wrong size");
  std::memcpy(&applying, head.data() + kApplyingAt, sizeof(applying));
  // The counters as they stand, or (an apply cut short) as the undo file kept them.
  std::string kept = head.substr(kCountersAt);
  if (applying != 0) {
    CANN_ASSIGN_OR_RETURN(const std::string u, pread_file(undo_fd_, undo));
    const size_t record =
        sizeof(int32_t) + sizeof(int64_t) + sizeof(RowMeta) + sizeof(float) * (C_ + state_width_);
    if (u.size() < counters_bytes + sizeof(uint64_t)) return corrupt(undo, "truncated");
    kept = u.substr(0, counters_bytes);
    uint64_t n = 0;
    std::memcpy(&n, u.data() + counters_bytes, sizeof(n));
    if (u.size() < counters_bytes + sizeof(n) + n * record) return corrupt(undo, "truncated");
    const char* at = u.data() + counters_bytes + sizeof(n);
    for (uint64_t i = 0; i < n; ++i, at += record) {
      int32_t t = 0;
      int64_t s = 0;
      std::memcpy(&t, at, sizeof(t));
      std::memcpy(&s, at + sizeof(t), sizeof(s));
      if (t < 0 || t >= F || s < 0 || s >= local_rows(t)) return corrupt(undo, "bad row");
      const char* body = at + sizeof(t) + sizeof(s);
      std::memcpy(&meta_[t].data()[s], body, sizeof(RowMeta));
      body += sizeof(RowMeta);
      std::memcpy(values_[t].data() + s * C_, body, sizeof(float) * C_);
      std::memcpy(state_[t].data() + s * state_width_, body + sizeof(float) * C_,
                  sizeof(float) * state_width_);
    }
    undid_apply_ = true;
  }
  const char* c = kept.data();
  std::memcpy(&applied_step_, c, sizeof(int32_t));
  std::memcpy(&saved_step_, c + sizeof(int32_t), sizeof(int32_t));
  for (int w = 0; w < W; ++w) {
    int32_t pushed = 0, finished = 0;
    std::memcpy(&pushed, c + (2 + w) * sizeof(int32_t), sizeof(int32_t));
    std::memcpy(&finished, c + (2 + W + w) * sizeof(int32_t), sizeof(int32_t));
    pushed_[w] = pushed;
    finished_[w] = finished != 0;
  }
  // The count of admitted rows is not kept (a pull may be cut between a row and the count):
  // it is counted again.
  admitted_ = 0;
  for (int t = 0; t < F; ++t)
    for (int64_t s = 0; s < local_rows(t); ++s) admitted_ += meta_[t].data()[s].admitted;
  restored_step_ = config_.staleness >= 0 || W == 1
                       ? *std::min_element(pushed_.begin(), pushed_.end())
                       : applied_step_;
  return persist_locked();
}

std::string ShardTables::counters_record() const {
  std::string out;
  put(&out, static_cast<int32_t>(applied_step_));
  put(&out, static_cast<int32_t>(saved_step_));
  for (int p : pushed_) put(&out, static_cast<int32_t>(p));
  for (bool f : finished_) put(&out, static_cast<int32_t>(f ? 1 : 0));
  return out;
}

Status ShardTables::persist_locked() {
  // One write of the counters with the mark cleared: a kill cannot cut it (fewer bytes than a
  // page, copied into the page cache in one call). After an apply (its stores precede this
  // call) it is the commit; a kill before it undoes the apply, which the workers send again.
  if (header_fd_ < 0) return OkStatus();
  std::string out;
  for (int32_t v : {kCountersMagic, kCountersVersion, config_.shard, config_.shards,
                    config_.workers, spec_.sparse_features, C_, state_width_})
    put(&out, v);
  put(&out, int32_t{0});  // the mark
  out += counters_record();
  return pwrite_all(header_fd_, out.data(), out.size(), 0,
                    join_path(config_.state_dir, "counters"));
}

Status ShardTables::begin_apply_locked(const std::vector<std::vector<int64_t>>& rows) {
  if (header_fd_ < 0) return OkStatus();
  std::vector<char>& u = undo_buffer_;
  u.clear();
  auto append = [&u](const void* p, size_t n) {
    const size_t at = u.size();
    u.resize(at + n);
    std::memcpy(u.data() + at, p, n);
  };
  const std::string counters = counters_record();
  append(counters.data(), counters.size());
  uint64_t n = 0;
  for (const auto& r : rows) n += r.size();
  append(&n, sizeof(n));
  for (size_t t = 0; t < rows.size(); ++t)
    for (int64_t r : rows[t]) {
      const int32_t table = static_cast<int32_t>(t);
      const int64_t s = slot(r);
      append(&table, sizeof(table));
      append(&s, sizeof(s));
      append(&meta_[t].data()[s], sizeof(RowMeta));
      append(values_[t].data() + s * C_, sizeof(float) * C_);
      append(state_[t].data() + s * state_width_, sizeof(float) * state_width_);
    }
  // The record says its own length (n): a longer file left by an earlier apply is not cut.
  CANN_RETURN_IF_ERROR(
      pwrite_all(undo_fd_, u.data(), u.size(), 0, join_path(config_.state_dir, "undo")));
  const int32_t one = 1;
  return pwrite_all(header_fd_, &one, sizeof(one), kApplyingAt,
                    join_path(config_.state_dir, "counters"));
}

}  // namespace cann::recsys
