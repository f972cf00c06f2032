// GlooChannel: devices, connecting the mesh, point to point, and the failure probes. The
// exchange primitive and Gloo's ring allreduce are in gloo_exchange.cc.
#include "comm/gloo_channel.h"

#include <arpa/inet.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/buffer.h>
#include <gloo/transport/ibverbs/device.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "comm/gloo_internal.h"
#include "comm/gloo_store.h"
#include "comm/store_backends.h"

namespace cann::comm {
namespace {

StatusOr<std::shared_ptr<gloo::transport::Device>> make_tcp_device(const std::string& host) {
  gloo::transport::tcp::attr attr;
  attr.hostname = host;
  try {
    return gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    return InvalidArgument("cannot listen for gloo connections on '" + host +
                           "': " + strip_gloo_location(e.what()) +
                           "; hint: the hostname must name an address of this machine");
  }
}

StatusOr<std::shared_ptr<gloo::transport::Device>> make_ibverbs_device(const TransportConfig& t) {
  std::vector<std::string> names;
  try {
    names = gloo::transport::ibverbs::getDeviceNames();
  } catch (const std::exception&) {
    names.clear();  // no usable verbs library: the same answer as no device
  }
  if (names.empty())
    return FailedPrecondition(
        "transport ibverbs: this machine has no RDMA device (ibv_get_device_list found none); "
        "hint: use --transport tcp, or load the RDMA drivers (ibv_devices lists devices)");
  std::string all;
  for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
  const std::string name = t.ib_device.empty() ? names.front() : t.ib_device;
  if (std::find(names.begin(), names.end(), name) == names.end())
    return InvalidArgument("RDMA device '" + name + "' not found; this machine has: " + all);
  gloo::transport::ibverbs::attr attr{name, t.ib_port, t.ib_index};
  try {
    return gloo::transport::ibverbs::CreateDevice(attr);
  } catch (const std::exception& e) {
    return FailedPrecondition("cannot open RDMA device " + name + " port " +
                              std::to_string(t.ib_port) + " gid index " +
                              std::to_string(t.ib_index) + ": " + strip_gloo_location(e.what()) +
                              "; hint: check the port is active (ibv_devinfo)");
  }
}

bool is_loopback(const sockaddr* sa) {
  if (sa->sa_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr) >> 24) == 127;
  if (sa->sa_family == AF_INET6)
    return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr);
  return true;
}

std::string numeric_host(const sockaddr* sa, socklen_t len) {
  char buf[NI_MAXHOST] = {};
  if (getnameinfo(sa, len, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST) != 0) return "";
  return buf;
}

}  // namespace

std::string strip_gloo_location(const std::string& message) {
  // Gloo prefixes "[file:line] "; the location means nothing to a user.
  if (!message.empty() && message.front() == '[') {
    const size_t end = message.find("] ");
    if (end != std::string::npos && message.find(':') < end) return message.substr(end + 2);
  }
  return message;
}

StatusOr<std::string> default_tcp_address(bool all_ranks_local) {
  if (all_ranks_local) return std::string("127.0.0.1");
  // Debian maps the hostname to 127.0.1.1 in /etc/hosts, which other machines cannot reach; so
  // the hostname is used only when it resolves to something else.
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(host, nullptr, &hints, &res) == 0) {
      std::string found;
      for (addrinfo* a = res; a && found.empty(); a = a->ai_next)
        if (!is_loopback(a->ai_addr)) found = numeric_host(a->ai_addr, a->ai_addrlen);
      freeaddrinfo(res);
      if (!found.empty()) return found;
    }
  }
  ifaddrs* ifs = nullptr;
  std::string found;
  if (getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i && found.empty(); i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
      if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
      found = numeric_host(i->ifa_addr, sizeof(sockaddr_in));
    }
    freeifaddrs(ifs);
  }
  if (found.empty())
    return FailedPrecondition(
        "ranks run on several machines but this one has no non-loopback address; hint: set the "
        "communication address explicitly (cann-train run --comm-addr)");
  return found;
}

