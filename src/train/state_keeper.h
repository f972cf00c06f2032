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
//     or the newest disk checkpoint when no snapshot survived. Under model parallelism a
//     snapshot is the rank's own part in its own layout (its shards, stage or experts, with
//     their moments; nothing is gathered across the mesh), marked with the layout and rank
//     (ckpt::RankSnapshotMark): only that rank loads it, and a mismatch is an error. Across
//     elastic nodes, where a generation may re-plan the layout for a changed world, the
//     snapshot is the whole state instead, gathered over the mesh and written once per node
//     (by its first local rank), and any layout loads it by slicing.
//   - Where the optimizer's whole state is the parameters and both moments
//     (StepOptimizer::placeable: data parallelism without ZeRO or compression, one process),
//     the moments live in the snapshot files themselves from the first snapshot on: each step's
//     optimizer writes them into the hidden slot the next snapshot is published from
//     (ckpt/snapshot_writer.h's lend()), taking the word sums on the way, so a snapshot copies
//     only the parameters (a third of the state). The parameters stay in the model's own
//     buffer, in huge pages: every GEMM of a step reads them, and from the shared memory of
//     the snapshot, in 4 KiB pages (/dev/shm has no huge pages unless mounted with huge=),
//     the embedded model's step took 3% longer, more than the copy costs. A restore first
//     moves the moments back into buffers of their own.
//   - Fault-tolerance events (state_restored, training_resumed, checkpoint_saved) go into the
//     JSONL step log (core/event_log.h); rank 0 writes them.
//   - The glue between the run and its files (run_state.cc): once bound to the live state
//     (model parts, optimizer, batch source), it takes checkpoints and snapshots of it and
//     restores it: at the start (--resume, an elastic generation's committed step, or under
//     multi-node elastic the step the ranks agree on, peer_restore.cc) and after a rejoin.
//
// Thread safety: every method is called from the training thread; the heartbeat thread and the
// checkpoint thread touch only atomics and the EventLog (which is thread-safe).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "comm/group.h"
#include "core/event_log.h"
#include "core/status.h"
#include "model/spec.h"
#include "optim/adamw.h"
#include "train/config.h"
#include "train/heartbeat.h"
#include "train/model_parts.h"
#include "train/node_copy_exchange.h"

namespace cann::comm {
class Store;
}
namespace cann::ckpt {
class AsyncCheckpointWriter;
class SnapshotWriter;
}  // namespace cann::ckpt

namespace cann::train {

struct DistEnv;

// The live state a checkpoint is taken from and restored into.
struct RunState {
  const model::ModelSpec* spec = nullptr;
  ModelParts* model = nullptr;
  StepOptimizer* optimizer = nullptr;
  BatchSource* batches = nullptr;
  comm::Group* world = nullptr;  // null: one process
  CommFailure on_comm_failure;   // wraps a collective's failure (model-parallel gathers)
  // Model parallelism: the strategy string this rank's snapshots are marked with (they hold its
  // own part of the state, which only this rank of this layout loads); empty otherwise.
  std::string rank_layout;
  // Multi-node elastic under model parallelism (with rank_layout set): a changed world is
  // re-planned, so each snapshot also says where this rank's elements land in the whole model
  // (ModelParts::full_runs) and goes, as a copy, to the rank of the same place on the next
  // node; a restore assembles the whole state from the copies the nodes left hold
  // (node_parts.cc).
  bool node_parts = false;
};

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
  void set_step(int done) {
    if (heartbeat_) heartbeat_->set_step(done);
  }
  bool snapshot_due(int done) const;
  // Before the optimizer's update that completes step `done`: where the state lives in the
  // snapshots, tells the optimizer where to write it (a collective-free choice of slot).
  Status before_update(int done);
  // Writes the in-memory snapshot of step w.step (synchronously: it is a memory copy into
  // files kept mapped, ckpt/snapshot_writer.h).
  Status snapshot(const ckpt::CheckpointWrite& w);
  // Queues a disk checkpoint; with `wait`, returns once it is durable (or failed).
  Status checkpoint(const ckpt::CheckpointWrite& w, bool wait);

  void event(const std::string& name, const std::string& detail);
  // Experts changed ranks (Model::move_experts) after this step's update: the next snapshot
  // records their placement, and the update's word sums no longer describe the state.
  void experts_moved() {
    snapshot_meta_.clear();
    sums_.valid = false;
  }

