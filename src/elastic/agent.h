// Agent: launches and supervises the workers of one node.
//
// Rendezvous. One node (nnodes == 1) needs nothing shared: the agent makes a file store in a
// fresh temporary directory. With nnodes > 1 every node's agent joins through `rdzv` (a redis
// URL): it takes a ticket from the counter "cann/<job>/arrivals"; ticket t makes it node
// (t-1) % nnodes of round (t-1) / nnodes, so rerunning a job under the same id starts a new
// round with fresh keys (Gloo keys are write-once). Every node runs nproc_per_node workers;
// global rank = node_rank * nproc_per_node + local_rank.
//
// Supervision. Worker output is prefixed "[rank N] " line by line (rank 0's redrawn progress
// line keeps working on a terminal); only rank 0 shows progress. When a worker exits with a
// non-zero status or a signal, the agent prints one line naming the rank, pid and cause, sends
// SIGTERM to the other workers, SIGKILL after `grace_s`, and returns non-zero. SIGINT/SIGTERM
// to the agent are forwarded as SIGTERM (workers checkpoint and stop). Workers die with the
// agent (PR_SET_PDEATHSIG).
//
// Elastic (`elastic`): on one node, failures do not end the job (with several fixed nodes, as a
// recommendation run's shards use it, each node's agent replaces its own processes and keeps
// its own generations; comm/job_keys.h). The agent watches waitpid and
// the workers' heartbeats (HeartbeatMonitor); on a dead, stopped or hung worker it records a
// failure_detected event, kills that worker, bumps the generation in the membership record
// cann/<job>/membership (with the snapshot copies each rank loads, ckpt/replicas.h) and starts
// a replacement. Survivors keep their processes: they rejoin the new generation themselves
// (train/trainer_rejoin.cc). After `max_restarts` restarts the next failure ends the job as
// above. LocalAgent (local_agent.h) is this agent; several elastic nodes (max_nodes > 1) are
// NodeAgent's (node_agent.h).
// See docs/elastic.md.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "monitor/alerts.h"
#include "monitor/server.h"

namespace cann::elastic {

struct AgentConfig {
  int nproc_per_node = 1;
  int nnodes = 1;
  std::string rdzv;     // store URL shared by the nodes' agents (required when nnodes > 1)
  std::string rdzv_id;  // job id; default: random
  double rdzv_timeout_s = 300.0;
  std::string comm_addr;  // address workers listen on; default: found from the route to rdzv
  std::string backend = "auto";
  std::vector<std::string> worker_args;  // arguments after the binary name, passed unchanged
  double grace_s = 10.0;
  // Rank 0's standard output unprefixed (a benchmark's table); errors stay prefixed.
  bool plain_rank0_stdout = false;
  // Monitoring: node 0's agent gathers every worker's step snapshots from the store and serves
  // the dashboard and /metrics; workers publish when CANN_TRAIN_MONITOR=1.
  bool monitor = false;
  monitor::ServerConfig monitor_server;
  monitor::AlertConfig alerts;
  // Elastic training. One node: failed workers are replaced in place. Several nodes
  // (max_nodes > 1, see node_agent.cc): the job runs on min_nodes..max_nodes nodes.
  bool elastic = false;
  int min_nodes = 1;
  int max_nodes = 1;
  int global_batch = 0;  // sequences per step; a generation's world size must divide it
  // Model parallelism across elastic nodes: node count -> the layout a generation of that size
  // trains (train/elastic_layouts.h), written into its membership record. Replaces the rule
  // above: only the counts named here are formed. Empty: the launch flags' layout at any size.
  std::map<int, std::string> node_layouts;
  double heartbeat_interval_s = 0.1;
  double heartbeat_timeout_s = 1.0;
  double start_timeout_s = 120.0;  // a worker must send its first heartbeat within this
  int max_restarts = 3;
  int snapshot_every = 1;
  std::string log_json;  // the step log the events go to (the workers' --log-json)
  // What every node launches, chosen by node 0's agent after the rendezvous and before any
  // worker starts, and taken from the store by the other nodes' agents (`run --strategy auto`
  // across nodes: node 0 plans, so every node runs the same layout). Unset: nproc_per_node
  // workers of worker_args on every node. The multi-node elastic agent asks the node with id 0
  // (the first to join) once, before the first generation; every generation and every node that
  // joins later launches the same.
  struct NodeLaunch {
    int nproc_per_node = 1;
    std::vector<std::string> worker_args;
    int global_batch = 0;  // multi-node elastic: as global_batch below
    std::map<int, std::string> node_layouts;  // multi-node elastic: as node_layouts below
  };
  std::function<StatusOr<NodeLaunch>()> node0_decides;
  // Elastic on one node: called on the agent's thread each time it replaces failed workers,
  // after the replacements' generation is published.
  struct WorkerFault {
    int rank = 0;               // the failed rank (-1: the whole generation was replaced)
    std::string cause;          // what the agent saw
    int generation = 0;         // the new generation
    int replaced = 0;           // workers started again
    std::string restored_from;  // where the new generation's state comes from
  };
  std::function<void(const WorkerFault&)> on_fault;
  // Elastic on one node: why a failed rank is not replaced ("" when it is; unset: every rank
  // is). A failure of such a rank, or a hang that would replace every rank, ends the job as
  // without --elastic, with this reason in its line.
  std::function<std::string(int rank)> irreplaceable;
  // What a replacement restores from, when not the workers' in-memory snapshots (the restart
  // line says it); empty: the snapshots.
  std::string restores_from;
};

// Runs the workers to completion. Returns the process exit status for the agent: 0 when every
// worker succeeded, 130 when interrupted, otherwise 1 (or 2 when a worker reported a usage
// error, so `cann-train run --bad-flag --nproc-per-node 2` still exits 2).
StatusOr<int> run_agent(const AgentConfig& config);

// The multi-node elastic agent (elastic with max_nodes > 1; node_agent.cc): membership of nodes
// in the store, generations, scaling. Same exit statuses as run_agent.
StatusOr<int> run_node_agent(const AgentConfig& config);

}  // namespace cann::elastic
