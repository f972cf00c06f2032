// Ring-buffer point-to-point messages with tag matching (see shm_mailbox.h).
#include "comm/shm_mailbox.h"

#include <algorithm>
#include <cstring>

namespace cann::comm::shm {

namespace {

constexpr uint16_t kHeaderMagic = 0xC47A;

}  // namespace

Mailboxes::Mailboxes(const ShmSegment& segment, const PeerWatch& peers, int rank)
    : segment_(segment),
      peers_(peers),
      rank_(rank),
      ring_bytes_(segment.layout().mailbox_bytes),
      stash_(static_cast<size_t>(segment.layout().world)) {}

// Counters only grow; a position in the ring is the counter modulo its power-of-two size.
// Worked example, a 256 KiB ring (262144 bytes) with head = 520000 and tail = 500000: 20000
// bytes are in flight, 242144 are free, and the next byte goes to offset 520000 % 262144 =
// 257856. A 100000-byte piece (under half the ring) therefore wraps: 4288 bytes fill [257856,
// 262144) and the other 95712 go to [0, 95712); head becomes 620000.
Status Mailboxes::write(int dst, const std::byte* data, size_t n, const std::string& what,
                        std::chrono::milliseconds timeout) {
  MailboxControl& mc = segment_.mailbox_control(rank_, dst);
  std::byte* ring = segment_.mailbox_ring(rank_, dst);
  uint64_t head = mc.head.load(std::memory_order_relaxed);  // only this lane writes it
  while (n > 0) {
    uint64_t tail = mc.tail.load(std::memory_order_acquire);
    if (head - tail == ring_bytes_) {
      WaitTarget room{&mc.tail, head - ring_bytes_ + 1, dst};
      CANN_RETURN_IF_ERROR(wait_for({&room, 1}, peers_, what, timeout));
      tail = mc.tail.load(std::memory_order_acquire);
    }
    const size_t piece =
        std::min({n, ring_bytes_ - static_cast<size_t>(head - tail), ring_bytes_ / 2});
    const size_t offset = static_cast<size_t>(head & (ring_bytes_ - 1));
    const size_t first = std::min(piece, ring_bytes_ - offset);
    std::memcpy(ring + offset, data, first);
    std::memcpy(ring, data + first, piece - first);
    head += piece;
    data += piece;
    n -= piece;
    mc.head.store(head, std::memory_order_release);
  }
  return OkStatus();
}

Status Mailboxes::read(int src, std::byte* data, size_t n, const std::string& what,
                       std::chrono::milliseconds timeout) {
  MailboxControl& mc = segment_.mailbox_control(src, rank_);
  const std::byte* ring = segment_.mailbox_ring(src, rank_);
  uint64_t tail = mc.tail.load(std::memory_order_relaxed);  // only this lane writes it
  while (n > 0) {
    uint64_t head = mc.head.load(std::memory_order_acquire);
    if (head == tail) {
      WaitTarget data_ready{&mc.head, tail + 1, src};
      CANN_RETURN_IF_ERROR(wait_for({&data_ready, 1}, peers_, what, timeout));
      head = mc.head.load(std::memory_order_acquire);
    }
    // Freeing at most half a ring at a time lets the sender refill it while this side copies.
    const size_t piece = std::min({n, static_cast<size_t>(head - tail), ring_bytes_ / 2});
    const size_t offset = static_cast<size_t>(tail & (ring_bytes_ - 1));
    const size_t first = std::min(piece, ring_bytes_ - offset);
    std::memcpy(data, ring + offset, first);
    std::memcpy(data + first, ring, piece - first);
    tail += piece;
    data += piece;
    n -= piece;
    mc.tail.store(tail, std::memory_order_release);
  }
  return OkStatus();
}

Status Mailboxes::send(const void* data, size_t bytes, DataType type, int dst, uint32_t tag,
                       const std::string& what, std::chrono::milliseconds timeout) {
  const Header h{kHeaderMagic, static_cast<uint16_t>(type), tag, bytes};
  CANN_RETURN_IF_ERROR(
      write(dst, reinterpret_cast<const std::byte*>(&h), sizeof(h), what, timeout));
  return write(dst, static_cast<const std::byte*>(data), bytes, what, timeout);
}

Status Mailboxes::check_match(const Header& h, size_t bytes, DataType type, int src,
                              const std::string& what) {
  if (h.bytes == bytes && h.dtype == static_cast<uint16_t>(type)) return OkStatus();
  return InvalidArgument(
      what + ": rank " + std::to_string(src) + " sent " + std::to_string(h.bytes) + " bytes of " +
      std::string(dtype_name(static_cast<DataType>(h.dtype))) + " with tag " +
      std::to_string(h.tag) + ", this recv expects " + std::to_string(bytes) + " bytes of " +
      std::string(dtype_name(type)) + "; hint: a send and its recv must agree on count and type");
}

Status Mailboxes::recv(void* data, size_t bytes, DataType type, int src, uint32_t tag,
                       const std::string& what, std::chrono::milliseconds timeout) {
  std::deque<Stashed>& early = stash_[static_cast<size_t>(src)];
  for (auto it = early.begin(); it != early.end(); ++it) {
    if (it->tag != tag) continue;
    const Header h{kHeaderMagic, it->dtype, it->tag, it->payload.size()};
    CANN_RETURN_IF_ERROR(check_match(h, bytes, type, src, what));
    if (bytes > 0) std::memcpy(data, it->payload.data(), bytes);
    early.erase(it);
    return OkStatus();
  }
  while (true) {
    Header h{};
    CANN_RETURN_IF_ERROR(read(src, reinterpret_cast<std::byte*>(&h), sizeof(h), what, timeout));
    if (h.magic != kHeaderMagic || h.dtype > static_cast<uint16_t>(DataType::kInt64))
      return DataLoss(what + ": corrupt message header from rank " + std::to_string(src) +
                      "; hint: the shared-memory segment was overwritten; rebuild the group");
    if (h.tag == tag) {
      CANN_RETURN_IF_ERROR(check_match(h, bytes, type, src, what));
      return read(src, static_cast<std::byte*>(data), bytes, what, timeout);
    }
    Stashed s{h.tag, h.dtype, std::vector<std::byte>(h.bytes)};
    CANN_RETURN_IF_ERROR(read(src, s.payload.data(), s.payload.size(), what, timeout));
    early.push_back(std::move(s));
  }
}

}  // namespace cann::comm::shm
