// Heartbeat: a process's "alive, at step N" for the elastic agent (elastic/heartbeat_monitor.h).
// A thread of its own, with its own store connection, sets cann/<job>/heartbeat/rank<r> to
// "<generation> <step> <total steps> <beat>" at once and then every interval, so a slow step or
// a blocked call of the process never silences it; only a dead or stopped process falls silent.
//
// A process that stays across the agent's generations without taking part in them (a
// parameter-server shard or a recommendation worker, whose lost peers are replaced under them)
// follows the membership record: each beat carries the generation the agent published last.
//
// Thread safety: set_step and set_generation may be called from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "core/status.h"

namespace cann::comm {
class Store;
}

namespace cann::train {

struct DistEnv;

class Heartbeat {
 public:
  // env must be an elastic job's (env.elastic()). `follow_membership`: beats carry the
  // generation of cann/<job>/membership rather than set_generation's. `progress`, when given,
  // is asked for the step at every beat (from the beating thread) instead of set_step.
  static StatusOr<std::unique_ptr<Heartbeat>> start(const DistEnv& env, int total_steps,
                                                    bool follow_membership,
                                                    std::function<int()> progress = {});
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  void set_step(int done) { step_ = done; }
  void set_generation(int generation) { generation_ = generation; }

 private:
  Heartbeat() = default;
  void beat();

  std::shared_ptr<comm::Store> store_;
  std::string key_, membership_key_;
  bool follow_ = false;
  std::function<int()> progress_;
  double interval_s_ = 0.1;
  int total_steps_ = 0;
  std::atomic<int> step_{0}, generation_{0};
  int64_t beats_ = 0;  // the beating thread only
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace cann::train