  // The glue (run_state.cc). bind() before any of the calls below; a new world group (an
  // elastic rejoin) is bound again.
  void bind(RunState state) {
    run_ = std::move(state);
    snapshot_meta_.clear();  // the model, layout or rank may be new
    unplace();               // a new optimizer holds its own moments; the model follows
  }
  // Before the bound optimizer goes (a rejoin rebuilds it, and under model parallelism the
  // model): the parameters back in the model's own buffer (the moments go with the optimizer),
  // and nothing bound until the next bind().
  void unbind();
  // The step the run continues from, its state loaded: an elastic generation's committed step
  // (agreed over the ranks under multi-node elastic), else the --resume checkpoint, else 0.
  StatusOr<int> restore_at_start();
  // After a survivor rejoined a generation: the committed step loaded, or the run reset to
  // step 0 when nothing was committed anywhere. Returns the step.
  StatusOr<int> restore_after_rejoin();
  // After completed step `done`: the heartbeat's progress and, when due, the in-memory
  // snapshot (a collective in a data-parallel group), carrying `step_log`, the step's line of
  // the step log as this rank formed it.
  Status keep(int done, const std::string& step_log);
  // The step-log line the last restored state carried ("" when none).
  const std::string& restored_step_log() const { return restored_step_log_; }
  // The disk checkpoint of `step` (a collective: the optimizer state, and under model
  // parallelism the whole model, is gathered first). With `wait` (the last step, a stop),
  // returns once it is durable; the write shows in `profiler`'s trace when given. Returns
  // rank 0's line for the log, else "".
  StatusOr<std::string> save(int step, bool wait, StepProfiler* profiler);

  // A survivor's wait for the agent's next generation: polls the membership record until its
  // generation exceeds this keeper's, up to timeout_s. Then this keeper belongs to the new
  // generation (heartbeats carry it) and recovery_state() reads the copies the record names
  // for this rank. Returns the new generation; DeadlineExceeded-like IoError on timeout.
  // `stop` is polled too: when it returns true the wait ends with an error (the job is ending).
  StatusOr<int> join_next_generation(double timeout_s, bool (*stop)());

  // Multi-node elastic: a survivor's place in the next generation of the membership record.
  struct NodeGeneration {
    int generation = 0;
    int node_index = 0;  // position of this node in the record's nodes
    int rank = 0;
    int world_size = 0;
    std::string strategy;  // the layout planned for its size ("" : the launch flags')
  };
  // Says in the store that this rank left its generation and waits for the next
  // (cann/<job>/rejoining/rank<r> = the generation left: the node's agent keeps the processes
  // of workers that all did, elastic/node_agent.h).
  Status leave_generation();
  // Polls the membership record until a newer generation appears, up to timeout_s. NotFound
  // when this node (`node_id`) is not a member of it; an error when the job ended, on timeout,
  // or when `stop` returns true.
  StatusOr<NodeGeneration> join_next_node_generation(double timeout_s, bool (*stop)(), int node_id,
                                                     int local_rank);

