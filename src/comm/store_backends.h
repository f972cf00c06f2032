// The Store backends behind open_store(), and what they share: the polling schedule of the
// backends that cannot block on a key (file, redis) and the wording of a timeout, which names
// every key still missing so a stuck rendezvous says which rank never arrived.
//
// Internal to the comm library: callers use open_store() and prefix_store() from store.h.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/store.h"

namespace cann::comm {

// memory://NAME: one store per name for the life of the process (threads of one test share it
// by opening the same name).
std::shared_ptr<Store> open_memory_store(const std::string& name);
// A directory shared by processes on one machine (or over a shared file system).
StatusOr<std::shared_ptr<Store>> open_file_store(const std::string& dir);
// redis://[:PASSWORD@]HOST[:PORT][/DB]; `timeout` bounds connecting and every command.
StatusOr<std::shared_ptr<Store>> open_redis_store(const std::string& url,
                                                  std::chrono::milliseconds timeout);

// redis://[USER][:PASSWORD@]HOST[:PORT][/DB]; HOST may be [IPv6]. The password may use %XX.
struct RedisUrl {
  std::string host;
  int port = 6379;
  int db = 0;
  std::string user;
  std::string password;
  // "redis://HOST:PORT/DB": for messages; never contains the password.
  std::string address() const;
};
StatusOr<RedisUrl> parse_redis_url(const std::string& url);

// Sleeps between polls of a store that has no blocking wait: 1 ms, doubling up to `cap`, never
// past the deadline. A rendezvous key usually appears within milliseconds, so short first sleeps
// keep setup fast; the cap keeps a long wait from hammering the backend.
class PollBackoff {
 public:
  explicit PollBackoff(std::chrono::milliseconds timeout,
                       std::chrono::milliseconds cap = std::chrono::milliseconds(20))
      : deadline_(std::chrono::steady_clock::now() + timeout), cap_(cap) {}

  // Sleeps once; returns false (without sleeping) when the deadline has passed.
  bool sleep() {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline_) return false;
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline_ - now);
    std::this_thread::sleep_for(std::min<std::chrono::microseconds>(next_, left));
    next_ = std::min<std::chrono::microseconds>(next_ * 2, cap_);
    return true;
  }

 private:
  const std::chrono::steady_clock::time_point deadline_;
  const std::chrono::microseconds cap_;
  std::chrono::microseconds next_{1000};
};

// "timed out after 500 ms waiting for key 'job/1/rank/3' in store file:///tmp/s" (all missing
// keys are listed, at most a handful, then a count).
Status missing_keys_error(const std::string& address, const std::vector<std::string>& missing,
                          std::chrono::milliseconds timeout);

// Gloo and hiredis write to sockets with write(2)/writev(2), which raise SIGPIPE when the peer
// has gone; a dead peer must be an error, not the death of this process. Sets SIGPIPE to
// "ignore" once per process, unless the program installed a handler of its own.
void ignore_sigpipe();

// Parses a decimal int64 stored by add(); names the key and the store when it is not one.
StatusOr<int64_t> parse_counter(const std::string& value, const std::string& key,
                                const std::string& address);

}  // namespace cann::comm
