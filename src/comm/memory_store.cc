// MemoryStore: a key-value map for ranks that are threads of one process (the multi-rank tests,
// and a single-process run that still wants a Group). Stores are named and live as long as the
// process, so a thread that opens "memory://x" after another thread wrote to it sees the data.
//
// One mutex guards the map; one condition variable wakes every waiter on every change, which is
// cheap at the scale of a rendezvous (a few dozen keys).
#include <condition_variable>
#include <map>
#include <mutex>

#include "comm/store_backends.h"

namespace cann::comm {
namespace {

class MemoryStore final : public Store {
 public:
  explicit MemoryStore(std::string name) : address_("memory://" + std::move(name)) {}

  Status set(const std::string& key, std::string_view value) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      map_[key] = std::string(value);
    }
    changed_.notify_all();
    return OkStatus();
  }

  StatusOr<std::string> get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!changed_.wait_for(lock, timeout, [&] { return map_.count(key) > 0; }))
      return missing_keys_error(address_, {key}, timeout);
    return map_[key];
  }

  StatusOr<std::optional<std::string>> try_get(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(key);
    if (it == map_.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second);
  }

  StatusOr<int64_t> add(const std::string& key, int64_t delta) override {
    int64_t result = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = map_.find(key);
      int64_t current = 0;
      if (it != map_.end()) {
        CANN_ASSIGN_OR_RETURN(current, parse_counter(it->second, key, address_));
      }
      // Wraps like a two's-complement counter instead of overflowing (undefined for int64_t).
      result = static_cast<int64_t>(static_cast<uint64_t>(current) + static_cast<uint64_t>(delta));
      map_[key] = std::to_string(result);
    }
    changed_.notify_all();
    return result;
  }

  StatusOr<std::string> compare_set(const std::string& key,
                                    const std::optional<std::string>& expected,
                                    std::string_view desired) override {
    std::string result;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = map_.find(key);
      const bool matches = it == map_.end() ? !expected.has_value()
                                            : expected.has_value() && *expected == it->second;
      if (!matches) return it == map_.end() ? std::string() : it->second;
      map_[key] = std::string(desired);
      result = std::string(desired);
    }
    changed_.notify_all();
    return result;
  }

  Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    auto all_present = [&] {
      for (const auto& k : keys)
        if (map_.count(k) == 0) return false;
      return true;
    };
    if (changed_.wait_for(lock, timeout, all_present)) return OkStatus();
    std::vector<std::string> missing;
    for (const auto& k : keys)
      if (map_.count(k) == 0) missing.push_back(k);
    return missing_keys_error(address_, missing, timeout);
  }

  StatusOr<bool> remove(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return map_.erase(key) > 0;
  }

  std::string address() const override { return address_; }

 private:
  const std::string address_;
  std::mutex mutex_;  // guards map_
  std::condition_variable changed_;
  std::map<std::string, std::string> map_;
};

}  // namespace

std::shared_ptr<Store> open_memory_store(const std::string& name) {
  static std::mutex registry_mutex;  // guards registry
  static std::map<std::string, std::shared_ptr<Store>> registry;
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto& store = registry[name];
  if (!store) store = std::make_shared<MemoryStore>(name);
  return store;
}

}  // namespace cann::comm
