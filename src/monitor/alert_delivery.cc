// Queues, retries and rate-limited warnings for the alert routes (see alert_delivery.h).
#include "monitor/alert_delivery.h"

#include <chrono>

#include "core/log.h"
#include "core/timer.h"

namespace cann::monitor {

AlertDelivery::AlertDelivery(std::vector<std::unique_ptr<AlertRoute>> routes,
                             DeliveryOptions options)
    : options_(options) {
  for (auto& r : routes) {
    auto lane = std::make_unique<Lane>();
    lane->route = std::move(r);
    lanes_.push_back(std::move(lane));
  }
  for (auto& lane : lanes_) lane->thread = std::thread([this, l = lane.get()] { lane_main(l); });
}

AlertDelivery::~AlertDelivery() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    stop_time_ = now_seconds();
  }
  cv_.notify_all();
  for (auto& lane : lanes_) lane->thread.join();
}

void AlertDelivery::send(const AlertMessage& m) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& lane : lanes_) {
      if (lane->queue.size() < options_.queue_limit)
        lane->queue.push_back(m);
      else
        ++lane->counts.dropped;
    }
  }
  cv_.notify_all();
}

std::vector<AlertDelivery::Counts> AlertDelivery::counts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Counts> out;
  for (const auto& lane : lanes_) out.push_back(lane->counts);
  return out;
}

bool AlertDelivery::attempt(Lane* lane, const AlertMessage& m, double* last_warning,
                            int* unreported) {
  const Status s = lane->route->deliver(m);
  std::lock_guard<std::mutex> lock(mutex_);
  if (s.ok()) {
    ++lane->counts.delivered;
    return true;
  }
  ++lane->counts.failed_attempts;
  const double now = now_seconds();
  if (*last_warning < 0 || now - *last_warning >= options_.warning_interval_s) {
    std::string line = "alert route " + lane->route->name() + ": " + s.message();
    if (*unreported > 0)
      line += " (and " + std::to_string(*unreported) + " failed attempts since the last line)";
    log_warning(line + "; alerts are queued and retried, training goes on");
    *last_warning = now;
    *unreported = 0;
  } else {
    ++*unreported;
  }
  return false;
}

void AlertDelivery::lane_main(Lane* lane) {
  double last_warning = -1.0;
  int unreported = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !lane->queue.empty(); });
    if (lane->queue.empty()) return;
    if (stopping_ && now_seconds() - stop_time_ > options_.drain_s) {
      const size_t left = lane->queue.size();
      lane->counts.dropped += static_cast<int>(left);
      lane->queue.clear();
      log_warning("alert route " + lane->route->name() + ": " + std::to_string(left) +
                  " alerts not delivered before the job ended");
      return;
    }
    const AlertMessage m = lane->queue.front();
    lane->queue.pop_front();
    lock.unlock();
    bool done = attempt(lane, m, &last_warning, &unreported);
    double backoff = options_.first_backoff_s;
    for (int retry = 0; !done && retry < options_.retries; ++retry) {
      lock.lock();
      // Waits out the back-off unless the owner is going: then no more retries.
      const bool stop =
          cv_.wait_for(lock, std::chrono::duration<double>(backoff), [&] { return stopping_; });
      lock.unlock();
      if (stop) break;
      done = attempt(lane, m, &last_warning, &unreported);
      backoff *= 2;
    }
    lock.lock();
    if (!done) ++lane->counts.dropped;
  }
}

}  // namespace cann::monitor
