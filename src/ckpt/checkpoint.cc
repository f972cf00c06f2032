// Checkpoint writing, retention and listing (the format is described in checkpoint.h; reading
// and verification are in checkpoint_read.cc).
//
// Durability rule: a step directory under its final name is always complete. Everything is
// written into a hidden temporary, fsynced, and only then renamed into place; replacing or
// pruning a step directory first moves it to a hidden name, so a crash at any point leaves
// either a whole checkpoint or a hidden leftover that list_checkpoints never returns.
#include "ckpt/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <utility>

#include "ckpt/format.h"
#include "core/crc32c.h"
#include "core/fs.h"
#include "core/log.h"

namespace cann::ckpt {
namespace internal {

// "step-00000100": eight digits keep `ls` in step order for any realistic run; larger steps
// simply get more digits, and list_checkpoints orders by the parsed number anyway.
std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%08lld", static_cast<long long>(step));
  return buf;
}

int64_t parse_step_name(const std::string& name) {
  constexpr std::string_view kPrefix = "step-";
  if (name.size() <= kPrefix.size() || name.compare(0, kPrefix.size(), kPrefix) != 0) return -1;
  const char* first = name.data() + kPrefix.size();
  const char* last = name.data() + name.size();
  if (!std::all_of(first, last, [](char c) { return c >= '0' && c <= '9'; })) return -1;
  int64_t step = -1;
  auto [end, ec] = std::from_chars(first, last, step);
  if (ec != std::errc() || end != last) return -1;
  return step;
}

}  // namespace internal

namespace {

using internal::align_up;
using internal::FileHandle;
using internal::kAlign;
using internal::kDataName;
using internal::kFormatName;
using internal::kHeaderBytes;
using internal::kManifestName;
using internal::parse_step_name;
using internal::put_u32_le;
using internal::step_name;

// ordered_json keeps the caller's metadata keys in the order they were written.
using Json = nlohmann::ordered_json;

// Paces writes to an average rate: after each chunk, sleeps until the bytes written so far
// would have taken that long at the cap. With a 10 MB/s cap, 30 MB take at least 3 s.
class WritePacer {
 public:
  explicit WritePacer(double bytes_per_second)
      : rate_(bytes_per_second), start_(std::chrono::steady_clock::now()) {}
  bool active() const { return rate_ > 0; }
  void wrote(size_t bytes) {
    if (rate_ <= 0) return;
    written_ += static_cast<double>(bytes);
    const auto due = start_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                  std::chrono::duration<double>(written_ / rate_));
    std::this_thread::sleep_until(due);
  }

 private:
  double rate_;
  double written_ = 0;
  std::chrono::steady_clock::time_point start_;
};

constexpr size_t kPacedChunk = size_t{1} << 20;

// Writes `parts` (each a pointer and a size) into a new file, fsyncs and closes it.
Status write_new_file(const std::string& path,
                      const std::vector<std::pair<const void*, size_t>>& parts,
                      WritePacer* pacer = nullptr) {
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_EXCL;
  FileHandle f(::open(path.c_str(), flags, 0644));
  if (f.fd() < 0) return IoError(path + ": cannot create: " + errno_text());
  for (const auto& [data, size] : parts) {
    if (pacer == nullptr || !pacer->active()) {
      CANN_RETURN_IF_ERROR(write_all(f.fd(), data, size, path));
      continue;
    }
    const char* p = static_cast<const char*>(data);
    for (size_t done = 0; done < size; done += kPacedChunk) {
      const size_t n = std::min(kPacedChunk, size - done);
      CANN_RETURN_IF_ERROR(write_all(f.fd(), p + done, n, path));
      pacer->wrote(n);
    }
  }
  if (::fsync(f.fd()) != 0) {
    if (errno == ENOSPC) return IoError(path + ": disk full while syncing; hint: free space");
    return IoError(path + ": fsync failed: " + errno_text());
  }
  if (f.close() != 0) return IoError(path + ": close failed: " + errno_text());
  return OkStatus();
}

// Removes the temporary directory unless the write reached publication.
class TempDirCleanup {
 public:
  explicit TempDirCleanup(std::string path) : path_(std::move(path)) {}
  ~TempDirCleanup() {
    if (path_.empty()) return;
    Status s = remove_all(path_);
    if (!s.ok()) log_warning("could not remove checkpoint temporary: " + s.message());
  }
  TempDirCleanup(const TempDirCleanup&) = delete;
  TempDirCleanup& operator=(const TempDirCleanup&) = delete;
  void dismiss() { path_.clear(); }

