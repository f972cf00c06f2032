#include "ckpt/snapshot_writer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "ckpt/format.h"
#include "core/fs.h"
#include "core/numbers.h"
#include "core/word_sum.h"

namespace cann::ckpt {
namespace {

using internal::align_up;
using internal::FileHandle;
using internal::kDataName;
using internal::kHeaderBytes;
using internal::kManifestName;

std::string disk_full_or(const std::string& what) {
  return errno == ENOSPC ? "memory file system full; hint: free memory or snapshot less often"
                         : what + ": " + errno_text();
}

}  // namespace

SnapshotWriter::SnapshotWriter(std::string dir, int keep)
    : dir_(std::move(dir)), keep_(std::max(1, keep)) {}

SnapshotWriter::~SnapshotWriter() {
  for (Slot& s : slots_) drop(s);
}

void SnapshotWriter::drop(Slot& s) {
  if (s.map != nullptr) ::munmap(s.map, s.mapped);
  s.map = nullptr;
  s.mapped = 0;
  if (s.manifest_fd >= 0) ::close(s.manifest_fd);
  s.manifest_fd = -1;
  s.manifest_bytes = 0;
}

// Adopts the published step directories (another process's, or this one's before a restore),
// and removes every hidden entry: temporaries and half-written slots of writers that died.
Status SnapshotWriter::scan() {
  for (Slot& s : slots_) drop(s);
  slots_.clear();
  CANN_RETURN_IF_ERROR(make_dirs(dir_));
  CANN_ASSIGN_OR_RETURN(std::vector<std::string> names, list_dir(dir_));
  for (const std::string& name : names) {
    if (!name.empty() && name[0] == '.') CANN_RETURN_IF_ERROR(remove_all(join_path(dir_, name)));
  }
  CANN_ASSIGN_OR_RETURN(std::vector<std::string> published, list_checkpoints(dir_));
  for (std::string& path : published) {
    Slot s;
    s.step = internal::parse_step_name(path.substr(path.find_last_of('/') + 1));
    s.path = std::move(path);
    slots_.push_back(std::move(s));
  }
  scanned_ = true;
  return OkStatus();
}

// Takes a published snapshot out of the listing before its files are written over.
Status SnapshotWriter::hide(Slot& s) {
  if (s.step < 0) return OkStatus();
  const std::string hidden = join_path(dir_, ".slot-" + std::to_string(next_id_++));
  if (::rename(s.path.c_str(), hidden.c_str()) != 0)
    return IoError(s.path + ": cannot retire the snapshot: " + errno_text());
  s.path = hidden;
  s.step = -1;
  return OkStatus();
}

Status SnapshotWriter::map_data(Slot& s, size_t bytes) {
  if (s.map != nullptr && s.mapped == bytes) return OkStatus();
  drop(s);
  const std::string path = join_path(s.path, kDataName);
  FileHandle f(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (f.fd() < 0) return IoError(path + ": cannot open: " + disk_full_or("open failed"));
  if (::ftruncate(f.fd(), static_cast<off_t>(bytes)) != 0)
    return IoError(path + ": " + disk_full_or("cannot size the data file"));
  // Every page is allocated now: a memory file system that is full says so here instead of
  // killing the process with SIGBUS on the first store into the mapping.
  if (const int rc = ::posix_fallocate(f.fd(), 0, static_cast<off_t>(bytes)); rc != 0) {
    errno = rc;
    return IoError(path + ": " + disk_full_or("cannot allocate the data file"));
  }
  // Mapped with its pages in place: the first copy into a fresh 21 MiB file then took 25 ms
  // here instead of 55 (one fault per page otherwise).
  void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, f.fd(), 0);
  if (map == MAP_FAILED) return IoError(path + ": cannot map: " + errno_text());
  // State may live here (lend()): huge pages where the system gives them to shared memory
  // (transparent_hugepage/shmem_enabled "advise"), as the engine's own buffers have them.
  ::madvise(map, bytes, MADV_HUGEPAGE);
  s.map = static_cast<char*>(map);
  s.mapped = bytes;
  return OkStatus();
}

// A hidden slot, else a new one while there are fewer than keep, else the oldest published;
// never `kept`.
StatusOr<SnapshotWriter::Slot*> SnapshotWriter::free_slot(const Slot* kept) {
  Slot* target = nullptr;
  for (Slot& s : slots_)
    if (target == nullptr && &s != kept && s.step < 0) target = &s;
  if (target == nullptr && static_cast<int>(slots_.size()) < keep_) {
    Slot s;
    s.path = join_path(dir_, ".slot-" + std::to_string(next_id_++));
    if (::mkdir(s.path.c_str(), 0755) != 0)
      return IoError(s.path + ": " + disk_full_or("cannot create the snapshot directory"));
    slots_.push_back(std::move(s));
    target = &slots_.back();
  }
  if (target == nullptr)
    for (Slot& s : slots_)
      if (&s != kept && s.step >= 0 && (target == nullptr || s.step < target->step)) target = &s;
  if (target == nullptr) return FailedPrecondition(dir_ + ": no free snapshot slot");
  return target;
}

SnapshotWriter::Slot* SnapshotWriter::slot_holding(const void* p) {
  const char* c = static_cast<const char*>(p);
  if (c == nullptr) return nullptr;
  for (Slot& s : slots_)
    if (s.map != nullptr && c >= s.map && c < s.map + s.mapped) return &s;
  return nullptr;
}

namespace {

// data.bin: the header, then each section at the next 64-byte boundary (checkpoint.h).
// Returns the offsets; *end is the file's length.
std::vector<uint64_t> section_offsets(const std::vector<uint64_t>& bytes, uint64_t* end) {
  std::vector<uint64_t> offsets;
  offsets.reserve(bytes.size());
  uint64_t at = kHeaderBytes;
  for (const uint64_t b : bytes) {
    offsets.push_back(align_up(at));
    at = offsets.back() + b;
  }
  *end = at;
  return offsets;
}

}  // namespace

StatusOr<std::vector<char*>> SnapshotWriter::lend(const std::vector<uint64_t>& section_bytes,
                                                  const void* besides) {
  if (!scanned_) CANN_RETURN_IF_ERROR(scan());
  const Slot* kept = slot_holding(besides);
  CANN_ASSIGN_OR_RETURN(Slot* target, free_slot(kept));
  CANN_RETURN_IF_ERROR(hide(*target));
  uint64_t end = 0;
  const std::vector<uint64_t> offsets = section_offsets(section_bytes, &end);
  CANN_RETURN_IF_ERROR(map_data(*target, end));
  std::vector<char*> out;
  for (const uint64_t at : offsets) out.push_back(target->map + at);
  return out;
}

StatusOr<std::string> SnapshotWriter::write(const CheckpointWrite& w) {
  if (w.step < 0)
    return InvalidArgument("snapshot step " + std::to_string(w.step) + " is negative");
  const size_t meta_end = w.meta_json.find_last_not_of(" \t\r\n");
  if (w.meta_json.empty() || w.meta_json.front() != '{' || meta_end == std::string::npos ||
      w.meta_json[meta_end] != '}')
    return InvalidArgument("snapshot metadata must be a JSON object");
  for (size_t i = 0; i < w.sections.size(); ++i) {
    const SectionView& s = w.sections[i];
    bool repeated = false;
    for (size_t j = 0; j < i; ++j) repeated = repeated || w.sections[j].name == s.name;
    if (s.name.empty() || repeated)
      return InvalidArgument("snapshot section name \"" + s.name + "\" is empty or repeated");
    if (s.data == nullptr && s.bytes > 0)
      return InvalidArgument("snapshot section \"" + s.name + "\" has no data pointer");
  }
  if (!scanned_) CANN_RETURN_IF_ERROR(scan());

  // The slot to write: the lent one the sections lie in, else the one holding this step
  // already, else a hidden one, else a new one while there are fewer than keep, else the
  // oldest.
  Slot* target = nullptr;
  for (const SectionView& s : w.sections)
    if (target == nullptr) target = slot_holding(s.data);
  const bool lent = target != nullptr;
  for (Slot& s : slots_)
    if (target == nullptr && s.step == w.step) target = &s;
  if (target == nullptr) {
    CANN_ASSIGN_OR_RETURN(target, free_slot(nullptr));
  }
  CANN_RETURN_IF_ERROR(hide(*target));

  std::vector<uint64_t> bytes;
  for (const SectionView& s : w.sections) bytes.push_back(s.bytes);
  uint64_t end = 0;
  const std::vector<uint64_t> offsets = section_offsets(bytes, &end);
  const std::string failed = "snapshot of step " + std::to_string(w.step) + " not written: ";
  if (lent && target->mapped != end)
    return InvalidArgument(failed + "its sections do not fit the slot they were lent");
  if (Status st = map_data(*target, end); !st.ok()) return Status(st.code(), failed + st.message());
  char* data = target->map;
  std::memset(data, 0, kHeaderBytes);
  std::memcpy(data, kDataMagic, sizeof(kDataMagic));
  internal::put_u32_le(reinterpret_cast<unsigned char*>(data) + 8, kFormatVersion);
  internal::put_u32_le(reinterpret_cast<unsigned char*>(data) + 12,
                       static_cast<uint32_t>(kHeaderBytes));
  // Each section is copied and checksummed in one pass (core/word_sum.h); one that lies in
  // place already is not copied, and its sum is read only when its writer did not take it.
  nlohmann::json sections = nlohmann::json::array();
  uint64_t at = kHeaderBytes;
  for (size_t i = 0; i < w.sections.size(); ++i) {
    const SectionView& s = w.sections[i];
    std::memset(data + at, 0, offsets[i] - at);
    const bool in_place = s.data == data + offsets[i];
    const uint64_t sum = !in_place        ? copy_word_sum(data + offsets[i], s.data, s.bytes)
                         : s.has_word_sum ? s.word_sum
                                          : word_sum(data + offsets[i], s.bytes);
    sections.push_back({{"name", s.name},
                        {"offset", offsets[i]},
                        {"bytes", s.bytes},
                        {internal::kWordSumKey, hex64(sum)}});
    at = offsets[i] + s.bytes;
  }

  // The manifest, with the caller's metadata as it came (checkpoint.h's fields).
  manifest_.assign("{\"format\":\"");
  manifest_.append(internal::kFormatName).append("\",\"version\":");
  manifest_.append(std::to_string(kFormatVersion)).append(",\"step\":");
  manifest_.append(std::to_string(w.step)).append(",\"");
  manifest_.append(internal::kMemorySnapshotKey).append("\":true,\"meta\":");
  manifest_.append(w.meta_json).append(",\"data_file\":\"");
  manifest_.append(kDataName).append("\",\"data_bytes\":");
  manifest_.append(std::to_string(end)).append(",\"sections\":");
  manifest_.append(sections.dump()).append("}\n");
  // Written over the slot's previous manifest through a descriptor kept open (opening,
  // truncating and closing it each time cost more than the rest of a snapshot written in place).
  const std::string manifest_path = join_path(target->path, kManifestName);
  if (target->manifest_fd < 0) {
    target->manifest_fd =
        ::open(manifest_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    target->manifest_bytes = 0;
    if (target->manifest_fd < 0)
      return IoError(failed + manifest_path + ": " + disk_full_or("cannot create"));
  }
  for (size_t done = 0; done < manifest_.size();) {
    const ssize_t n = ::pwrite(target->manifest_fd, manifest_.data() + done,
                               manifest_.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return IoError(failed + manifest_path + ": " + disk_full_or("write failed"));
    done += static_cast<size_t>(n);
  }
  if (manifest_.size() < target->manifest_bytes &&
      ::ftruncate(target->manifest_fd, static_cast<off_t>(manifest_.size())) != 0)
    return IoError(failed + manifest_path + ": " + disk_full_or("cannot size"));
  target->manifest_bytes = manifest_.size();

  // Published under its name only now, complete.
  const std::string final_path = join_path(dir_, internal::step_name(w.step));
  if (::rename(target->path.c_str(), final_path.c_str()) != 0) {
    if (errno != EEXIST && errno != ENOTEMPTY)
      return IoError(failed + final_path + ": cannot publish: " + errno_text());
    // Someone else's directory of this step (written while this writer was not looking).
    CANN_RETURN_IF_ERROR(remove_all(final_path));
    if (::rename(target->path.c_str(), final_path.c_str()) != 0)
      return IoError(failed + final_path + ": cannot publish: " + errno_text());
  }
  target->path = final_path;
  target->step = w.step;

  // All but the newest `keep` go (there are more only after adopting another writer's
  // directory).
  for (;;) {
    int published = 0;
    Slot* oldest = nullptr;
    for (Slot& s : slots_) {
      if (s.step < 0) continue;
      ++published;
      if (oldest == nullptr || s.step < oldest->step) oldest = &s;
    }
    if (published <= keep_) break;
    drop(*oldest);
    CANN_RETURN_IF_ERROR(hide(*oldest));  // out of the listing before it is taken apart
    CANN_RETURN_IF_ERROR(remove_all(oldest->path));
    slots_.erase(slots_.begin() + (oldest - slots_.data()));
  }
  return final_path;
}

}  // namespace cann::ckpt
