// Creating, opening, checking and unlinking the shm group's segment (POSIX shm_open + mmap).
#include "comm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace cann::comm::shm {

namespace {

constexpr size_t kPage = 4096;

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

std::string errno_text() {
  return std::strerror(errno);
}

// FNV-1a, 64 bit: stable across builds and machines (std::hash is not), which matters because
// every rank derives the name on its own.
uint64_t fnv1a(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace

SegmentLayout SegmentLayout::make(int world, size_t slot_bytes, int depth, size_t mailbox_bytes) {
  CANN_CHECK(world >= 1 && depth >= 2 && slot_bytes % kCacheLine == 0 && slot_bytes > 0);
  CANN_CHECK(mailbox_bytes > 0 && (mailbox_bytes & (mailbox_bytes - 1)) == 0);
  SegmentLayout l;
  l.world = world;
  l.slot_bytes = slot_bytes;
  l.depth = depth;
  l.mailbox_bytes = mailbox_bytes;
  const size_t p = static_cast<size_t>(world);
  l.control_offset = round_up(sizeof(SegmentHeader), kPage);
  l.slots_offset = l.control_offset + round_up(p * sizeof(ControlBlock), kPage);
  l.mailbox_control_offset =
      l.slots_offset + round_up(p * static_cast<size_t>(depth) * slot_bytes, kPage);
  l.mailbox_data_offset =
      l.mailbox_control_offset + round_up(p * p * sizeof(MailboxControl), kPage);
  l.total_bytes = l.mailbox_data_offset + round_up(p * p * mailbox_bytes, kPage);
  return l;
}

std::string segment_name(const std::string& prefix, uint64_t nonce) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx",
                static_cast<unsigned long long>(fnv1a(prefix + '\n' + std::to_string(nonce))));
  return std::string("/cann-shm-") + hex;
}

ShmSegment::ShmSegment(Token, std::string name, SegmentLayout layout, std::byte* base,
                       bool owns_name)
    : name_(std::move(name)), layout_(layout), base_(base), owns_name_(owns_name) {}

ShmSegment::~ShmSegment() {
  if (owns_name_) (void)unlink();
  munmap(base_, layout_.total_bytes);
}

StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::create(const std::string& name,
                                                         const SegmentLayout& layout) {
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0)
    return IoError("shm: cannot create segment " + name + ": " + errno_text() +
                   "; hint: check that /dev/shm is mounted and writable");
  auto fail = [&](const std::string& what) -> Status {
    const std::string why = errno_text();
    close(fd);
    shm_unlink(name.c_str());
    return IoError("shm: " + what + " segment " + name + " (" +
                   std::to_string(layout.total_bytes >> 20) + " MiB): " + why +
                   "; hint: /dev/shm may be too small (df -h /dev/shm)");
  };
  // posix_fallocate reserves the pages now, so a full /dev/shm is an error here rather than a
  // SIGBUS in the middle of a collective (a file system that cannot reserve keeps the sparse
  // file that ftruncate made).
  if (ftruncate(fd, static_cast<off_t>(layout.total_bytes)) != 0) return fail("cannot size");
  const int rc = posix_fallocate(fd, 0, static_cast<off_t>(layout.total_bytes));
  if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL) {
    errno = rc;
    return fail("cannot reserve");
  }
  void* p = mmap(nullptr, layout.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return fail("cannot map");
  close(fd);
  auto* base = static_cast<std::byte*>(p);
  auto* h = reinterpret_cast<SegmentHeader*>(base);
  h->version = kSegmentVersion;
  h->world = static_cast<uint32_t>(layout.world);
  h->slot_bytes = layout.slot_bytes;
  h->depth = static_cast<uint64_t>(layout.depth);
  h->mailbox_bytes = layout.mailbox_bytes;
  h->total_bytes = layout.total_bytes;
  h->magic.store(kSegmentMagic, std::memory_order_release);
  return std::make_unique<ShmSegment>(Token{}, name, layout, base, true);
}

StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::open(const std::string& name,
                                                       const SegmentLayout& layout) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0)
    return IoError("shm: cannot open segment " + name + ": " + errno_text() +
                   "; hint: rank 0 may have failed or given up (it unlinks the name once all "
                   "ranks attach or the rendezvous times out)");
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != layout.total_bytes) {
    close(fd);
    return FailedPrecondition("shm: segment " + name + " has " + std::to_string(st.st_size) +
                              " bytes, this rank expects " + std::to_string(layout.total_bytes) +
                              "; hint: all ranks must run the same build");
  }
  void* p = mmap(nullptr, layout.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const std::string why = errno_text();
  close(fd);
  if (p == MAP_FAILED) return IoError("shm: cannot map segment " + name + ": " + why);
  auto segment =
      std::make_unique<ShmSegment>(Token{}, name, layout, static_cast<std::byte*>(p), false);
  const auto* h = reinterpret_cast<const SegmentHeader*>(p);
  if (h->magic.load(std::memory_order_acquire) != kSegmentMagic || h->version != kSegmentVersion ||
      h->world != static_cast<uint32_t>(layout.world) || h->slot_bytes != layout.slot_bytes ||
      h->depth != static_cast<uint64_t>(layout.depth) || h->mailbox_bytes != layout.mailbox_bytes ||
      h->total_bytes != layout.total_bytes)
    return FailedPrecondition("shm: segment " + name +
                              " was made by a different version or for a different group; "
                              "hint: all ranks must run the same build with the same world size");
  return segment;
}

Status ShmSegment::unlink() {
  if (!owns_name_) return OkStatus();
  owns_name_ = false;
  if (shm_unlink(name_.c_str()) != 0 && errno != ENOENT)
    return IoError("shm: cannot unlink segment " + name_ + ": " + errno_text());
  return OkStatus();
}

ControlBlock& ShmSegment::control(int rank) const {
  return reinterpret_cast<ControlBlock*>(base_ + layout_.control_offset)[rank];
}

std::byte* ShmSegment::slot(int rank, int buffer) const {
  const size_t index =
      static_cast<size_t>(rank) * static_cast<size_t>(layout_.depth) + static_cast<size_t>(buffer);
  return base_ + layout_.slots_offset + index * layout_.slot_bytes;
}

MailboxControl& ShmSegment::mailbox_control(int src, int dst) const {
  const size_t index =
      static_cast<size_t>(src) * static_cast<size_t>(layout_.world) + static_cast<size_t>(dst);
  return reinterpret_cast<MailboxControl*>(base_ + layout_.mailbox_control_offset)[index];
}

std::byte* ShmSegment::mailbox_ring(int src, int dst) const {
  const size_t index =
      static_cast<size_t>(src) * static_cast<size_t>(layout_.world) + static_cast<size_t>(dst);
  return base_ + layout_.mailbox_data_offset + index * layout_.mailbox_bytes;
}

}  // namespace cann::comm::shm
