// Point-to-point messages of the shm backend: one bounded byte ring per (src, dst) pair in the
// segment, with its own head/tail counters, so sends and receives never touch the collective
// slots and never need the peer's collective lane. A pair's ring has exactly one writer (src's
// send lane) and one reader (dst's receive lane), so it needs no lock, only acquire/release on
// the two counters.
//
// A message is a 16-byte header (magic, dtype, tag, byte count) followed by the payload, both
// streamed through the ring: a message larger than the ring flows through it in pieces of at
// most half the ring, so the sender copies one half while the receiver drains the other, and a
// send of any size completes once the receiver has taken all but the last ring's worth.
//
// Tags pair a send with its receive. Messages from one sender arrive in send order; a receive
// that finds a message with another tag at the head of the ring moves it into a private stash
// (heap memory of the receiver) and reads on, so receives may be posted in any tag order.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "comm/shm_segment.h"
#include "comm/shm_wait.h"
#include "comm/types.h"

namespace cann::comm::shm {

class Mailboxes {
 public:
  Mailboxes(const ShmSegment& segment, const PeerWatch& peers, int rank);

  // Send lane only: streams the message into the ring to `dst`.
  Status send(const void* data, size_t bytes, DataType type, int dst, uint32_t tag,
              const std::string& what, std::chrono::milliseconds timeout);
  // Receive lane only: the next message from `src` with `tag`, which must have the same type and
  // size (an error names both sides' sizes otherwise).
  Status recv(void* data, size_t bytes, DataType type, int src, uint32_t tag,
              const std::string& what, std::chrono::milliseconds timeout);

 private:
  struct Header {
    uint16_t magic;
    uint16_t dtype;
    uint32_t tag;
    uint64_t bytes;
  };
  static_assert(sizeof(Header) == 16);
  struct Stashed {
    uint32_t tag;
    uint16_t dtype;
    std::vector<std::byte> payload;
  };

  // Ring I/O with flow control; each waits on the peer with `timeout` per wait.
  Status write(int dst, const std::byte* data, size_t n, const std::string& what,
               std::chrono::milliseconds timeout);
  Status read(int src, std::byte* data, size_t n, const std::string& what,
              std::chrono::milliseconds timeout);
  static Status check_match(const Header& h, size_t bytes, DataType type, int src,
                            const std::string& what);

  const ShmSegment& segment_;
  const PeerWatch& peers_;
  const int rank_;
  const size_t ring_bytes_;
  // Messages that arrived ahead of their receive, per source; receive lane only.
  std::vector<std::deque<Stashed>> stash_;
};

}  // namespace cann::comm::shm
