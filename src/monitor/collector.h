// The two ends of the snapshot path through the store.
//
// SnapshotPublisher (every worker): after a step, writes its RankSnapshot under
// "<prefix>/rank<r>", at most once per min_interval_s (the last step is always written).
// SnapshotCollector (rank-0 agent): a thread that reads every rank's key twice a second and
// feeds the Hub.
//
// The store is reached through two functions so this library needs nothing but core/.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "core/status.h"
#include "monitor/hub.h"

namespace cann::monitor {

using StoreSet = std::function<Status(const std::string& key, const std::string& value)>;
using StoreGet =
    std::function<StatusOr<std::string>(const std::string& key)>;  // NotFound if absent
// A store's try_get (the value, or nullopt when absent).
using StoreTryGet = std::function<StatusOr<std::optional<std::string>>(const std::string& key)>;
// The StoreGet of a store reached through its try_get: an absent key is NotFound.
StoreGet store_get(StoreTryGet try_get);

class SnapshotPublisher {
 public:
  SnapshotPublisher(StoreSet set, std::string prefix, double min_interval_s = 0.25);
  // Publishes unless the last publish was less than min_interval_s ago (force: always).
  void publish(const RankSnapshot& s, bool force = false);

 private:
  StoreSet set_;
  std::string prefix_;
  double min_interval_s_;
  double last_ = 0.0;
};

class SnapshotCollector {
 public:
  SnapshotCollector(Hub& hub, StoreGet get, std::string prefix, int world_size);
  ~SnapshotCollector();
  void start();
  void stop();
  // One pass over every rank's key (the thread calls it; tests may too).
  void poll_once();

 private:
  Hub& hub_;
  StoreGet get_;
  std::string prefix_;
  int world_size_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace cann::monitor
