// StallBeacon: a worker's answer to "which rank is stuck where". A thread publishes, about once
// a second, this rank's flight-recorder summary (the last collectives of each group, with
// their sequence numbers) and its step under cann/<job>/flight/rank<r> in the job's store;
// after a collective fails, explain() reads every rank's beacon and logs the hang analysis
// (debug/hang_analysis.h): who waits in which collective, and who never arrived.
//
// Thread safety: set_step() from the training loop; the publishing thread reads the group's
// flight recorder (itself thread-safe) and the step (atomic). The group must outlive the
// beacon: stop() before replacing it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "comm/group.h"
#include "comm/store.h"

namespace cann::train {

class StallBeacon {
 public:
  StallBeacon(std::shared_ptr<comm::Store> store, std::string job_id, int rank, int world_size);
  ~StallBeacon();
  StallBeacon(const StallBeacon&) = delete;
  StallBeacon& operator=(const StallBeacon&) = delete;

  // Starts publishing `group`'s flight recorder (a no-op without a store).
  void start(const comm::Group& group);
  // Stops the thread (before the group goes).
  void stop();
  void set_step(int64_t step) { step_ = step; }
  // Reads every rank's beacon and logs what the hang analysis makes of them.
  void explain() const;

 private:
  std::shared_ptr<comm::Store> store_;
  std::string job_id_;
  int rank_;
  int world_size_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> step_{0};
};

}  // namespace cann::train
