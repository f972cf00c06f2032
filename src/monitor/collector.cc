// Snapshot publishing and collection.
#include "monitor/collector.h"

#include <chrono>

#include "core/timer.h"

namespace cann::monitor {

StoreGet store_get(StoreTryGet try_get) {
  return [try_get = std::move(try_get)](const std::string& key) -> StatusOr<std::string> {
    CANN_ASSIGN_OR_RETURN(std::optional<std::string> v, try_get(key));
    if (!v) return NotFound(key);
    return *v;
  };
}

SnapshotPublisher::SnapshotPublisher(StoreSet set, std::string prefix, double min_interval_s)
    : set_(std::move(set)), prefix_(std::move(prefix)), min_interval_s_(min_interval_s) {}

void SnapshotPublisher::publish(const RankSnapshot& s, bool force) {
  const double now = now_seconds();
  if (!force && now - last_ < min_interval_s_) return;
  last_ = now;
  // Monitoring never stops training: a failed write is dropped, the next one may succeed.
  (void)set_(prefix_ + "/rank" + std::to_string(s.rank), s.to_json());
}

SnapshotCollector::SnapshotCollector(Hub& hub, StoreGet get, std::string prefix, int world_size)
    : hub_(hub), get_(std::move(get)), prefix_(std::move(prefix)), world_size_(world_size) {}

SnapshotCollector::~SnapshotCollector() {
  stop();
}

void SnapshotCollector::start() {
  thread_ = std::thread([this] {
    while (!stop_) {
      poll_once();
      for (int i = 0; i < 5 && !stop_; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
}

void SnapshotCollector::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void SnapshotCollector::poll_once() {
  for (int r = 0; r < world_size_; ++r) {
    auto text = get_(prefix_ + "/rank" + std::to_string(r));
    if (!text.ok()) continue;
    auto snap = RankSnapshot::from_json(*text);
    if (snap.ok()) hub_.update(*snap);
  }
}

}  // namespace cann::monitor
