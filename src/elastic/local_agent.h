// LocalAgent: the agent of a job whose nodes stay fixed (agent.h describes the rendezvous, the
// supervision and one-node elastic recovery; NodeAgent, node_agent.h, is the multi-node
// elastic one). A run is: rendezvous with the other nodes' agents, start the monitor (node 0),
// spawn the node's workers, then supervise them until they are done: reap exits, judge
// heartbeats, restart a generation under --elastic, or stop the rest after a failure.
//
// Thread safety: one thread; the signal handler only sets an atomic.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ckpt/replicas.h"
#include "comm/store.h"
#include "core/event_log.h"
#include "core/status.h"
#include "elastic/agent.h"
#include "elastic/heartbeat_monitor.h"
#include "elastic/rendezvous.h"
#include "elastic/worker_process.h"
#include "monitor/job_monitor.h"

namespace cann::elastic {

class LocalAgent {
 public:
  explicit LocalAgent(const AgentConfig& config) : config_(config), P_(config.nproc_per_node) {}
  ~LocalAgent();
  LocalAgent(const LocalAgent&) = delete;
  LocalAgent& operator=(const LocalAgent&) = delete;

  // Runs the workers to completion; the exit status run_agent returns.
  StatusOr<int> run();

 private:
  // This node's place in the job and the job's store (a temporary file store on one node).
  Status rendezvous();
  // config_.node0_decides: node 0 chooses the processes per node and the worker arguments and
  // publishes them (or its error); the other nodes wait for them.
  Status agree_on_launch(comm::Store& store);
  // Node 0 gathers the workers' snapshots and serves the dashboard.
  Status start_monitor();
  // --elastic: the snapshot root, the store, the event log and the heartbeat monitor.
  Status start_elastic();
  // Starts local worker l of the current generation (a replacement loads plan's copies).
  Status spawn(int l, const ckpt::ReplicaPlan* plan);
  // The membership record: which generation is current, who is in it, and which snapshot
  // copies each rank loads (survivors read theirs here; replacements get them in the
  // environment).
  Status publish_membership(const ckpt::ReplicaPlan* plan);
  // Elastic recovery: the failed worker (with `whole`, every worker of the node) replaced by
  // a fresh process of the next generation; survivors rejoin it themselves.
  Status restart_generation(int rank, const std::string& cause, bool whole);
  // One round of supervision; false once every worker has exited and its output is drained.
  StatusOr<bool> supervise();
  // Under --elastic: heartbeats, and a restart for a failure; true when one was made.
  StatusOr<bool> recover(bool failure_seen, const Worker* first_failed);
  // The exit status, with the line that names the failed rank.
  int outcome() const;

  AgentConfig config_;
  int P_;  // workers on this node (node 0 may choose it: agree_on_launch)
  std::string job_, store_url_, temp_dir_, comm_addr_;
  NodeAssignment node_;
  int world_ = 0;
  int threads_per_worker_ = 1;
  bool tty_ = false;
  std::unique_ptr<monitor::JobMonitor> job_monitor_;
  bool registered_ = false;  // with debug::register_job
  // Elastic state: snapshots in memory, events, heartbeats, the membership record.
  std::string snapshot_root_;
  std::shared_ptr<comm::Store> store_;
  EventLog events_;
  std::unique_ptr<HeartbeatMonitor> heartbeats_;
  std::string job_keys_;
  int generation_ = 0;
  int restarts_ = 0;
  bool rendezvous_pending_ = false;
  double failure_at_ = 0.0;  // steady time the last failure was detected
  std::vector<Worker> workers_;
  // Supervision.
  bool any_failure_ = false;
  double settle_deadline_ = 0.0;
  int exits_ = 0;
  double stop_deadline_ = 0.0;
  bool interrupted_ = false;
};

}  // namespace cann::elastic
