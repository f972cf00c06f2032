// StateKeeper: keeps a training run's state safe while it trains.
//
//   - Disk checkpoints are asynchronous: the step's state is copied at the step boundary and
//     written by a background thread (ckpt::AsyncCheckpointWriter); only the copy delays the
//     next step. A periodic write that fails (disk full, ...) is a warning: the earlier
//     checkpoints are untouched and training goes on; the final checkpoint is waited for and
//     its failure is an error.
//   - Under an elastic agent, every rank writes a snapshot of the whole run state (parameters,
//     full AdamW moments, error-feedback buffers of every rank, sampler, RNG) after every
//     --snapshot-every steps into its own directory of a memory file system the agent owns
//     (two kept, so the step every rank finished is always there), beats a heartbeat into the
//     store, and after a restart loads the snapshot the agent chose (own, else a neighbour's),
//     or the newest disk checkpoint when no snapshot survived.
//   - Fault-tolerance events (state_restored, training_resumed, checkpoint_saved) go into the
//     JSONL step log (core/event_log.h); rank 0 writes them.
//
// Thread safety: every method is called from the training thread; the heartbeat thread and the
// checkpoint thread touch only atomics and the EventLog (which is thread-safe).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "ckpt/checkpoint.h"
#include "core/event_log.h"
#include "core/status.h"

namespace cann::comm {
class Store;
}
namespace cann::ckpt {
class AsyncCheckpointWriter;
}

namespace cann::train {

struct DistEnv;
struct TrainConfig;

class StateKeeper {
 public:
  // env == nullptr: a plain single process (asynchronous disk checkpoints and events only).
  static StatusOr<std::unique_ptr<StateKeeper>> create(const TrainConfig& config,
                                                       const DistEnv* env, bool leader);
  ~StateKeeper();

  int generation() const {
    const int g = generation_.load();
    return g < 0 ? 0 : g;
  }
  bool elastic() const { return generation_ >= 0; }

  // The state a restarted elastic worker must load: the snapshot the agent named (the first of
  // its candidates that verifies), else the newest valid disk checkpoint. nullopt for a first
  // start or when neither exists.
  StatusOr<std::optional<ckpt::LoadedCheckpoint>> recovery_state(const std::string& checkpoint_dir);

  // Progress for the heartbeat: `done` optimizer steps completed.
  void set_step(int done) { step_ = done; }
  bool snapshot_due(int done) const;
  // Writes the in-memory snapshot of step w.step (synchronously: it is a memory copy).
  Status snapshot(const ckpt::CheckpointWrite& w);
  // Queues a disk checkpoint; with `wait`, returns once it is durable (or failed).
  Status checkpoint(const ckpt::CheckpointWrite& w, bool wait);

  void event(const std::string& name, const std::string& detail);

  // A survivor's wait for the agent's next generation: polls the membership record until its
  // generation exceeds this keeper's, up to timeout_s. Then this keeper belongs to the new
  // generation (heartbeats carry it) and recovery_state() reads the copies the record names
  // for this rank. Returns the new generation; DeadlineExceeded-like IoError on timeout.
  // `stop` is polled too: when it returns true the wait ends with an error (the job is ending).
  StatusOr<int> join_next_generation(double timeout_s, bool (*stop)());

 private:
  StateKeeper() = default;
  void beat();

  int rank_ = 0;
  std::atomic<int> generation_{-1};  // read by the heartbeat thread
  bool leader_ = false;
  int snapshot_every_ = 1;
  int keep_checkpoints_ = 3;
  std::string snapshot_dir_;  // this rank's directory; empty: no snapshots
  std::string restore_from_;
  std::unique_ptr<EventLog> events_;
  std::unique_ptr<ckpt::AsyncCheckpointWriter> writer_;
  // Heartbeat: "<generation> <step> <total steps> <beat>" under cann/<job>/heartbeat/rank<r>.
  int total_steps_ = 0;
  std::shared_ptr<comm::Store> store_;
  std::string heartbeat_key_;
  std::string membership_key_;
  double heartbeat_interval_s_ = 0.1;
  std::atomic<int> step_{0};
  int64_t beats_ = 0;  // heartbeat thread only
  std::atomic<bool> stop_{false};
  std::thread heartbeat_;
};

}  // namespace cann::train
