// Checkpoint reading and verification: every field of the manifest is type-checked, every
// offset bounds-checked against the real file size before anything is allocated, and every
// section's CRC-32C recomputed, so a damaged or hostile checkpoint comes back as DataLoss (or
// NotFound) naming the file, never as a crash, a huge allocation or silently wrong weights.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "ckpt/checkpoint.h"
#include "ckpt/format.h"
#include "core/crc32c.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/numbers.h"
#include "core/word_sum.h"

namespace cann::ckpt {
namespace {

using internal::FileHandle;
using internal::get_u32_le;
using internal::kAlign;
using internal::kFormatName;
using internal::kHeaderFields;
using internal::kManifestName;
using internal::kMemorySnapshotKey;
using internal::kWordSumKey;
using Json = nlohmann::ordered_json;

constexpr char kCorruptHint[] = "; hint: the checkpoint is corrupt, delete it or load an older one";
constexpr char kVersionHint[] = "; hint: load it with the cann-train release that wrote it";

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

// Typed access to manifest fields: a missing or mistyped field is DataLoss, never an exception.
StatusOr<uint64_t> get_u64(const Json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_unsigned()) {
    return DataLoss(where + ": field \"" + key + "\" is missing or not a non-negative integer" +
                    kCorruptHint);
  }
  return it->get<uint64_t>();
}

StatusOr<std::string> get_string(const Json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) {
    return DataLoss(where + ": field \"" + key + "\" is missing or not a string" + kCorruptHint);
  }
  return it->get<std::string>();
}

struct ManifestSection {
  std::string name;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint32_t crc = 0;
  bool memory = false;  // a memory snapshot's: checked by its word sum instead
  uint64_t word_sum = 0;
};

struct Manifest {
  uint64_t step = 0;
  std::string meta_json;
  std::string data_file;
  uint64_t data_bytes = 0;
  std::vector<ManifestSection> sections;
};

StatusOr<ManifestSection> parse_section(const Json& entry, uint64_t data_bytes, bool memory,
                                        const std::string& path) {
  if (!entry.is_object()) return DataLoss(path + ": a section is not an object" + kCorruptHint);
  ManifestSection s;
  CANN_ASSIGN_OR_RETURN(s.name, get_string(entry, "name", path));
  CANN_ASSIGN_OR_RETURN(s.offset, get_u64(entry, "offset", path));
  CANN_ASSIGN_OR_RETURN(s.bytes, get_u64(entry, "bytes", path));
  uint64_t crc = 0;
  const std::string where = path + ": section \"" + s.name + "\"";
  s.memory = memory;
  if (memory) {
    CANN_ASSIGN_OR_RETURN(std::string sum, get_string(entry, kWordSumKey, path));
    char* end = nullptr;
    s.word_sum = std::strtoull(sum.c_str(), &end, 16);
    if (sum.size() != 16 || end != sum.c_str() + sum.size())
      return DataLoss(where + ": " + kWordSumKey + " is not 16 hex digits" + kCorruptHint);
  } else {
    CANN_ASSIGN_OR_RETURN(crc, get_u64(entry, "crc32c", path));
  }
  if (crc > UINT32_MAX) return DataLoss(where + ": crc32c does not fit 32 bits" + kCorruptHint);
  s.crc = static_cast<uint32_t>(crc);
  // Written as `offset + bytes > data_bytes` this could overflow on a hostile manifest.
  if (s.offset % kAlign != 0 || s.offset < kHeaderFields || s.offset > data_bytes ||
      s.bytes > data_bytes - s.offset) {
    return DataLoss(where + " at offset " + std::to_string(s.offset) + " (" +
                    std::to_string(s.bytes) + " bytes) does not fit a " +
                    std::to_string(data_bytes) + "-byte data file" + kCorruptHint);
  }
  return s;
}