StatusOr<std::unique_ptr<GlooChannel>> GlooChannel::connect(const TransportConfig& transport,
                                                            std::shared_ptr<Store> store, int rank,
                                                            int size,
                                                            std::chrono::milliseconds timeout,
                                                            bool small_messages) {
  ignore_sigpipe();  // Gloo's writev to a dead peer must fail, not kill this process
  std::shared_ptr<gloo::transport::Device> device;
  bool bound = transport.bound_buffers;
  if (transport.transport == "tcp") {
    CANN_ASSIGN_OR_RETURN(device, make_tcp_device(transport.hostname));
  } else if (transport.transport == "ibverbs") {
    CANN_ASSIGN_OR_RETURN(device, make_ibverbs_device(transport));
    bound = true;  // this Gloo has no unbound buffers on ibverbs
  } else {
    return InvalidArgument("unknown gloo transport '" + transport.transport +
                           "'; hint: use tcp or ibverbs");
  }
  std::unique_ptr<GlooChannel> channel(new GlooChannel(rank, size, bound));
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(timeout);
  try {
    context->connectFullMesh(*make_gloo_store(store, timeout), device);
  } catch (const std::exception& e) {
    return IoError("rank " + std::to_string(rank) + " could not connect to the other " +
                   std::to_string(size - 1) + " ranks: " + strip_gloo_location(e.what()));
  }
  channel->context_ = std::move(context);
  if (small_messages) {
    if (!small_messages_fit(transport, size))
      return Internal("small-message buffers need TCP with unbound buffers and 2 to " +
                      std::to_string(kSmallMaxRanks) + " ranks");
    try {
      channel->set_up_small();
    } catch (const std::exception& e) {
      return IoError("rank " + std::to_string(rank) + " could not register its buffers for " +
                     "small messages: " + strip_gloo_location(e.what()));
    }
  }
  return channel;
}

// Slot of the data rank `from` sends rank `to` in an exchange of parity p: base + 2p, plus 1 for
// data going to a lower rank, so the send and the receive buffer on one connection never share
// a slot (a bound buffer unregisters its slot when destroyed, whichever direction it served).
void GlooChannel::set_up_small() {
  const int base = context_->nextSlot(4);
  auto slot = [&](int parity, int from, int to) { return base + 2 * parity + (from < to ? 0 : 1); };
  const size_t area = static_cast<size_t>(size_) * kSmallCapacity;
  // Not zeroed: pages become resident only where messages land.
  small_memory_ = std::make_unique_for_overwrite<char[]>(2 * (kSmallCapacity + area));
  small_recv_.resize(2 * static_cast<size_t>(size_));
  small_send_buffers_.resize(2 * static_cast<size_t>(size_));
  for (int parity = 0; parity < 2; ++parity) {
    small_send_[parity] = small_memory_.get() + parity * (kSmallCapacity + area);
    small_recv_area_[parity] = small_send_[parity] + kSmallCapacity;
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      auto& pair = context_->getPair(peer);
      const size_t i = static_cast<size_t>(parity * size_ + peer);
      small_recv_[i] =
          pair->createRecvBuffer(slot(parity, peer, rank_),
                                 small_recv_area_[parity] + peer * kSmallCapacity, kSmallCapacity);
      small_send_buffers_[i] =
          pair->createSendBuffer(slot(parity, rank_, peer), small_send_[parity], kSmallCapacity);
    }
  }
  // Gloo sizes a connection's SO_SNDBUF at a registered-buffer send that needs more than the
  // last size it set, and then only grows it. Growing it under a run of messages of rising
  // sizes was measured to stall a 64 KiB exchange for 20 ms; one exchange of the largest size
  // at the start sets it once for good.
  const std::vector<char> zeros(small_capacity(), 0);
  std::vector<const char*> blocks;
  Traffic traffic;
  const Status warm = exchange_small(zeros.data(), zeros.size(), blocks, traffic);
  if (!warm.ok()) throw std::runtime_error(warm.message());
}

Status GlooChannel::exchange_small(const void* in, size_t bytes, std::vector<const char*>& blocks,
                                   Traffic& traffic) {
  if (aborted_) return IoError("the channel was aborted after an earlier failure");
  if (bytes == 0 || bytes > small_capacity())
    return Internal("exchange_small: " + std::to_string(bytes) + " bytes, capacity " +
                    std::to_string(small_capacity()));
  const uint64_t k = small_count_++;
  const int parity = static_cast<int>(k & 1);
  // Never zero, and different for consecutive exchanges of one parity.
  const uint64_t stamp = (k + 1) * 0x9E3779B97F4A7C15ull ^ 0x5ca1ab1e0ddba11ull;
  std::memcpy(small_send_[parity], in, bytes);
  std::memcpy(small_send_[parity] + bytes, &stamp, kSmallStamp);
  blocks.assign(static_cast<size_t>(size_), nullptr);
  blocks[rank_] = static_cast<const char*>(in);
  int peer = -1;
  const char* waiting_for = "to send its data";
  try {
    for (peer = 0; peer < size_; ++peer)
      if (peer != rank_) small_send_buffers_[parity * size_ + peer]->send(0, bytes + kSmallStamp);
    for (peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      char* block = small_recv_area_[parity] + peer * kSmallCapacity;
      try {
        small_recv_[parity * size_ + peer]->waitRecv();
      } catch (const std::exception&) {
        // Only a connection that failed after this exchange's bytes arrived lets it go on.
        uint64_t got = 0;
        std::memcpy(&got, block + bytes, kSmallStamp);
        if (got != stamp) throw;
      }
      blocks[peer] = block;
    }
    waiting_for = "to take this rank's data";
    for (peer = 0; peer < size_; ++peer)
      if (peer != rank_) small_send_buffers_[parity * size_ + peer]->waitSend();
  } catch (const std::exception& e) {
    return IoError(describe_transfer_failure("exchange", peer, waiting_for, e.what()));
  }
  traffic.sent += static_cast<uint64_t>(size_ - 1) * bytes;
  traffic.received += static_cast<uint64_t>(size_ - 1) * bytes;
  return OkStatus();
}

