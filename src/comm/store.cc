// open_store(): one URL picks the backend; prefix_store(): the key namespace that gives every
// group and every generation of an elastic job keys of its own (Gloo keys are write-once, so a
// rebuilt group must never read its predecessor's addresses).
#include <signal.h>

#include <charconv>
#include <mutex>

#include "comm/store_backends.h"
#include "comm/tcp_store.h"

namespace cann::comm {
namespace {

// Every key gets "<prefix>/" in front; the base store's errors therefore name full keys, which
// is what a person grepping a store directory or redis-cli needs.
class PrefixStore final : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> base, std::string prefix)
      : base_(std::move(base)), prefix_(std::move(prefix) + "/") {}

  Status set(const std::string& key, std::string_view value) override {
    return base_->set(prefix_ + key, value);
  }
  StatusOr<std::string> get(const std::string& key, std::chrono::milliseconds timeout) override {
    return base_->get(prefix_ + key, timeout);
  }
  StatusOr<std::optional<std::string>> try_get(const std::string& key) override {
    return base_->try_get(prefix_ + key);
  }
  StatusOr<int64_t> add(const std::string& key, int64_t delta) override {
    return base_->add(prefix_ + key, delta);
  }
  StatusOr<std::string> compare_set(const std::string& key,
                                    const std::optional<std::string>& expected,
                                    std::string_view desired) override {
    return base_->compare_set(prefix_ + key, expected, desired);
  }
  Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys) full.push_back(prefix_ + k);
    return base_->wait(full, timeout);
  }
  StatusOr<bool> remove(const std::string& key) override { return base_->remove(prefix_ + key); }
  std::string address() const override { return base_->address(); }

 private:
  const std::shared_ptr<Store> base_;
  const std::string prefix_;
};

bool starts_with(const std::string& s, std::string_view p) {
  return s.compare(0, p.size(), p) == 0;
}

// tcp://HOST:PORT[?server=1] (torchrun-style MASTER_ADDR/MASTER_PORT).
StatusOr<std::shared_ptr<Store>> open_tcp_url(const std::string& url,
                                              std::chrono::milliseconds timeout) {
  std::string rest = url.substr(6);
  bool serve = false;
  if (const size_t q = rest.find('?'); q != std::string::npos) {
    serve = rest.substr(q + 1) == "server=1";
    rest.resize(q);
  }
  const size_t colon = rest.rfind(':');
  int port = -1;
  if (colon != std::string::npos) {
    const char* first = rest.data() + colon + 1;
    const char* last = rest.data() + rest.size();
    auto [ptr, ec] = std::from_chars(first, last, port);
    if (ec != std::errc() || ptr != last) port = -1;
  }
  if (colon == std::string::npos || colon == 0 || port < 0 || port > 65535)
    return InvalidArgument("bad store URL '" + url + "'; hint: tcp://HOST:PORT");
  return open_tcp_store(rest.substr(0, colon), port, serve, timeout);
}

}  // namespace

StatusOr<std::shared_ptr<Store>> open_store(const std::string& url,
                                            std::chrono::milliseconds timeout) {
  if (url.empty())
    return InvalidArgument("empty store URL; hint: a directory, file://DIR or redis://HOST:PORT");
  if (starts_with(url, "memory://")) return open_memory_store(url.substr(9));
  if (starts_with(url, "file://")) return open_file_store(url.substr(7));
  if (starts_with(url, "redis://")) return open_redis_store(url, timeout);
  if (starts_with(url, "tcp://")) return open_tcp_url(url, timeout);
  if (url.find("://") == std::string::npos) return open_file_store(url);
  return InvalidArgument("unknown store URL scheme in '" + url.substr(0, url.find("://") + 3) +
                         "...'; hint: use a directory, file://DIR, redis://HOST:PORT, "
                         "tcp://HOST:PORT or memory://NAME");
}

std::shared_ptr<Store> prefix_store(std::shared_ptr<Store> base, const std::string& prefix) {
  return std::make_shared<PrefixStore>(std::move(base), prefix);
}

Status missing_keys_error(const std::string& address, const std::vector<std::string>& missing,
                          std::chrono::milliseconds timeout) {
  constexpr size_t kListed = 8;
  std::string keys;
  for (size_t i = 0; i < missing.size() && i < kListed; ++i)
    keys += (i ? ", '" : "'") + missing[i] + "'";
  if (missing.size() > kListed)
    keys += " and " + std::to_string(missing.size() - kListed) + " more";
  return IoError("timed out after " + std::to_string(timeout.count()) + " ms waiting for key" +
                 (missing.size() == 1 ? " " : "s ") + keys + " in store " + address +
                 "; hint: a peer that should have written it has not started or has failed");
}

void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL)
      signal(SIGPIPE, SIG_IGN);
  });
}

StatusOr<int64_t> parse_counter(const std::string& value, const std::string& key,
                                const std::string& address) {
  int64_t v = 0;
  const char* last = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), last, v);
  if (value.empty() || ec != std::errc() || ptr != last)
    return InvalidArgument("key '" + key + "' in store " + address +
                           " holds a value that is not an integer; add() needs a counter key");
  return v;
}

}  // namespace cann::comm