StatusOr<Manifest> parse_manifest(const std::string& path) {
  StatusOr<std::string> text = read_file(path);
  if (!text.ok()) {
    if (text.status().code() != StatusCode::kNotFound) return text.status();
    return NotFound(path + ": missing, the checkpoint is incomplete; hint: load an older one");
  }
  Json json;
  try {
    json = Json::parse(*text);
  } catch (const Json::parse_error& e) {
    return DataLoss(path + ": malformed JSON: " + e.what() + kCorruptHint);
  }
  if (!json.is_object()) return DataLoss(path + ": not a JSON object" + kCorruptHint);
  CANN_ASSIGN_OR_RETURN(std::string format, get_string(json, "format", path));
  if (format != kFormatName) {
    return DataLoss(path + ": format is \"" + format + "\", expected \"" + kFormatName +
                    "\"; hint: this is not a cann-train checkpoint");
  }
  CANN_ASSIGN_OR_RETURN(uint64_t version, get_u64(json, "version", path));
  if (version != kFormatVersion) {
    return DataLoss(path + ": checkpoint format version " + std::to_string(version) +
                    ", this build reads version " + std::to_string(kFormatVersion) + kVersionHint);
  }
  Manifest m;
  CANN_ASSIGN_OR_RETURN(m.step, get_u64(json, "step", path));
  if (m.step > static_cast<uint64_t>(INT64_MAX)) {
    return DataLoss(path + ": step " + std::to_string(m.step) + " is out of range" + kCorruptHint);
  }
  auto meta = json.find("meta");
  if (meta == json.end() || !meta->is_object()) {
    return DataLoss(path + ": field \"meta\" is missing or not an object" + kCorruptHint);
  }
  m.meta_json = meta->dump();
  CANN_ASSIGN_OR_RETURN(m.data_file, get_string(json, "data_file", path));
  // A manifest must not point outside its own directory.
  if (m.data_file.empty() || m.data_file.find('/') != std::string::npos || m.data_file == "." ||
      m.data_file == "..") {
    return DataLoss(path + ": data_file \"" + m.data_file + "\" is not a file name" + kCorruptHint);
  }
  CANN_ASSIGN_OR_RETURN(m.data_bytes, get_u64(json, "data_bytes", path));
  auto sections = json.find("sections");
  if (sections == json.end() || !sections->is_array()) {
    return DataLoss(path + ": field \"sections\" is missing or not an array" + kCorruptHint);
  }
  // A memory snapshot's sections carry a word sum (snapshot_writer.h), every other one's a
  // CRC-32C.
  const auto mark = json.find(kMemorySnapshotKey);
  const bool memory = mark != json.end() && mark->is_boolean() && mark->get<bool>();
  std::set<std::string> names;
  for (const Json& entry : *sections) {
    CANN_ASSIGN_OR_RETURN(ManifestSection s, parse_section(entry, m.data_bytes, memory, path));
    if (!names.insert(s.name).second) {
      return DataLoss(path + ": section \"" + s.name + "\" appears twice" + kCorruptHint);
    }
    m.sections.push_back(std::move(s));
  }
  return m;
}

// Checks the header of the open data file against this build and the manifest, and returns
// the header size (the lowest offset a section may start at).
StatusOr<uint64_t> check_data_header(int fd, const std::string& path, uint64_t data_bytes) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return IoError(path + ": cannot stat: " + errno_text());
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
  const std::string size_error = path + " is " + std::to_string(file_bytes) +
                                 " bytes, manifest says " + std::to_string(data_bytes) +
                                 " (truncated or overwritten?)" + kCorruptHint;
  if (file_bytes < kHeaderFields) return DataLoss(size_error);
  unsigned char header[kHeaderFields];
  CANN_RETURN_IF_ERROR(read_exact(fd, header, sizeof(header), path));
  if (std::memcmp(header, kDataMagic, sizeof(kDataMagic)) != 0) {
    return DataLoss(path + ": bad magic, not a cann-train checkpoint data file" + kCorruptHint);
  }
  const uint32_t version = get_u32_le(header + 8);
  if (version != kFormatVersion) {
    return DataLoss(path + ": data format version " + std::to_string(version) +
                    ", this build reads version " + std::to_string(kFormatVersion) + kVersionHint);
  }
  if (file_bytes != data_bytes) return DataLoss(size_error);
  const uint32_t header_bytes = get_u32_le(header + 12);
  if (header_bytes < kHeaderFields || header_bytes % kAlign != 0 || header_bytes > file_bytes) {
    return DataLoss(path + ": header size " + std::to_string(header_bytes) +
                    " is not a multiple of 64 between 16 and the file size" + kCorruptHint);
  }
  return header_bytes;
}

}  // namespace

