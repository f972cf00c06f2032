// Checkpoints on disk: a directory per step holding a JSON manifest and one binary data file.
//
//   <dir>/step-00000100/manifest.json   format name, version, step, the caller's metadata
//                                       (model spec, ParamTable, sampler, RNG, ...), and per
//                                       section its offset, size and CRC-32C
//   <dir>/step-00000100/data.bin        magic "CANNCKPT", u32 version, u32 header size, then the
//                                       sections back to back, each 64-byte aligned
//
// In-memory snapshots (snapshot_writer.h) use the same layout; their manifest says
// "memory_snapshot": true and their sections carry no crc32c, which every other manifest must.
//
// A checkpoint is written into "<dir>/.step-00000100.tmp-<pid>/", both files fsynced, the
// directory renamed to its final name and the parent fsynced: a reader never sees a partial
// checkpoint under a final name. After a successful write, all but the newest `keep_last`
// checkpoints are removed (never the one just written).
//
// Thread safety: functions are independent; concurrent writers to one directory must use
// different steps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace cann::ckpt {

inline constexpr char kDataMagic[8] = {'C', 'A', 'N', 'N', 'C', 'K', 'P', 'T'};
inline constexpr uint32_t kFormatVersion = 1;

struct SectionView {
  std::string name;  // "params", "adam_m", "adam_v", ...
  const void* data = nullptr;
  size_t bytes = 0;
  // The section's word sum (core/word_sum.h), when whoever wrote the data took it on the way:
  // a memory snapshot written in place (ckpt/snapshot_writer.h) does not read it again.
  bool has_word_sum = false;
  uint64_t word_sum = 0;
};

struct CheckpointWrite {
  int64_t step = 0;
  // A JSON object chosen by the caller, embedded in the manifest. It is read back re-serialized:
  // the same keys in the same order, without the caller's whitespace.
  std::string meta_json;
  std::vector<SectionView> sections;
};

struct Section {
  std::string name;
  std::vector<char> data;
};

struct LoadedCheckpoint {
  std::string path;  // the step directory
  int64_t step = 0;
  std::string meta_json;
  std::vector<Section> sections;
  // The section named `name`, or nullptr.
  const Section* find(const std::string& name) const;
};

struct WriteOptions {
  int keep_last = 3;
  // Average write rate cap in bytes per second (0: none). A background writer uses it so the
  // checkpoint does not starve the step's own I/O; sleeping between 1 MiB chunks keeps the
  // average at or under the cap.
  double bytes_per_second = 0.0;
};

// Writes a checkpoint for w.step under dir (created if missing) and prunes old ones.
// Returns the path of the new step directory. meta_json that is not a JSON object, a negative
// step, or empty or repeated section names: InvalidArgument, nothing written. Disk full or any
// I/O error: the temporary is removed, the previous checkpoints are untouched, and the error
// names the path.
StatusOr<std::string> write_checkpoint(const std::string& dir, const CheckpointWrite& w,
                                       int keep_last);
StatusOr<std::string> write_checkpoint(const std::string& dir, const CheckpointWrite& w,
                                       const WriteOptions& options);

// Reads and verifies one step directory (manifest parse, magic, version, sizes, CRC-32C of every
// section). Any mismatch is DataLoss naming the file and what is wrong.
StatusOr<LoadedCheckpoint> read_checkpoint(const std::string& step_dir);

// The caller's metadata of one step directory, from its manifest alone (the data file is neither
// read nor verified): for choosing among copies before loading one.
StatusOr<std::string> read_checkpoint_meta(const std::string& step_dir);

// Step directories under dir, newest (highest step) first. Temporaries are not listed.
StatusOr<std::vector<std::string>> list_checkpoints(const std::string& dir);

// The newest checkpoint under dir that verifies. Each newer one that fails verification is
// named in a warning (log_warning) and skipped. NotFound when dir holds no checkpoint at all;
// DataLoss when it holds some and none verifies (a resume must not silently start over).
StatusOr<LoadedCheckpoint> read_latest_checkpoint(const std::string& dir);

}  // namespace cann::ckpt
