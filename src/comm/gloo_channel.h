// GlooChannel: one Gloo context (a full mesh of connections between the ranks of a group) on a
// transport device of its own. A gloo group owns several: one per parallel slice of large
// collectives and one for point-to-point traffic. Each device runs its own event-loop thread,
// which is what receives bytes into user buffers; separate devices are what let slices on
// separate channels progress in parallel instead of queueing behind one thread and one socket.
//
// Everything the group's algorithms send goes through exchange(): post a set of sends and
// receives (one per peer and direction), then wait for all of them. Two implementations:
//   - unbound buffers (TCP): any number of bytes, per-call timeouts, and on a timeout the exact
//     peers still pending are known;
//   - bound buffers (ibverbs, which has no unbound buffers in this Gloo; selectable on TCP for
//     tests): a buffer pair registered per transfer; waits use the channel's timeout, since a
//     bound buffer's deadline is fixed when its connection is made.
//
// Thread safety: exchange() and ring_allreduce() from one thread at a time per channel (the
// slot sequence must advance identically on every rank); send() and recv() may run concurrently
// with each other; broken_peers() and abort() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "comm/store.h"
#include "comm/types.h"
#include "core/status.h"

namespace gloo {
class Context;
namespace transport {
class Buffer;
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace cann::comm {

using Deadline = std::chrono::steady_clock::time_point;

// How to reach the other ranks.
struct TransportConfig {
  std::string transport = "tcp";  // tcp | ibverbs
  std::string hostname;           // tcp: address to bind and advertise (never empty here)
  std::string ib_device;          // ibverbs: device name, empty = the first
  int ib_port = 1;
  int ib_index = 0;
  bool bound_buffers = false;  // forced on for ibverbs
};

// Payload bytes this rank moved; shared by the threads of one sliced call.
struct Traffic {
  std::atomic<uint64_t> sent{0};
  std::atomic<uint64_t> received{0};
};

// Bytes to or from one peer in one exchange.
struct PeerTransfer {
  int peer = 0;
  void* data = nullptr;  // sends only read it
  size_t bytes = 0;
};

class GlooChannel {
 public:
  // Creates a device and connects a full mesh, rendezvousing through `store` (a prefix no other
  // channel uses). A collective over all `size` ranks.
  // small_messages (where small_messages_fit): also register the buffers of exchange_small.
  static StatusOr<std::unique_ptr<GlooChannel>> connect(const TransportConfig& transport,
                                                        std::shared_ptr<Store> store, int rank,
                                                        int size, std::chrono::milliseconds timeout,
                                                        bool small_messages = false);
  ~GlooChannel();

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool unbound() const { return !bound_; }

  // Posts every transfer (zero-byte ones are skipped: both sides know the sizes), then waits for
  // all until `deadline`. At most one send and one receive per peer. On failure the message
  // names the peers whose transfers did not complete.
  Status exchange(std::span<const PeerTransfer> sends, std::span<const PeerTransfer> recvs,
                  Deadline deadline, Traffic& traffic);

  // Small messages on a channel connected with small_messages: sends `bytes` (1 to
  // small_capacity()) from `in` to every other rank and receives as many from each, in one
  // round over connections set up once (a receive buffer per peer registered at connect), so
  // a message costs its bytes and one wake-up instead of the ready-to-send/ready-to-receive
  // handshake every unbound transfer pays first. On return blocks[j] points at rank j's bytes
  // (blocks[rank()] at `in`), valid until this rank's next exchange_small. Every rank calls it
  // with the same byte count. Waits use the channel's timeout (the one connect() was given).
  //   Why two receive buffers per peer are enough: exchange k uses buffer k % 2, and a peer
  //   sends its exchange k + 2 only after it received this rank's exchange k + 1, which this
  //   rank sends after its caller is done with the blocks of exchange k.
  //   Why a stamp follows the bytes: this Gloo, when a connection closes, flags every buffer
  //   registered on it, and a wait on one rethrows the flag before it looks at whether the data
  //   came, so a peer that got its data and left (the end of a job) would fail this rank's
  //   exchange although its bytes had arrived. The stamp (a function of k, after the bytes on
  //   the same in-order stream) says they did.
  static constexpr int kSmallMaxRanks = 16;
  static constexpr size_t kSmallCapacity = 60 * 1024;  // one buffer: message and stamp
  static constexpr size_t kSmallStamp = sizeof(uint64_t);
  // Whether a channel over `transport` and `size` ranks can carry them (connect's
  // small_messages): TCP with unbound buffers, 2..kSmallMaxRanks ranks.
  static bool small_messages_fit(const TransportConfig& transport, int size) {
    return transport.transport == "tcp" && !transport.bound_buffers && size >= 2 &&
           size <= kSmallMaxRanks;
  }
  size_t small_capacity() const { return small_recv_.empty() ? 0 : kSmallCapacity - kSmallStamp; }
  Status exchange_small(const void* in, size_t bytes, std::vector<const char*>& blocks,
                        Traffic& traffic);

  // Gloo's own ring allreduce, in place (unbound buffers only). `op` is sum or max.
  // ring: 2(P-1) alpha + 2 (P-1)/P n beta (2(P-1) steps, 2(P-1)/P * n bytes sent per rank).
  Status ring_allreduce(void* data, size_t count, DataType type, ReduceOp op, Deadline deadline,
                        Traffic& traffic);

  // Point to point; a send matches the receive with the same (source, destination, tag), in
  // issue order.
  Status send(const void* data, size_t bytes, int dst, uint32_t tag, Deadline deadline,
              Traffic& traffic);
  Status recv(void* data, size_t bytes, int src, uint32_t tag, Deadline deadline, Traffic& traffic);

  // Scratch memory for the algorithms running on this channel, kept between calls so a
  // training loop does not page-fault a fresh buffer every step; `which` (0 or 1) picks one of
  // two independent areas. Valid until the next call with the same `which`; not zeroed.
  char* scratch(int which, size_t bytes);

  // After a failure: the peers whose connection holds an error of its own (closed, reset,
  // unreachable), with Gloo's message. Errors that this process's own abort or timeout put on
  // healthy connections are left out. TCP only; empty on ibverbs.
  std::map<int, std::string> broken_peers();

  // Fails every pending operation on this channel, here and at every peer (whose connections to
  // this rank close). Idempotent. After it, every call fails.
  void abort();

  // Whether the connection to `peer` holds an error of its own (closed, reset). Probes as
  // broken_peers does, for one peer.
  bool peer_broken(int peer);

  // An unbound transfer waiting for its peer, watched meanwhile: this Gloo wakes a send or a
  // receive whose bytes are on the wire when their connection breaks only at their timeout
  // (it signals the pending ones and the bound buffers, not unbound ones in progress), so a
  // thread of this file probes the peer of a transfer waiting past a fraction of a second and,
  // if its connection broke, ends the wait (waitSend or waitRecv then returns false). Scoped to
  // one wait.
  class WatchedTransfer {
   public:
    WatchedTransfer(GlooChannel* channel, gloo::transport::UnboundBuffer* buffer, int peer,
                    bool receiving);
    ~WatchedTransfer();
    WatchedTransfer(const WatchedTransfer&) = delete;
    WatchedTransfer& operator=(const WatchedTransfer&) = delete;

   private:
    uint64_t id_;
  };

 private:
  GlooChannel(int rank, int size, bool bound);
  Status exchange_unbound(std::span<const PeerTransfer> sends, std::span<const PeerTransfer> recvs,
                          Deadline deadline);
  Status exchange_bound(std::span<const PeerTransfer> sends, std::span<const PeerTransfer> recvs);
  int p2p_bound_slot(uint32_t tag, int peer, bool sending);
  // Registers the small-message buffers (connect(), every rank in the same order). Gloo sets a
  // connection's SO_SNDBUF at its first registered-buffer send, so these connections should
  // carry nothing large.
  void set_up_small();

  const int rank_;
  const int size_;
  const bool bound_;
  std::shared_ptr<gloo::Context> context_;
  // Touched by the one thread running this channel's collective: the slot sequence of
  // exchange() and the scratch areas.
  uint64_t exchange_count_ = 0;
  std::unique_ptr<char[]> scratch_[2];
  size_t scratch_bytes_[2] = {0, 0};
  std::atomic<bool> aborted_{false};
  // Bound point-to-point: matching sends and receives by (peer, tag, n-th message). Guarded by
  // p2p_mutex_, since the send and receive lanes use it concurrently.
  std::mutex p2p_mutex_;
  std::map<std::tuple<int, uint32_t, bool>, uint32_t> p2p_counts_;
  // Small messages (exchange_small): per parity, a staging area the sends read and one
  // receive area per rank; Gloo's buffers over them, [parity][peer] (null at this rank).
  // Declared after context_, so they go before the connections they are registered on.
  std::unique_ptr<char[]> small_memory_;
  char* small_send_[2] = {nullptr, nullptr};
  char* small_recv_area_[2] = {nullptr, nullptr};
  std::vector<std::unique_ptr<gloo::transport::Buffer>> small_recv_, small_send_buffers_;
  uint64_t small_count_ = 0;
};

// The address a TCP device binds when the configuration names none: loopback when every rank
// of the group runs on this machine; otherwise this machine's hostname if it resolves to a
// non-loopback address, else the first non-loopback IPv4 interface address.
StatusOr<std::string> default_tcp_address(bool all_ranks_local);

// "Connection closed by peer [127.0.0.1]:41234" from "[./gloo/.../pair.cc:598] Connection ...".
std::string strip_gloo_location(const std::string& message);

}  // namespace cann::comm