const Section* LoadedCheckpoint::find(const std::string& name) const {
  for (const Section& s : sections) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

StatusOr<LoadedCheckpoint> read_checkpoint(const std::string& step_dir) {
  if (!is_directory(step_dir)) {
    return NotFound(step_dir +
                    ": no such checkpoint directory; hint: list_checkpoints shows the ones that "
                    "exist");
  }
  CANN_ASSIGN_OR_RETURN(Manifest manifest, parse_manifest(join_path(step_dir, kManifestName)));

  const std::string data_path = join_path(step_dir, manifest.data_file);
  FileHandle f(::open(data_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (f.fd() < 0) {
    if (errno != ENOENT) return IoError(data_path + ": cannot open: " + errno_text());
    return NotFound(data_path + ": missing, the checkpoint is incomplete; hint: load an older one");
  }
  // Past this check every section is known to lie inside the real file, so the allocations
  // below are bounded by the file size, whatever the manifest claims.
  CANN_ASSIGN_OR_RETURN(uint64_t header_bytes,
                        check_data_header(f.fd(), data_path, manifest.data_bytes));

  LoadedCheckpoint out;
  out.path = step_dir;
  out.step = static_cast<int64_t>(manifest.step);
  out.meta_json = std::move(manifest.meta_json);
  for (const ManifestSection& s : manifest.sections) {
    const std::string where = "section \"" + s.name + "\" of " + data_path;
    if (s.offset < header_bytes) {
      return DataLoss(where + " starts at " + std::to_string(s.offset) + ", inside the " +
                      std::to_string(header_bytes) + "-byte header" + kCorruptHint);
    }
    Section loaded;
    loaded.name = s.name;
    loaded.data.resize(s.bytes);
    if (::lseek(f.fd(), static_cast<off_t>(s.offset), SEEK_SET) < 0) {
      return IoError(data_path + ": seek failed: " + errno_text());
    }
    CANN_RETURN_IF_ERROR(read_exact(f.fd(), loaded.data.data(), loaded.data.size(), data_path));
    if (s.memory) {
      const uint64_t sum = word_sum(loaded.data.data(), loaded.data.size());
      if (sum != s.word_sum)
        return DataLoss(where + ": checksum mismatch (word sum " + hex64(sum) + ", manifest says " +
                        hex64(s.word_sum) + ")" + kCorruptHint);
      out.sections.push_back(std::move(loaded));
      continue;
    }
    const uint32_t crc = crc32c(loaded.data.data(), loaded.data.size());
    if (crc != s.crc) {
      return DataLoss(where + ": CRC-32C mismatch (computed " + hex32(crc) + ", manifest says " +
                      hex32(s.crc) + ")" + kCorruptHint);
    }
    out.sections.push_back(std::move(loaded));
  }
  return out;
}

StatusOr<std::string> read_checkpoint_meta(const std::string& step_dir) {
  CANN_ASSIGN_OR_RETURN(Manifest manifest, parse_manifest(join_path(step_dir, kManifestName)));
  return std::move(manifest.meta_json);
}

StatusOr<LoadedCheckpoint> read_latest_checkpoint(const std::string& dir) {
  StatusOr<std::vector<std::string>> listed = list_checkpoints(dir);
  if (!listed.ok()) {
    if (listed.status().code() != StatusCode::kNotFound) return listed.status();
    return NotFound("no valid checkpoint in " + dir +
                    ": the directory does not exist; hint: check the checkpoint path, or start "
                    "training from scratch");
  }
  if (listed->empty())
    return NotFound("no valid checkpoint in " + dir +
                    ": it holds no checkpoint; hint: check the checkpoint path, or start "
                    "training from scratch");
  for (size_t i = 0; i < listed->size(); ++i) {
    StatusOr<LoadedCheckpoint> loaded = read_checkpoint((*listed)[i]);
    if (loaded.ok()) return loaded;
    const bool has_older = i + 1 < listed->size();
    log_warning("skipping checkpoint " + (*listed)[i] + ": " + loaded.status().message() +
                (has_older ? "; using the previous checkpoint" : "; no older checkpoint left"));
  }
  return DataLoss("no valid checkpoint in " + dir + " (" + std::to_string(listed->size()) +
                  " found, none verifies); hint: start training from scratch or restore a "
                  "checkpoint from a backup");
}

}  // namespace cann::ckpt
