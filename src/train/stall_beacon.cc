// The flight-recorder beacon and the hang analysis of a worker (see stall_beacon.h).
#include "train/stall_beacon.h"

#include <unistd.h>

#include <chrono>
#include <optional>
#include <vector>

#include "core/host.h"
#include "core/json_line.h"
#include "core/log.h"
#include "core/timer.h"
#include "debug/hang_analysis.h"

namespace cann::train {
namespace {

std::string beacon_key(const std::string& job_id, int rank) {
  return "cann/" + job_id + "/flight/rank" + std::to_string(rank);
}

}  // namespace

StallBeacon::StallBeacon(std::shared_ptr<comm::Store> store, std::string job_id, int rank,
                         int world_size)
    : store_(std::move(store)), job_id_(std::move(job_id)), rank_(rank), world_size_(world_size) {}

StallBeacon::~StallBeacon() {
  stop();
}

void StallBeacon::start(const comm::Group& group) {
  if (!store_) return;
  stop_ = false;
  thread_ = std::thread([this, &group] {
    const std::string key = beacon_key(job_id_, rank_);
    const std::string host = host_name();
    while (!stop_) {
      std::string groups = "[";
      groups += group.flight_recorder().summary_json();
      groups += "]";
      JsonLine j;
      j.add("rank", rank_)
          .add("host", host)
          .add("pid", static_cast<int64_t>(getpid()))
          .add("time", unix_seconds())
          .add("step", step_.load())
          .add_raw("groups", groups);
      (void)store_->set(key, j.str());  // diagnostics never stop training
      for (int i = 0; i < 10 && !stop_; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
}

void StallBeacon::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void StallBeacon::explain() const {
  if (!store_) return;
  std::vector<std::optional<debug::RankBeacon>> beacons(world_size_);
  for (int r = 0; r < world_size_; ++r) {
    auto text = store_->try_get(beacon_key(job_id_, r));
    if (!text.ok() || !text->has_value()) continue;
    auto b = debug::parse_beacon(**text);
    if (b.ok()) beacons[r] = *b;
  }
  for (const std::string& line : debug::analyze_hang(beacons, unix_seconds()))
    log_warning("rank " + std::to_string(rank_) + ": hang analysis: " + line);
}

}  // namespace cann::train
