// The shared-memory segment behind an shm group: what lives where in it, and creating, opening
// and unlinking it. Rank 0 creates the segment, every rank maps it, and the name is unlinked as
// soon as all ranks are attached, so the mapping outlives its name and a crash (even SIGKILL)
// leaves nothing behind in /dev/shm.
//
// The segment holds, in order (each region page-aligned):
//   header                  magic, version and the layout parameters, checked by every opener
//   control blocks [P]      one per rank, written only by that rank: pid, state, progress counters
//   collective slots [P][D] per rank, D buffers of slot_bytes (the pipeline depth D)
//   mailbox controls [P][P] head/tail counters of each (src, dst) point-to-point ring
//   mailbox rings [P][P]    mailbox_bytes of ring data each
// Its size depends on the world size and these per-rank constants, never on message sizes:
// large messages stream through the slots and rings in chunks.
//
// The atomics below live in memory shared between processes. They are lock-free (checked at
// compile time), and the segment starts zero-filled (ftruncate), which is their initial state,
// so nothing is constructed in place.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace cann::comm::shm {

inline constexpr size_t kCacheLine = 64;
inline constexpr uint64_t kSegmentMagic = 0x314d48534e4e4143ull;  // "CANNSHM1" little-endian
inline constexpr uint32_t kSegmentVersion = 1;

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// A rank's membership as its peers see it.
enum class RankState : uint32_t {
  kAbsent = 0,   // not attached yet
  kActive = 1,   // attached and healthy
  kAborted = 2,  // an operation failed on this rank; `reason` says why; it will not progress
  kClosed = 3,   // its group object was destroyed
};

// Per-rank control block. Only the owning rank writes it. Each progress counter has a cache line
// of its own, so peers polling one counter are not disturbed by the owner bumping another.
struct alignas(kCacheLine) ControlBlock {
  std::atomic<int32_t> pid;
  std::atomic<uint32_t> state;          // RankState; the release store publishes pid and reason
  std::atomic<uint64_t> pid_namespace;  // pids only compare within one pid namespace
  char reason[3 * kCacheLine - 16];     // why this rank aborted, NUL-terminated
  // Progress of the collective pipeline in global chunk numbers (see shm_pipeline.h): the
  // number of chunks this rank has filled into its slot, reduced its share of, and finished
  // reading from every slot.
  alignas(kCacheLine) std::atomic<uint64_t> filled;
  alignas(kCacheLine) std::atomic<uint64_t> reduced;
  alignas(kCacheLine) std::atomic<uint64_t> released;
};

// One point-to-point ring (src -> dst): byte counters that only grow. The sender owns head (bytes
// written), the receiver owns tail (bytes consumed); head - tail bytes are in flight.
struct alignas(kCacheLine) MailboxControl {
  std::atomic<uint64_t> head;
  alignas(kCacheLine) std::atomic<uint64_t> tail;
};

struct alignas(kCacheLine) SegmentHeader {
  std::atomic<uint64_t> magic;  // stored last by the creator (release)
  uint32_t version;
  uint32_t world;
  uint64_t slot_bytes;
  uint64_t depth;
  uint64_t mailbox_bytes;
  uint64_t total_bytes;
};

// Offsets of every region, computed identically by every rank from the same parameters.
// Worked example, world 2, slot 1 MiB, depth 3, mailbox 256 KiB (page 4 KiB):
//   header at 0 (padded to 4 KiB), control blocks at 4096 (2 x 384 B, padded to 4 KiB), slots
//   at 8192 (2 x 3 x 1 MiB), mailbox controls at 8192 + 6 MiB (4 x 128 B, padded to 4 KiB),
//   rings at 12288 + 6 MiB (4 x 256 KiB): 16 KiB + 7 MiB in all.
struct SegmentLayout {
  int world = 1;
  size_t slot_bytes = 0;     // one pipeline buffer of one rank; a multiple of the cache line
  int depth = 2;             // pipeline buffers per rank
  size_t mailbox_bytes = 0;  // one ring; a power of two
  size_t control_offset = 0;
  size_t slots_offset = 0;
  size_t mailbox_control_offset = 0;
  size_t mailbox_data_offset = 0;
  size_t total_bytes = 0;

  static SegmentLayout make(int world, size_t slot_bytes, int depth, size_t mailbox_bytes);
};

// The segment's name: a hash of the group's store prefix and a random nonce that rank 0 draws
// and publishes, so concurrent groups (and a rebuilt group under a reused prefix) never collide
// and no name is guessable in advance. "/cann-shm-<16 hex digits>".
std::string segment_name(const std::string& prefix, uint64_t nonce);

// A mapped segment. Thread safety: the object is immutable after creation; the memory it maps
// is shared and follows the ownership rules written on each struct above.
class ShmSegment {
 public:
  // Creates the name exclusively (fails with EEXIST rather than reuse a stale segment), sizes
  // and maps it, and writes the header.
  static StatusOr<std::unique_ptr<ShmSegment>> create(const std::string& name,
                                                      const SegmentLayout& layout);
  // Maps an existing segment and checks that its header matches `layout`.
  static StatusOr<std::unique_ptr<ShmSegment>> open(const std::string& name,
                                                    const SegmentLayout& layout);
  // Use create() or open(); the token keeps construction inside them.
  struct Token {};
  ShmSegment(Token, std::string name, SegmentLayout layout, std::byte* base, bool owns_name);
  // Unmaps; the creator also unlinks the name if it has not done so yet.
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Removes the name from /dev/shm; mappings stay valid. Idempotent for the creator.
  Status unlink();

  const std::string& name() const { return name_; }
  const SegmentLayout& layout() const { return layout_; }
  ControlBlock& control(int rank) const;
  std::byte* slot(int rank, int buffer) const;
  MailboxControl& mailbox_control(int src, int dst) const;
  std::byte* mailbox_ring(int src, int dst) const;

 private:
  const std::string name_;
  const SegmentLayout layout_;
  std::byte* const base_;
  bool owns_name_;  // the creator unlinks the name on destruction if still linked
};

}  // namespace cann::comm::shm
