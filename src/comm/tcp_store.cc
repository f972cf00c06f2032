// TcpStore server and client.
#include "comm/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "core/timer.h"

namespace cann::comm {
namespace {

enum Op : uint8_t { kSet = 1, kGet, kAdd, kCas, kDel };

bool send_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool recv_all(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::recv(fd, c, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool send_string(int fd, const std::string& s) {
  const uint32_t n = static_cast<uint32_t>(s.size());
  return send_all(fd, &n, 4) && send_all(fd, s.data(), s.size());
}

bool recv_string(int fd, std::string* s) {
  uint32_t n = 0;
  if (!recv_all(fd, &n, 4) || n > (1u << 30)) return false;
  s->resize(n);
  return recv_all(fd, s->data(), n);
}

// The server: one thread, poll() over the listening socket and all clients. Requests are tiny,
// so each is read and answered in one go.
class Server {
 public:
  ~Server() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (listen_fd_ >= 0) close(listen_fd_);
  }

  Status start(const std::string& host, int port) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    (void)host;  // serve on every interface: peers may reach MASTER_ADDR by any route
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        listen(listen_fd_, 128) != 0)
      return IoError("tcp store: cannot listen on port " + std::to_string(port) + ": " +
                     std::strerror(errno) + "; hint: pick a free MASTER_PORT");
    socklen_t len = sizeof(addr);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { loop(); });
    return OkStatus();
  }
  int port() const { return port_; }

 private:
  void loop() {
    std::vector<int> clients;
    while (!stop_) {
      std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}};
      for (int c : clients) fds.push_back({c, POLLIN, 0});
      if (poll(fds.data(), fds.size(), 100) <= 0) continue;
      std::vector<int> alive;
      for (size_t i = 1; i < fds.size(); ++i) {
        const int c = fds[i].fd;
        if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) && !serve_one(c)) {
          close(c);
          continue;
        }
        alive.push_back(c);
      }
      if (fds[0].revents & POLLIN) {
        const int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0) {
          int one = 1;
          setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          alive.push_back(c);
        }
      }
      clients.swap(alive);
    }
    for (int c : clients) close(c);
  }

  bool serve_one(int fd) {
    uint8_t op = 0;
    uint32_t n = 0;
    if (!recv_all(fd, &op, 1) || !recv_all(fd, &n, 4) || n > 4) return false;
    std::string a[4];
    for (uint32_t i = 0; i < n; ++i)
      if (!recv_string(fd, &a[i])) return false;
    uint8_t status = 0;
    std::string out;
    auto it = map_.find(a[0]);
    switch (op) {
      case kSet:
        map_[a[0]] = a[1];
        break;
      case kGet:
        if (it == map_.end())
          status = 1;
        else
          out = it->second;
        break;
      case kAdd: {
        char* end = nullptr;
        const long long current = it == map_.end() ? 0 : std::strtoll(it->second.c_str(), &end, 10);
        if (it != map_.end() && (end == it->second.c_str() || *end != '\0')) {
          status = 2;  // the stored value is not an integer
          break;
        }
        out = map_[a[0]] = std::to_string(current + std::strtoll(a[1].c_str(), nullptr, 10));
        break;
      }
      case kCas: {
        // a[1] = "1" when an expected value is given (a[2]); a[3] = desired.
        const bool matches =
            a[1] == "1" ? (it != map_.end() && it->second == a[2]) : it == map_.end();
        if (matches) map_[a[0]] = a[3];
        out = map_[a[0]];
        break;
      }
      case kDel:
        status = it == map_.end() ? 1 : 0;
        if (it != map_.end()) map_.erase(it);
        break;
      default:
        return false;
    }
    return send_all(fd, &status, 1) && send_string(fd, out);
  }

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::map<std::string, std::string> map_;  // touched only by the server thread
};

class TcpStore : public Store {
 public:
  TcpStore(std::unique_ptr<Server> server, int fd, std::string address)
      : server_(std::move(server)), fd_(fd), address_(std::move(address)) {}
  ~TcpStore() override {
    if (fd_ >= 0) close(fd_);
  }