 private:
  std::string path_;
};

// data.bin and manifest.json for `w` inside the (empty) directory `tmp`.
Status write_files(const std::string& tmp, const CheckpointWrite& w, const Json& meta,
                   double bytes_per_second) {
  // Offsets: the header takes [0, 64); section i starts at align_up(end of section i-1).
  // Sections of 100 and 10 bytes land at 64 and 192 (64 + 100 = 164, rounded up to 192), and
  // data_bytes is 202: there is no padding after the last section.
  Json sections = Json::array();
  std::vector<std::pair<const void*, size_t>> parts;
  static const unsigned char kZeros[kAlign] = {};
  unsigned char header[kHeaderBytes] = {};
  std::memcpy(header, kDataMagic, sizeof(kDataMagic));
  put_u32_le(header + 8, kFormatVersion);
  put_u32_le(header + 12, static_cast<uint32_t>(kHeaderBytes));
  parts.emplace_back(header, sizeof(header));
  uint64_t end = kHeaderBytes;
  for (const SectionView& s : w.sections) {
    const uint64_t offset = align_up(end);
    if (offset > end) parts.emplace_back(kZeros, offset - end);
    parts.emplace_back(s.data, s.bytes);
    sections.push_back({{"name", s.name},
                        {"offset", offset},
                        {"bytes", s.bytes},
                        {"crc32c", crc32c(s.data, s.bytes)}});
    end = offset + s.bytes;
  }
  WritePacer pacer(bytes_per_second);
  CANN_RETURN_IF_ERROR(write_new_file(join_path(tmp, kDataName), parts, &pacer));

  Json manifest = {{"format", kFormatName}, {"version", kFormatVersion}, {"step", w.step},
                   {"meta", meta},          {"data_file", kDataName},    {"data_bytes", end},
                   {"sections", sections}};
  const std::string text = manifest.dump(2) + "\n";
  CANN_RETURN_IF_ERROR(
      write_new_file(join_path(tmp, kManifestName), {{text.data(), text.size()}}, nullptr));
  // The directory entries of both files must be durable before the rename publishes them.
  return fsync_dir(tmp);
}

// Moves the complete temporary `tmp` to `final_path` and returns where the checkpoint it
// replaced now lives ("" if there was none), for the caller to remove once the rename is
// durable. An existing checkpoint for the same step is swapped out atomically
// (RENAME_EXCHANGE), so the final name never goes missing; on file systems without the exchange
// it is first moved to `trash`, which leaves a brief window in which the step is absent but
// never one in which a partial checkpoint is visible.
StatusOr<std::string> publish(const std::string& tmp, const std::string& final_path,
                              const std::string& trash) {
  const std::string cannot_rename = final_path + ": cannot rename the new checkpoint into place: ";
  if (!path_exists(final_path)) {
    if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
      return IoError(cannot_rename + errno_text());
    }
    return std::string();
  }
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_path.c_str(), RENAME_EXCHANGE) == 0) {
    return tmp;
  }
  CANN_RETURN_IF_ERROR(remove_all(trash));
  if (::rename(final_path.c_str(), trash.c_str()) != 0) {
    return IoError(final_path + ": cannot move the existing checkpoint aside: " + errno_text());
  }
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    Status err = IoError(cannot_rename + errno_text());
    // Put the old checkpoint back; the caller removes the temporary.
    if (::rename(trash.c_str(), final_path.c_str()) != 0) {
      err = IoError(err.message() + "; the previous checkpoint is left at " + trash);
    }
    return err;
  }
  return trash;
}

// Removes all but the newest `keep_last` checkpoints, never `keep_name`. Each victim is renamed
// to a hidden name first so a crash mid-removal cannot leave a half-deleted step directory.
void prune(const std::string& dir, const std::string& keep_name, int keep_last) {
  if (keep_last <= 0) return;
  StatusOr<std::vector<std::string>> listed = list_checkpoints(dir);
  if (!listed.ok()) {
    log_warning("checkpoint pruning skipped: " + listed.status().message());
    return;
  }
  const std::string keep_path = join_path(dir, keep_name);
  bool removed_any = false;
  for (size_t i = static_cast<size_t>(keep_last); i < listed->size(); ++i) {
    const std::string& victim = (*listed)[i];
    if (victim == keep_path) continue;
    const std::string name = victim.substr(victim.find_last_of('/') + 1);
    const std::string trash = join_path(dir, "." + name + ".trash-" + std::to_string(::getpid()));
    if (::rename(victim.c_str(), trash.c_str()) != 0) {
      log_warning(victim + ": cannot remove old checkpoint: " + errno_text());
      continue;
    }
    removed_any = true;
    Status s = remove_all(trash);
    if (!s.ok()) log_warning("old checkpoint not fully removed: " + s.message());
  }
  if (removed_any) {
    Status s = fsync_dir(dir);
    if (!s.ok()) log_warning("checkpoint pruning: " + s.message());
  }
}

}  // namespace

