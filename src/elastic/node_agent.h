// The multi-node elastic agent: one per node, all meeting in the store (node_membership.h).
//
// Every agent beats under cann/<job>/agents/<id> from its own thread and connection, watches its
// own workers (waitpid and their heartbeats, as on one node) and the other agents' beats. The
// leader (the lowest-numbered live member) writes each new generation of the membership record:
//   - a member node is gone (its agent's beat is stale: the machine died, or its link is down):
//     the live members go on without it, with waiting nodes admitted up to max_nodes;
//   - waiting nodes and room below max_nodes, or bounds lowered by `cann-train scale`: a
//     graceful generation, whose workers stop together at a step boundary (SIGTERM; the stop is
//     agreed over the ranks each step), so no work is redone.
// An agent whose own worker fails kills its other workers and, unless the leader has started a
// new generation within a grace period (a peer node's death makes its workers fail first),
// proposes a restart generation itself. Every record is written with compare_set against the
// record it replaces, so concurrent proposals cannot both win.
//
// On a failure generation, a member node whose workers all left the old generation and wait for
// the next (each said so under rejoining/rank<r> when its collective failed) keeps their
// processes: they find their new rank in the record and rebuild the run themselves
// (train/trainer_rejoin.cc). On a graceful one (admission, scaling down) a node that stays asks
// its workers with SIGUSR1 to stop at the agreed step boundary and rejoin, and keeps them once
// they all wait; leaving nodes' workers get SIGTERM and exit. Otherwise (this node's own worker
// failed, a worker still blocked in a collective, or one that does not answer within the grace)
// the agent stops its workers and starts fresh ones with the new rank, world size and
// generation. Either way they load the committed step from the
// in-memory snapshots of this node or, when this node lacks it (it just joined), receive it from a
// node that holds it over the new group (train/peer_restore.cc). A member dropped by a scale-down
// exits 0; a node not admitted waits. Failure generations count against max_restarts; the next one
// ends the job (exit 1).
//
// Store outages: every store operation of the loop may fail; while the store is unreachable no
// beat is judged stale and no decision is made, and a record that the restarted store lost is
// written back from this agent's copy. An outage longer than kStoreOutageSeconds ends the job.
//
// The agent is one NodeAgent: node_agent.cc runs the loop, the workers and the generations;
// node_leader.cc reads the shared state and makes the leader's decisions.
//
// Thread safety: one thread (the loop), except the beat thread, which owns its own store
// connection and touches only beat_stop_ and host_.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/store.h"
#include "core/event_log.h"
#include "elastic/agent.h"
#include "elastic/heartbeat_monitor.h"
#include "elastic/node_membership.h"
#include "elastic/worker_process.h"

namespace cann::elastic {

// Longest store outage survived; store operations of the loop time out after kStoreOpSeconds.
inline constexpr double kStoreOutageSeconds = 30.0;
inline constexpr double kStoreOpSeconds = 2.0;
// Before the first generation, once min_nodes agents are live, how long to wait for more; and
// how long a generation must have settled before the leader scales it.
inline constexpr double kLastCallSeconds = 2.0;

struct Liveness {
  std::string value;
  double changed_at = 0.0;  // by this agent's clock
};

class NodeAgent {
 public:
  explicit NodeAgent(const AgentConfig& c) : config_(c), P_(c.nproc_per_node) {}
  ~NodeAgent();
  StatusOr<int> run();

 private:
  Status setup();
  // Reads the shared state; false while the store does not answer.
  bool observe(double now);
  bool live(int id, double now) const;
  std::vector<int> live_ids(double now) const;
  int leader(double now) const;
  // Writes `next` over the record read last; true when it won.
  bool propose(NodeRecord next);
  void lead(double now);
  void on_local_failure(int rank, const std::string& cause, double now);
  void kill_workers(int sig);
  bool any_running() const;
  Status spawn_generation(double now);
  // A failure generation this node stays in, whose workers all wait to rejoin it (each left
  // its generation when a collective failed and said so under rejoining/rank<r>): they keep
  // their processes and rebuild their groups themselves (train/trainer_rejoin.cc). False when
  // any of them did not (a worker blocked in a collective on a peer that vanished without a
  // closed connection), which is then replaced as before.
  bool workers_rejoin() const;
  // This node is a member of the new generation with the same workers, none of them failed.
  bool stays_whole() const;
  void keep_workers(double now);
  // What a generation this node's workers take part in starts with, spawned or kept.
  void begin_generation(double now);
  void check_rendezvous(double now);
  void event(const std::string& name, int rank, int generation, const std::string& detail);
  void say(const std::string& line);

  AgentConfig config_;
  int P_;  // workers per node (node 0 may choose it: agree_on_launch)
  std::string job_, keys_, url_, comm_addr_, host_;
  bool registered_ = false;  // in the machine's job registry (debug/job_registry.h)
  std::shared_ptr<comm::Store> store_;
  int node_id_ = -1;
  std::thread beat_thread_;
  std::atomic<bool> beat_stop_{false};
  std::map<int, Liveness> agents_;
  int max_id_ = 0;
  std::optional<NodeRecord> record_;
  std::string record_raw_;
  NodeBounds bounds_;
  std::string bounds_raw_;
  std::string snapshot_root_;
  EventLog events_;
  std::unique_ptr<HeartbeatMonitor> heartbeats_;
  std::vector<Worker> workers_;
  int my_gen_ = -1;    // generation of the workers this agent runs (or last ran)
  int seen_gen_ = -1;  // newest generation seen in the record
  bool was_member_ = false;
  bool completed_ = false;         // this node's workers finished the training
  double local_failure_at_ = 0.0;  // when this node's workers failed; 0: they did not
  double change_at_ = 0.0;         // when the current generation was decided
  double stop_deadline_ = 0.0;     // SIGKILL stopping workers after this
  bool regrouping_ = false;        // workers asked (SIGUSR1) to stop and rejoin a graceful one
  double store_down_since_ = 0.0;
  double min_reached_at_ = 0.0;  // first generation: when min_nodes agents were live
  double short_since_ = 0.0;     // fewer than min_nodes live members since
  double watch_since_ = 0.0;     // first answer of the store
  bool rendezvous_pending_ = false;
};

}  // namespace cann::elastic