  Status set(const std::string& key, std::string_view value) override {
    return call(kSet, {key, std::string(value)}).status();
  }
  StatusOr<std::string> get(const std::string& key, std::chrono::milliseconds timeout) override {
    const double deadline = now_seconds() + timeout.count() / 1000.0;
    double backoff = 0.0005;
    while (true) {
      CANN_ASSIGN_OR_RETURN(auto v, try_get(key));
      if (v) return *v;
      if (now_seconds() > deadline)
        return IoError("tcp store " + address_ + ": key '" + key + "' not set within " +
                       std::to_string(timeout.count()) + " ms");
      std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
      backoff = std::min(backoff * 2, 0.02);
    }
  }
  StatusOr<std::optional<std::string>> try_get(const std::string& key) override {
    CANN_ASSIGN_OR_RETURN(auto r, call(kGet, {key}));
    if (r.first != 0) return std::optional<std::string>();
    return std::optional<std::string>(r.second);
  }
  StatusOr<int64_t> add(const std::string& key, int64_t delta) override {
    CANN_ASSIGN_OR_RETURN(auto r, call(kAdd, {key, std::to_string(delta)}));
    if (r.first != 0)
      return InvalidArgument("tcp store " + address_ + ": key '" + key +
                             "' holds a value that is not an integer; add() needs one");
    return static_cast<int64_t>(std::strtoll(r.second.c_str(), nullptr, 10));
  }
  StatusOr<std::string> compare_set(const std::string& key,
                                    const std::optional<std::string>& expected,
                                    std::string_view desired) override {
    CANN_ASSIGN_OR_RETURN(auto r, call(kCas, {key, expected ? "1" : "0", expected.value_or(""),
                                              std::string(desired)}));
    return r.second;
  }
  Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    const auto start = std::chrono::steady_clock::now();
    for (const auto& k : keys) {
      const auto left = timeout - std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::steady_clock::now() - start);
      auto v = get(k, std::max(left, std::chrono::milliseconds(0)));
      if (!v.ok()) return v.status();
    }
    return OkStatus();
  }
  StatusOr<bool> remove(const std::string& key) override {
    CANN_ASSIGN_OR_RETURN(auto r, call(kDel, {key}));
    return r.first == 0;
  }
  std::string address() const override { return address_; }

 private:
  StatusOr<std::pair<uint8_t, std::string>> call(uint8_t op, std::vector<std::string> args) {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint32_t n = static_cast<uint32_t>(args.size());
    bool ok = send_all(fd_, &op, 1) && send_all(fd_, &n, 4);
    for (const auto& a : args) ok = ok && send_string(fd_, a);
    uint8_t status = 0;
    std::string out;
    ok = ok && recv_all(fd_, &status, 1) && recv_string(fd_, &out);
    if (!ok)
      return IoError("tcp store " + address_ +
                     ": connection lost; hint: the serving rank (rank 0) has exited or is "
                     "unreachable");
    return std::make_pair(status, out);
  }

  std::unique_ptr<Server> server_;
  std::mutex mutex_;  // one request at a time on the connection
  int fd_;
  std::string address_;
};

StatusOr<int> connect_with_retry(const std::string& host, int port,
                                 std::chrono::milliseconds timeout) {
  const double deadline = now_seconds() + timeout.count() / 1000.0;
  std::string last_error;
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (rc != 0) {
      last_error = gai_strerror(rc);
    } else {
      const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
        freeaddrinfo(res);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return fd;
      }
      last_error = std::strerror(errno);
      close(fd);
      freeaddrinfo(res);
    }
    if (now_seconds() > deadline)
      return IoError("tcp store " + host + ":" + std::to_string(port) + ": cannot connect within " +
                     std::to_string(timeout.count()) + " ms (" + last_error +
                     "); hint: check MASTER_ADDR/MASTER_PORT and that rank 0 runs");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

StatusOr<std::shared_ptr<Store>> open_tcp_store(const std::string& host, int port, bool serve,
                                                std::chrono::milliseconds connect_timeout) {
  std::unique_ptr<Server> server;
  if (serve) {
    server = std::make_unique<Server>();
    CANN_RETURN_IF_ERROR(server->start(host, port));
    port = server->port();
  }
  CANN_ASSIGN_OR_RETURN(int fd,
                        connect_with_retry(serve ? "127.0.0.1" : host, port, connect_timeout));
  return std::shared_ptr<Store>(
      new TcpStore(std::move(server), fd, "tcp://" + host + ":" + std::to_string(port)));
}

}  // namespace cann::comm