GlooChannel::GlooChannel(int rank, int size, bool bound)
    : rank_(rank), size_(size), bound_(bound) {}

GlooChannel::~GlooChannel() = default;

char* GlooChannel::scratch(int which, size_t bytes) {
  if (scratch_bytes_[which] < bytes) {
    scratch_[which] = std::make_unique_for_overwrite<char[]>(bytes);
    scratch_bytes_[which] = bytes;
  }
  return scratch_[which].get();
}

Status GlooChannel::send(const void* data, size_t bytes, int dst, uint32_t tag, Deadline deadline,
                         Traffic& traffic) {
  const std::string what =
      "send to rank " + std::to_string(dst) + " (tag " + std::to_string(tag) + ")";
  if (aborted_) return IoError(what + ": the channel was aborted after an earlier failure");
  try {
    if (bound_) {
      if (bytes > 0) {  // a bound buffer cannot be empty: empty messages are not sent at all
        auto buf = context_->getPair(dst)->createSendBuffer(p2p_bound_slot(tag, dst, true),
                                                            const_cast<void*>(data), bytes);
        buf->send();
        buf->waitSend();
      }
    } else {
      auto buf = context_->createUnboundBuffer(const_cast<void*>(data), bytes);
      buf->send(dst, kP2pSlotBase + tag);
      const WatchedTransfer watched(this, buf.get(), dst, false);
      if (!buf->waitSend(nullptr, time_left(deadline)))
        throw gloo::IoException("the connection broke while the data was being sent");
    }
  } catch (const std::exception& e) {
    return IoError(describe_transfer_failure(what, dst, "to receive", e.what()));
  }
  traffic.sent += bytes;
  return OkStatus();
}

Status GlooChannel::recv(void* data, size_t bytes, int src, uint32_t tag, Deadline deadline,
                         Traffic& traffic) {
  const std::string what =
      "receive from rank " + std::to_string(src) + " (tag " + std::to_string(tag) + ")";
  if (aborted_) return IoError(what + ": the channel was aborted after an earlier failure");
  try {
    if (bound_) {
      if (bytes > 0) {
        auto buf =
            context_->getPair(src)->createRecvBuffer(p2p_bound_slot(tag, src, false), data, bytes);
        buf->waitRecv();
      }
    } else {
      auto buf = context_->createUnboundBuffer(data, bytes);
      buf->recv(src, kP2pSlotBase + tag);
      const WatchedTransfer watched(this, buf.get(), src, true);
      if (!buf->waitRecv(nullptr, time_left(deadline)))
        throw gloo::IoException("the connection broke while the data was being received");
    }
  } catch (const std::exception& e) {
    return IoError(describe_transfer_failure(what, src, "to send", e.what()));
  }
  traffic.received += bytes;
  return OkStatus();
}

// The n-th bound message between two ranks with one tag gets the same slot on both sides. Slots
// must be unique among a connection's live buffers (a lane has one message in flight), and the
// two directions of a connection must differ: a bound buffer unregisters its slot when
// destroyed, whichever direction it served. Bit 0 is the direction (1: lower rank to higher).
int GlooChannel::p2p_bound_slot(uint32_t tag, int peer, bool sending) {
  uint32_t n;
  {
    std::lock_guard<std::mutex> lock(p2p_mutex_);
    n = p2p_counts_[{peer, tag, sending}]++;
  }
  const bool upward = sending ? rank_ < peer : peer < rank_;
  const uint64_t h =
      (static_cast<uint64_t>(tag) * 0x9E3779B97F4A7C15ull) ^ (n * 0xBF58476D1CE4E5B9ull);
  return static_cast<int>(((h >> 33) & 0x3ffffffe) | 0x40000000 | (upward ? 1 : 0));
}