StatusOr<std::string> write_checkpoint(const std::string& dir, const CheckpointWrite& w,
                                       int keep_last) {
  WriteOptions options;
  options.keep_last = keep_last;
  return write_checkpoint(dir, w, options);
}

StatusOr<std::string> write_checkpoint(const std::string& dir, const CheckpointWrite& w,
                                       const WriteOptions& options) {
  const int keep_last = options.keep_last;
  if (w.step < 0) {
    return InvalidArgument("checkpoint step " + std::to_string(w.step) +
                           " is negative; hint: steps count up from 0");
  }
  Json meta;
  try {
    meta = Json::parse(w.meta_json);
  } catch (const Json::parse_error& e) {
    return InvalidArgument("checkpoint metadata is not valid JSON: " + std::string(e.what()) +
                           "; hint: pass a JSON object, e.g. {}");
  }
  if (!meta.is_object()) {
    return InvalidArgument("checkpoint metadata must be a JSON object, got " +
                           std::string(meta.type_name()) +
                           "; hint: wrap it, e.g. {\"value\": ...}");
  }
  std::set<std::string> names;
  for (const SectionView& s : w.sections) {
    if (s.name.empty() || !names.insert(s.name).second) {
      return InvalidArgument("checkpoint section name \"" + s.name +
                             "\" is empty or repeated; hint: give each section a unique name");
    }
    if (s.data == nullptr && s.bytes > 0) {
      return InvalidArgument("checkpoint section \"" + s.name + "\" has " +
                             std::to_string(s.bytes) + " bytes but no data pointer");
    }
  }

  CANN_RETURN_IF_ERROR(make_dirs(dir));
  const std::string name = step_name(w.step);
  const std::string pid = std::to_string(::getpid());
  const std::string tmp = join_path(dir, "." + name + ".tmp-" + pid);
  const std::string trash = join_path(dir, "." + name + ".old-" + pid);
  const std::string final_path = join_path(dir, name);

  // A temporary of this exact name is a leftover of an earlier failed attempt of this process.
  CANN_RETURN_IF_ERROR(remove_all(tmp));
  if (::mkdir(tmp.c_str(), 0755) != 0) {
    const std::string reason = errno == ENOSPC ? "disk full; hint: free space" : errno_text();
    return IoError(tmp + ": cannot create checkpoint directory: " + reason);
  }
  TempDirCleanup cleanup(tmp);
  const std::string failed = "checkpoint for step " + std::to_string(w.step) +
                             " not written (earlier checkpoints are untouched): ";
  Status s = write_files(tmp, w, meta, options.bytes_per_second);
  if (!s.ok()) return Status(s.code(), failed + s.message());
  StatusOr<std::string> replaced = publish(tmp, final_path, trash);
  if (!replaced.ok()) return Status(replaced.status().code(), failed + replaced.status().message());
  cleanup.dismiss();
  CANN_RETURN_IF_ERROR(fsync_dir(dir));
  // Only now, with the new checkpoint durable under its name, is the replaced one dropped.
  if (!replaced->empty()) {
    Status removed = remove_all(*replaced);
    if (!removed.ok()) log_warning("replaced checkpoint not removed: " + removed.message());
  }

  prune(dir, name, keep_last);
  return final_path;
}

StatusOr<std::vector<std::string>> list_checkpoints(const std::string& dir) {
  CANN_ASSIGN_OR_RETURN(std::vector<std::string> names, list_dir(dir));
  std::vector<std::pair<int64_t, std::string>> found;
  for (const std::string& name : names) {
    const int64_t step = parse_step_name(name);
    if (step < 0) continue;
    std::string path = join_path(dir, name);
    if (is_directory(path)) found.emplace_back(step, std::move(path));
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second > b.second;
  });
  std::vector<std::string> out;
  out.reserve(found.size());
  for (auto& [step, path] : found) out.push_back(std::move(path));
  return out;
}

}  // namespace cann::ckpt
