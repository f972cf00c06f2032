// The parameter-server wire: framed messages over TCP between workers and shards.
//
// Every frame is a PsHeader followed by `bytes` of payload. A connection starts with the
// worker's kHello (its worker index; the shard answers kOk with its shard index and count) and
// then carries one request at a time, each answered by kOk or kError (an error's payload is the
// message, which the worker reports as its own):
//   kPull  step s: per table t, uint64 n_t then n_t int64 rows    -> kOk: the rows' floats, table
//                                                                    after table
//   kPush  step s: per table t, uint64 n_t, n_t int64 rows, then  -> kOk once applied
//                  n_t * C float gradients
//   kRead: as kPull, for evaluation (no sighting counted, no wait)  -> kOk: the rows' floats
//   kCheckpoint step s: one byte, 1 for a base        -> kOk once the shard's file is on disk
//   kFinish: the worker is done                                   -> kOk
// A header's magic and version are checked first, so a stray connection fails in one line.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace cann::recsys {

inline constexpr uint32_t kPsMagic = 0x31535043;  // "CPS1"
inline constexpr uint32_t kPsVersion = 1;

enum class PsOp : uint32_t { kHello = 1, kPull, kPush, kFinish, kOk, kError, kRead, kCheckpoint };

struct PsHeader {
  uint32_t magic = kPsMagic;
  uint32_t version = kPsVersion;
  uint32_t op = 0;
  int32_t worker = 0;  // kHello: the worker; kOk to a hello: the shard
  int32_t step = 0;    // kOk to a hello: the shard count
  uint32_t pad = 0;
  uint64_t bytes = 0;
};

// A connected socket, closed with the object.
class PsSocket {
 public:
  PsSocket() = default;
  explicit PsSocket(int fd) : fd_(fd) {}
  ~PsSocket();
  PsSocket(PsSocket&& o) noexcept;
  PsSocket& operator=(PsSocket&& o) noexcept;
  PsSocket(const PsSocket&) = delete;
  PsSocket& operator=(const PsSocket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

// Sends one frame; the payload may be split over parts (header first, then each part).
Status send_frame(int fd, PsOp op, int worker, int step,
                  const std::vector<std::pair<const void*, size_t>>& parts,
                  std::chrono::milliseconds timeout, const std::string& peer);
// Receives one frame. `idle_ok`: wait for its first byte without a limit (a connection between
// requests); the rest must arrive within `timeout`. An orderly close before the first byte is
// FailedPrecondition with "closed" in the message.
Status recv_frame(int fd, PsHeader* header, std::vector<char>* payload,
                  std::chrono::milliseconds timeout, bool idle_ok, const std::string& peer);

// Listens on host (port 0: any free port); returns the socket and the port.
StatusOr<std::pair<PsSocket, int>> listen_on(const std::string& host);
StatusOr<PsSocket> connect_to(const std::string& host, int port, std::chrono::milliseconds timeout);

}  // namespace cann::recsys