std::map<int, std::string> GlooChannel::broken_peers() {
  std::map<int, std::string> broken;
  if (!context_) return broken;
  // Posting a receive on a connection rethrows the error that connection holds; on a healthy
  // one it posts a zero-byte receive nobody will ever match, which abort() clears.
  char byte = 0;
  std::unique_ptr<gloo::transport::UnboundBuffer> probe;
  try {
    probe = context_->createUnboundBuffer(&byte, 0);
  } catch (const std::exception&) {
    return broken;  // ibverbs: no unbound buffers, nothing to probe with
  }
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    try {
      context_->getPair(peer)->recv(probe.get(), kProbeSlot, 0, 0);
    } catch (const std::exception& e) {
      const std::string m = e.what();
      if (!is_local_abort(m)) broken[peer] = strip_gloo_location(m);
    }
  }
  return broken;
}

bool GlooChannel::peer_broken(int peer) {
  if (!context_ || peer == rank_) return false;
  char byte = 0;
  try {
    auto probe = context_->createUnboundBuffer(&byte, 0);
    context_->getPair(peer)->recv(probe.get(), kProbeSlot, 0, 0);
  } catch (const std::exception& e) {
    return !is_local_abort(e.what());
  }
  return false;
}

namespace {

// The unbound transfers waiting for their peers, and the thread that probes the peers of those
// that wait long (GlooChannel::WatchedTransfer). One per process, never destroyed (its thread
// lives as long as the process).
class TransferWatch {
 public:
  static TransferWatch& get() {
    static TransferWatch* watch = new TransferWatch();
    return *watch;
  }
  uint64_t add(GlooChannel* channel, gloo::transport::UnboundBuffer* buffer, int peer,
               bool receiving) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!started_) {
      started_ = true;
      std::thread([this] { loop(); }).detach();
    }
    const auto now = std::chrono::steady_clock::now();
    sends_[next_] = {channel, buffer, peer, receiving, now, now};
    return next_++;
  }
  void remove(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    sends_.erase(id);
  }

 private:
  struct Entry {
    GlooChannel* channel;
    gloo::transport::UnboundBuffer* buffer;
    int peer;
    bool receiving;
    std::chrono::steady_clock::time_point since, probed;
  };
  // A transfer on a healthy connection may take this long before its peer is probed, and again
  // between probes: each probe of a healthy connection leaves a zero-byte receive posted there.
  static constexpr auto kProbeAfter = std::chrono::milliseconds(300);

  void loop() {
    while (true) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      // Under the lock throughout: a send is removed (and its buffer and channel may go) only
      // after this pass is done with it.
      std::lock_guard<std::mutex> lock(mutex_);
      const auto now = std::chrono::steady_clock::now();
      for (auto& [id, e] : sends_) {
        if (now - e.since < kProbeAfter || now - e.probed < kProbeAfter) continue;
        e.probed = now;
        if (!e.channel->peer_broken(e.peer)) continue;
        if (e.receiving)
          e.buffer->abortWaitRecv();
        else
          e.buffer->abortWaitSend();
      }
    }
  }

  std::mutex mutex_;
  std::map<uint64_t, Entry> sends_;
  uint64_t next_ = 1;
  bool started_ = false;
};

}  // namespace

GlooChannel::WatchedTransfer::WatchedTransfer(GlooChannel* channel,
                                              gloo::transport::UnboundBuffer* buffer, int peer,
                                              bool receiving)
    : id_(TransferWatch::get().add(channel, buffer, peer, receiving)) {}

GlooChannel::WatchedTransfer::~WatchedTransfer() {
  TransferWatch::get().remove(id_);
}

void GlooChannel::abort() {
  if (aborted_.exchange(true) || !context_) return;
  if (bound_) {
    try {
      context_->closeConnections();
    } catch (const std::exception&) {
    }
    return;
  }
  // This Gloo has no public abort. Its timeout path is one: when a wait on an unbound buffer
  // times out, the context signals an error to every pending operation of every connection and
  // closes them all, so the peers see their connections to this rank close. A 1 ms wait on a
  // receive that nobody will ever send takes that path.
  char byte = 0;
  try {
    auto buf = context_->createUnboundBuffer(&byte, 1);
    bool posted = false;
    for (int peer = 0; peer < size_ && !posted; ++peer) {
      if (peer == rank_) continue;
      try {
        buf->recv(peer, kAbortSlot);
        posted = true;
      } catch (const std::exception&) {
        // this connection is already closed; try the next
      }
    }
    if (posted) buf->waitRecv(nullptr, std::chrono::milliseconds(1));
  } catch (const std::exception&) {
    // the expected timeout
  }
}

}  // namespace cann::comm