 private:
  StateKeeper() = default;
  StatusOr<OptimizerSnapshot> optimizer_snapshot();
  // Polls the membership record until its generation exceeds this keeper's (up to timeout_s,
  // `stop` polled too); returns the record's text.
  StatusOr<std::string> next_membership_record(double timeout_s, bool (*stop)());
  ResumeState resume_state(int step) const;
  // Loads `ck` into the bound state; returns its step.
  StatusOr<int> restore(const ckpt::LoadedCheckpoint& ck);
  // recovery_state() loaded (the state_restored event naming where from, then `note`), or
  // nothing when it is empty; then agreed over the world. Returns the step (0: nothing).
  StatusOr<int> restore_recovery_state(const std::string& note);
  // Checks over the world that every rank restored `step`.
  Status agree_on_restored_step(int step);
  // The optimizer's after_restore, on every rank (a collective where the state is sharded).
  Status after_restore();
  // Multi-node elastic (peer_restore.cc).
  StatusOr<int> restore_from_peers();
  // The restore's agreements over the world (a no-op without one): v <- the element-wise
  // maximum over the ranks; a failure goes through the run's comm-failure path.
  Status world_max(int64_t* v, size_t n, const char* tag);
  // `blob` of rank `root` to every rank (its size first; the transport moves 4-byte words).
  Status broadcast_blob(std::string& blob, int root, const char* tag);
  // Under RunState::node_parts (node_parts.cc), once per layout (a collective over the world):
  // which ranks hold the same parts (replica classes) and which of them must send a copy to the
  // next node; returns the snapshots' metadata member that records it.
  StatusOr<std::string> plan_node_parts();
  // Starts sending the snapshot `w` to the rank of the same place on the next node, where the
  // plan says so (a collective over the world when any rank sends; else a no-op), and
  // finish_copy_to_next_node() keeps the one the previous node's rank sends as that rank's
  // copy, in this generation's directory. The rank's own snapshot is written in between.
  Status start_copy_to_next_node(const ckpt::CheckpointWrite& w);
  Status finish_copy_to_next_node();
  // The state of a new generation from the node-parts copies of generation `gen` this node
  // holds (`copies`; those of old ranks congruent to this local rank): the committed step's
  // parts placed
  // into the whole model and summed over the world, loaded as a whole-model checkpoint. -1
  // when some old rank's part survives nowhere (every rank alike).
  struct NodeCopy {
    int64_t step = 0;
    int generation = -1;
    int rank = -1;      // a node part's old rank; -1: a copy of the whole state
    int64_t world = 0;  // a node part's old world size
    // A node part's replica classes (plan_node_parts): per kind (dense, experts), each old
    // rank's class leader, kind-major; -1: the rank holds none of that kind.
    std::vector<int64_t> leaders;
    int kinds = 0;  // bit k: the part carries kind k's elements (a packed copy may not)
    std::string path;
  };
  // The node's copies whose metadata reads (the newest step first).
  std::vector<NodeCopy> node_copies() const;
  StatusOr<int> restore_node_parts(const std::vector<NodeCopy>& copies, int gen);
  // No usable snapshot on any node (a failure before the first snapshot, snapshots further apart
  // than the run got, or parts lost with two neighbouring nodes): the newest disk checkpoint,
  // else the start, on every rank alike.
  StatusOr<int> restore_from_disk_or_start();
  // The optimizer's state with, under model parallelism, the whole model gathered into
  // full_state_ (a collective over the world; it then follows the full table).
  StatusOr<OptimizerSnapshot> gathered_state();
  // The state back in buffers of the model's and the optimizer's own (before a restore, a new
  // binding, the keeper's end): the snapshot slots may go.
  void unplace();

  TrainConfig config_;
  RunState run_;
  std::string node_snapshots_;  // multi-node elastic: the node's snapshot root
  std::string restored_step_log_;
  std::string snapshot_root_;      // the agent's snapshot directory (all ranks)
  std::vector<float> full_state_;  // a model-parallel checkpoint's gathered whole model
  // The snapshots' model metadata (model_meta_members with the rank's mark), serialized once
  // per bind(), not every step.
  std::string snapshot_meta_;
  // copy_to_next_node's buffers, kept between snapshots: what it sends and receives.
  struct NodeCopyBuffers {
    std::vector<int32_t> out, in;
    NodeCopyExchange exchange;  // the sizes both sides expect (reset by plan_node_parts)
  };
  NodeCopyBuffers copy_;
  // plan_node_parts's answer for the bound layout: whether each rank sends its part to the next
  // node (the one rank of a replica class that lives on one node only), empty: not planned.
  std::vector<char> node_sends_;
  // Where this rank's copy carries only some of its kinds: the runs of its buffers to pack
  // (model::full_run_groups form), and the packed part's runs per kind as JSON; empty: whole.
  std::vector<int64_t> node_pack_;
  std::string node_copy_runs_;
  // The writers of the copies other ranks send (one per directory: <root>/rank<sender>), kept
  // so that a copy costs a memory copy into a mapped slot, as the rank's own snapshot does.
  std::map<std::string, std::unique_ptr<ckpt::SnapshotWriter>> copy_writers_;
  int rank_ = 0;
  int local_rank_ = 0;
  int local_world_ = 1;
  std::atomic<int> generation_{-1};  // -1: not an elastic job
  bool leader_ = false;
  int snapshot_every_ = 1;
  int keep_checkpoints_ = 3;
  // This rank's snapshots (its directory under the agent's); null: no snapshots.
  std::unique_ptr<ckpt::SnapshotWriter> snapshots_;
  std::string restore_from_;
  // The state living in a snapshot slot (before_update): where, and whether that slot is
  // published (the next update then writes into the other one).
  struct Placed {
    float* params = nullptr;
    float* m = nullptr;
    float* v = nullptr;
    bool published = false;
  };
  bool placed_ = false;
  Placed live_;
  optim::StateSums sums_;  // of the update before the next snapshot
  std::unique_ptr<EventLog> events_;
  std::unique_ptr<ckpt::AsyncCheckpointWriter> writer_;
  bool writer_prepared_ = false;  // writer_->prepare asked for (after the first step)
  std::shared_ptr<comm::Store> store_;
  std::string membership_key_;
  std::unique_ptr<Heartbeat> heartbeat_;  // under an elastic agent
};

}  // namespace cann::train
