// TCP framing for the parameter server; see ps_wire.h. Every wait is a poll() with a deadline.
#include "recsys/ps_wire.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

#include "core/timer.h"

namespace cann::recsys {
namespace {

// Waits until fd is readable (events POLLIN) or writable; false on timeout. A negative
// timeout waits without limit.
bool wait_for(int fd, short events, double deadline) {
  while (true) {
    const double left = deadline < 0 ? -1 : deadline - now_seconds();
    if (deadline >= 0 && left <= 0) return false;
    pollfd p{fd, events, 0};
    const int rc = poll(&p, 1, deadline < 0 ? -1 : static_cast<int>(left * 1000) + 1);
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return true;  // let the read or write report the error
  }
}

Status io_error(const std::string& peer, const std::string& what) {
  return FailedPrecondition("parameter server: " + what + " (" + peer +
                            "); hint: the peer process stopped or hangs, see its log");
}

Status send_bytes(int fd, const void* p, size_t n, double deadline, const std::string& peer) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    if (!wait_for(fd, POLLOUT, deadline)) return io_error(peer, "send timed out");
    const ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (w <= 0) return io_error(peer, std::string("send failed: ") + std::strerror(errno));
    c += w;
    n -= static_cast<size_t>(w);
  }
  return OkStatus();
}

Status recv_bytes(int fd, void* p, size_t n, double deadline, const std::string& peer) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    if (!wait_for(fd, POLLIN, deadline)) return io_error(peer, "receive timed out");
    const ssize_t r = ::recv(fd, c, n, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r == 0) return io_error(peer, "connection closed");
    if (r < 0) return io_error(peer, std::string("receive failed: ") + std::strerror(errno));
    c += r;
    n -= static_cast<size_t>(r);
  }
  return OkStatus();
}

}  // namespace

PsSocket::~PsSocket() {
  if (fd_ >= 0) close(fd_);
}
PsSocket::PsSocket(PsSocket&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
PsSocket& PsSocket::operator=(PsSocket&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

Status send_frame(int fd, PsOp op, int worker, int step,
                  const std::vector<std::pair<const void*, size_t>>& parts,
                  std::chrono::milliseconds timeout, const std::string& peer) {
  PsHeader h;
  h.op = static_cast<uint32_t>(op);
  h.worker = worker;
  h.step = step;
  for (const auto& [p, n] : parts) h.bytes += n;
  const double deadline = now_seconds() + timeout.count() / 1000.0;
  CANN_RETURN_IF_ERROR(send_bytes(fd, &h, sizeof(h), deadline, peer));
  for (const auto& [p, n] : parts) CANN_RETURN_IF_ERROR(send_bytes(fd, p, n, deadline, peer));
  return OkStatus();
}

Status recv_frame(int fd, PsHeader* header, std::vector<char>* payload,
                  std::chrono::milliseconds timeout, bool idle_ok, const std::string& peer) {
  if (idle_ok) wait_for(fd, POLLIN, -1);
  const double deadline = now_seconds() + timeout.count() / 1000.0;
  CANN_RETURN_IF_ERROR(recv_bytes(fd, header, sizeof(*header), deadline, peer));
  if (header->magic != kPsMagic || header->version != kPsVersion)
    return FailedPrecondition("parameter server: " + peer +
                              " speaks another protocol (bad magic or version); hint: run workers "
                              "and shards from the same cann-train binary");
  if (header->bytes > (uint64_t{1} << 36))
    return FailedPrecondition("parameter server: " + peer + " announced a frame of " +
                              std::to_string(header->bytes) + " bytes; hint: a corrupt stream");
  payload->resize(header->bytes);
  return recv_bytes(fd, payload->data(), payload->size(), deadline, peer);
}

StatusOr<std::pair<PsSocket, int>> listen_on(const std::string& host) {
  PsSocket s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (s.fd() < 0) return IoError(std::string("parameter server: socket: ") + std::strerror(errno));
  int one = 1;
  setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1)
    return InvalidArgument("parameter server: listen address '" + host +
                           "' is not an IPv4 address; hint: set CANN_TRAIN_COMM_ADDR to one");
  if (bind(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(s.fd(), 256) != 0)
    return IoError("parameter server: cannot listen on " + host + ": " + std::strerror(errno) +
                   "; hint: check the address belongs to this machine");
  socklen_t len = sizeof(addr);
  getsockname(s.fd(), reinterpret_cast<sockaddr*>(&addr), &len);
  return std::make_pair(std::move(s), static_cast<int>(ntohs(addr.sin_port)));
}

StatusOr<PsSocket> connect_to(const std::string& host, int port,
                              std::chrono::milliseconds timeout) {
  const double deadline = now_seconds() + timeout.count() / 1000.0;
  std::string last;
  while (true) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1)
      return InvalidArgument("parameter server: address '" + host + "' is not IPv4");
    PsSocket s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (connect(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      int one = 1;
      setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return s;
    }
    last = std::strerror(errno);
    if (now_seconds() > deadline)
      return FailedPrecondition("parameter server " + host + ":" + std::to_string(port) +
                                ": cannot connect (" + last +
                                "); hint: the shard process is not running, see its log");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace cann::recsys
