// Store: the small key-value service under rendezvous, membership and id exchange (c10d's
// Store). Backends: "file" (one directory, safe under concurrent processes; the default on one
// machine), "redis" (hiredis; across machines), "memory" (threads of one process, for tests).
//
// Keys are strings; values are byte strings. Every call that waits takes a timeout and returns
// an error naming the keys still missing when it expires. Thread safety: every method may be
// called from any thread concurrently.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace cann::comm {

class Store {
 public:
  virtual ~Store() = default;

  virtual Status set(const std::string& key, std::string_view value) = 0;
  // Waits up to `timeout` for the key to exist, then returns its value.
  virtual StatusOr<std::string> get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // The value, or nullopt when the key does not exist; never waits.
  virtual StatusOr<std::optional<std::string>> try_get(const std::string& key) = 0;
  // Atomically adds delta to the integer stored at key (absent counts as 0); returns the result.
  virtual StatusOr<int64_t> add(const std::string& key, int64_t delta) = 0;
  // Atomically: if the current value equals `expected` (an absent key matches only
  // std::nullopt), store `desired`. Returns the value stored after the call.
  virtual StatusOr<std::string> compare_set(const std::string& key,
                                            const std::optional<std::string>& expected,
                                            std::string_view desired) = 0;
  // Waits until every key exists.
  virtual Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // Deletes a key; deleting a missing key is not an error. Returns whether it existed.
  virtual StatusOr<bool> remove(const std::string& key) = 0;
  // Human-readable address ("file:///tmp/x", "redis://host:6379"), without any password.
  virtual std::string address() const = 0;
};

// Opens a store from a URL:
//   file:///abs/dir  or a bare directory path     -> FileStore (directory created if missing)
//   redis://[:PASSWORD@]HOST[:PORT][/DB]           -> RedisStore (port 6379 by default)
//   memory://NAME                                  -> a process-wide in-memory store by name
StatusOr<std::shared_ptr<Store>> open_store(
    const std::string& url, std::chrono::milliseconds timeout = std::chrono::seconds(30));

// A view of `base` in which every key is prefixed with "<prefix>/". Gloo keys are write-once, so
// every new group gets a fresh prefix ("job/<id>/gen/<n>/<group>").
std::shared_ptr<Store> prefix_store(std::shared_ptr<Store> base, const std::string& prefix);

}  // namespace cann::comm
