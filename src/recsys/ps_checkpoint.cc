// A shard's checkpoints: ShardTables::save and ::load (ps_shard.h).
//
// Files under dir/ps/shard-K-of-S/: base-NNNNNNNN.bin (every row the shard has seen) and
// delta-NNNNNNNN.bin (the rows touched since the previous file), NNNNNNNN the step. Each file:
//   "CPSK" magic, uint32 version 1, int32 shard, shards, step, tables, width C, state width W,
//   then per table: uint64 n and n records of (int64 row, RowMeta 8 bytes, C floats of values,
//   W floats of optimizer state), then uint32 CRC-32C of everything before.
// A row's record holds its whole state, so applying the files of a chain in step order gives
// the state after the last one. Written atomically (temporary, fsync, rename), so a file is
// complete or absent; one from a step that was never committed is ignored by load().
#include <cstring>
#include <string>

#include "core/crc32c.h"
#include "core/fs.h"
#include "recsys/ps_shard.h"

namespace cann::recsys {
namespace {

constexpr char kMagic[4] = {'C', 'P', 'S', 'K'};
constexpr uint32_t kVersion = 1;

std::string step_name(const char* kind, int step) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%s-%08d.bin", kind, step);
  return buf;
}

// A file's step from its name ("delta-00000120.bin" -> 120), or -1 for another name.
int step_of(const std::string& name, const std::string& kind) {
  if (name.rfind(kind + "-", 0) != 0 || name.size() != kind.size() + 1 + 8 + 4) return -1;
  return std::atoi(name.c_str() + kind.size() + 1);
}

template <typename T>
void put(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

}  // namespace

std::string shard_checkpoint_dir(const std::string& dir, int shard, int shards) {
  return join_path(join_path(dir, "ps"),
                   "shard-" + std::to_string(shard) + "-of-" + std::to_string(shards));
}

Status ShardTables::save(const std::string& dir, int step, bool full) {
  std::lock_guard<std::mutex> lock(shard_mutex_);
  if (step <= saved_step_) return OkStatus();  // another worker's request wrote it
  if (saved_step_ == 0) full = true;           // a chain starts with a base
  const std::string where = shard_checkpoint_dir(dir, config_.shard, config_.shards);
  CANN_RETURN_IF_ERROR(make_dirs(where));
  std::string out(kMagic, 4);
  put(&out, kVersion);
  for (int v : {config_.shard, config_.shards, step, spec_.sparse_features, C_, state_width_})
    put(&out, v);
  std::vector<std::vector<int64_t>> written(spec_.sparse_features);
  for (int t = 0; t < spec_.sparse_features; ++t) {
    const size_t count_at = out.size();
    put(&out, uint64_t{0});
    uint64_t n = 0;
    RowMeta* meta = meta_[t].data();
    for (int64_t s = 0; s < local_rows(t); ++s) {
      RowMeta& m = meta[s];
      if (!(full ? (m.seen > 0 || m.admitted) : m.dirty)) continue;
      written[t].push_back(s);
      const int64_t r = s * config_.shards + config_.shard;
      put(&out, r);
      put(&out, m);
      out.append(reinterpret_cast<const char*>(values_[t].data() + s * C_), sizeof(float) * C_);
      out.append(reinterpret_cast<const char*>(state_[t].data() + s * state_width_),
                 sizeof(float) * state_width_);
      ++n;
    }
    std::memcpy(out.data() + count_at, &n, sizeof(n));
  }
  put(&out, crc32c(out.data(), out.size()));
  CANN_RETURN_IF_ERROR(
      write_file_atomic(join_path(where, step_name(full ? "base" : "delta", step)), out));
  // The marks go once the file is in place and the step is recorded as saved: a failed write (a
  // full disk) leaves them all for the next checkpoint, and a shard lost before it recorded the
  // step (state_dir) leaves them all for its replacement to write the same file again, so no
  // touched row is ever missing from the chain (a shard lost while clearing them only writes
  // some rows twice).
  saved_step_ = step;
  CANN_RETURN_IF_ERROR(persist_locked());
  for (int t = 0; t < spec_.sparse_features; ++t)
    for (int64_t s : written[t]) meta_[t].data()[s].dirty = 0;
  if (!full) return OkStatus();
  // A new base: the previous base's chain stays (this one's step may not be committed yet, and
  // a resume would then start from that chain); everything before the previous base goes. The
  // previous base's own checkpoint was committed before this one started: the synchronous
  // steps keep every worker within a step of the others.
  CANN_ASSIGN_OR_RETURN(std::vector<std::string> names, list_dir(where));
  int previous = -1;
  for (const auto& n : names)
    if (int s = step_of(n, "base"); s >= 0 && s < step) previous = std::max(previous, s);
  for (const auto& n : names)
    if (int s = std::max(step_of(n, "base"), step_of(n, "delta")); s >= 0 && s < previous)
      CANN_RETURN_IF_ERROR(remove_all(join_path(where, n)));
  return OkStatus();
}

Status ShardTables::load(const std::string& dir, int step) {
  std::lock_guard<std::mutex> lock(shard_mutex_);
  const std::string where = shard_checkpoint_dir(dir, config_.shard, config_.shards);
  CANN_ASSIGN_OR_RETURN(std::vector<std::string> names, list_dir(where));
  // The newest base at or before `step`, then the deltas after it up to `step`.
  int base = -1;
  for (const auto& n : names)
    if (int s = step_of(n, "base"); s >= 0 && s <= step) base = std::max(base, s);
  if (base < 0)
    return DataLoss(where + ": no base checkpoint at or before step " + std::to_string(step) +
                    "; hint: the shard's files are missing, restore them or start without "
                    "--resume");
  std::vector<std::string> chain = {step_name("base", base)};
  for (const auto& n : names)  // list_dir sorts: deltas in step order
    if (int s = step_of(n, "delta"); s > base && s <= step) chain.push_back(n);
  for (const std::string& name : chain) {
    const std::string path = join_path(where, name);
    CANN_ASSIGN_OR_RETURN(std::string in, read_file(path));
    size_t at = 0;
    auto take = [&](void* dst, size_t n) {
      if (at + n > in.size()) return false;
      std::memcpy(dst, in.data() + at, n);
      at += n;
      return true;
    };
    const auto corrupt = [&](const std::string& what) {
      return DataLoss(path + ": " + what +
                      "; hint: the checkpoint is damaged, resume from an earlier one");
    };
    uint32_t crc = 0;
    if (in.size() < 4 + 4 + 6 * 4 + 4) return corrupt("truncated");
    std::memcpy(&crc, in.data() + in.size() - 4, 4);
    if (std::memcmp(in.data(), kMagic, 4) != 0) return corrupt("not a shard checkpoint");
    if (crc32c(in.data(), in.size() - 4) != crc) return corrupt("checksum mismatch");
    at = 4;
    uint32_t version = 0;
    int head[6] = {};
    take(&version, 4);
    take(head, sizeof(head));
    if (version != kVersion || head[0] != config_.shard || head[1] != config_.shards ||
        head[3] != spec_.sparse_features || head[4] != C_ || head[5] != state_width_)
      return corrupt("written by another layout (shard " + std::to_string(head[0]) + " of " +
                     std::to_string(head[1]) + ", width " + std::to_string(head[4]) +
                     ") than this job's");
    for (int t = 0; t < spec_.sparse_features; ++t) {
      uint64_t n = 0;
      if (!take(&n, sizeof(n))) return corrupt("truncated");
      for (uint64_t i = 0; i < n; ++i) {
        int64_t r = 0;
        RowMeta m;
        if (!take(&r, sizeof(r)) || !take(&m, sizeof(m))) return corrupt("truncated");
        if (r < 0 || r >= spec_.table_rows[t] || r % config_.shards != config_.shard)
          return corrupt("row " + std::to_string(r) + " of table " + std::to_string(t) +
                         " is not this shard's");
        const int64_t s = slot(r);
        RowMeta& mine = meta_[t].data()[s];
        admitted_ += static_cast<int64_t>(m.admitted) - mine.admitted;
        mine = m;
        mine.dirty = 0;
        if (!take(values_[t].data() + s * C_, sizeof(float) * C_) ||
            !take(state_[t].data() + s * state_width_, sizeof(float) * state_width_))
          return corrupt("truncated");
      }
    }
  }
  // Files of steps after `step` were written by a save that was never committed: drop them,
  // so a later run does not chain them after this one's own.
  for (const auto& n : names)
    if (std::max(step_of(n, "base"), step_of(n, "delta")) > step)
      CANN_RETURN_IF_ERROR(remove_all(join_path(where, n)));
  saved_step_ = step;
  applied_step_ = step;
  for (int& s : pushed_) s = step;
  return persist_locked();
}

}  // namespace cann::recsys
