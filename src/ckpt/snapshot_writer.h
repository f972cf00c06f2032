// A rank's in-memory snapshots at the price of one memory copy.
//
// The snapshots of --elastic are checkpoints (the format of checkpoint.h, read back by
// read_checkpoint) in a memory file system, written every step. write_checkpoint pays there
// for what a disk needs and memory does not: write() through the page cache, a CRC-32C per
// section, fsyncs, a fresh directory, and a JSON round trip of the metadata. This writer keeps
// `keep` step directories whose data files stay mapped and whose manifests stay open: a
// snapshot is a memcpy into the mapping of the oldest, a manifest written by hand over the old
// one, and two renames.
//
//   <dir>/step-00000007/   published (the oldest)
//   <dir>/step-00000008/   published (the newest)
// The next snapshot first renames step-00000007 to a hidden <dir>/.slot-<n>, is written into
// its files, and is renamed to step-00000009: while it is written, keep - 1 snapshots stay
// published. A spare directory beside the kept ones would keep all of them published
// throughout, at the price of one more copy of the state in memory (and, where fresh pages
// are dear, of touching it); a rank's recovery needs only the newest one it finished
// (train/state_keeper.cc), so the writer does without.
//
// What a memory snapshot promises is the death of its process, not of the machine: a step
// directory under its final name is complete (it is renamed there after its files are), so a
// process killed at any point leaves whole snapshots and at most one hidden slot. There is no
// fsync (nothing survives the machine in memory anyway). Damage is still caught: each section
// carries the word sum of core/word_sum.h, computed by the copy itself, in place of the
// CRC-32C a second pass would cost (the manifest says "memory_snapshot": true). The data file
// is allocated before it is mapped (fallocate), so a full memory file system is an error, not
// a SIGBUS.
//
// State that lives in a snapshot (lend()): an optimizer that writes its output straight into
// the mapped data file of a hidden slot, and a write() whose sections already lie there,
// publish them without copying: only the other sections, the header, the manifest and the
// renames are written. The live state then moves between two slots, each step writing its
// output into the one that does not hold the newest published snapshot.
//
// One writer per directory; readers may read published steps while it writes the next one.
// Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "core/status.h"

namespace cann::ckpt {

class SnapshotWriter {
 public:
  // dir is created on the first write; keep >= 1 published snapshots stay after each write
  // (keep - 1 while one is written).
  SnapshotWriter(std::string dir, int keep);
  ~SnapshotWriter();
  SnapshotWriter(const SnapshotWriter&) = delete;
  SnapshotWriter& operator=(const SnapshotWriter&) = delete;

  // Writes w as <dir>/step-<w.step> (replacing a snapshot of the same step) and returns its
  // path; then all but the newest `keep` are retired. w.meta_json is embedded as it is: it
  // must be one JSON object (the caller serialized it; only its braces are checked). A failed
  // write leaves the published snapshots as they were and names the path.
  StatusOr<std::string> write(const CheckpointWrite& w);

  // A hidden slot laid out for sections of these sizes (in this order, as write() lays them
  // out), mapped for state to live in; returns each section's address. The slot whose mapping
  // holds `besides` (an address lent before, or null) is not chosen. Lent addresses stay valid
  // until rescan() or the writer's end; a write() whose sections lie at them publishes that
  // slot in place.
  StatusOr<std::vector<char*>> lend(const std::vector<uint64_t>& section_bytes,
                                    const void* besides);

  // The directory changed under the writer (a snapshot received from a peer, a restore): the
  // next write lists it again and adopts what it finds. Every lent address becomes invalid.
  void rescan() { scanned_ = false; }

 private:
  struct Slot {
    std::string path;     // its current name: a step directory or a hidden .slot-<n>
    int64_t step = -1;    // -1: hidden (being written, or a write failed)
    char* map = nullptr;  // data.bin mapped writable; nullptr until first written
    size_t mapped = 0;
    int manifest_fd = -1;  // manifest.json kept open once written
    size_t manifest_bytes = 0;
  };

  Status scan();
  Slot* slot_holding(const void* p);
  StatusOr<Slot*> free_slot(const Slot* kept);
  Status hide(Slot& s);
  Status map_data(Slot& s, size_t bytes);
  void drop(Slot& s);

  std::string dir_;
  int keep_;
  bool scanned_ = false;
  int next_id_ = 0;
  std::vector<Slot> slots_;
  std::string manifest_;  // reused text buffer
};

}  // namespace cann::ckpt
