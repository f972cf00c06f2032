// Where a worker learns its place in a job: rank, world size, local rank, and how to reach the
// others. Read from the environment, in this order of precedence:
//   1. cann-train's own agent: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE plus
//      CANN_TRAIN_STORE (store URL), CANN_TRAIN_JOB (job id), CANN_TRAIN_HOST_ID (which ranks
//      share a host), CANN_TRAIN_COMM_ADDR (address this worker listens on);
//   2. torchrun-style: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT;
//   3. Slurm: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE (or
//      SLURM_TASKS_PER_NODE), SLURM_NODEID, SLURM_JOB_ID;
//   4. Open MPI: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
//      OMPI_COMM_WORLD_LOCAL_SIZE.
// Launchers 2-4 do not provide a store: the worker uses --rdzv/CANN_TRAIN_STORE when given,
// else a TCP store hosted by rank 0 at MASTER_ADDR:MASTER_PORT.
#pragma once

#include <optional>
#include <string>

#include "core/status.h"

namespace cann::train {

struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  std::string launcher;   // "cann-train", "torchrun", "slurm", "openmpi"
  std::string store_url;  // empty: derive from master_addr/master_port
  std::string master_addr;
  int master_port = 0;
  std::string job_id;
  std::string host_id;    // empty: the backend's default (hostname + boot id)
  std::string comm_addr;  // empty: the backend's default
  // Set by cann-train's agent under --elastic (see docs/elastic.md):
  int generation = -1;          // CANN_TRAIN_GENERATION; -1: not an elastic job
  std::string snapshot_dir;     // CANN_TRAIN_SNAPSHOT_DIR: where ranks keep in-memory snapshots
  std::string restore_from;     // CANN_TRAIN_RESTORE_FROM: snapshot candidates, ';'-separated
  // CANN_TRAIN_NODE_SNAPSHOTS (multi-node elastic): the node's snapshot root, every generation's
  // copies under it; a new generation agrees on the committed step over the ranks and receives
  // it from a peer when this node lacks it (peer_restore.cc).
  std::string node_snapshots;
  // CANN_TRAIN_MICRO_BATCH (multi-node elastic): sequences per forward/backward, fixed for the
  // job, so a smaller world keeps the global batch through more accumulation micro-steps.
  int micro_batch = 0;
  // CANN_TRAIN_NODE_ID (multi-node elastic): this node's id in the membership record, where a
  // survivor finds its rank in the next generation (trainer_rejoin.cc); -1 when not given.
  int node_id = -1;
  // CANN_TRAIN_STRATEGY (multi-node elastic under model parallelism): the layout this
  // generation trains, in place of --strategy (train/elastic_layouts.h).
  std::string strategy;
  double heartbeat_interval_s = 0.1;  // CANN_TRAIN_HEARTBEAT_INTERVAL
  int snapshot_every = 1;             // CANN_TRAIN_SNAPSHOT_EVERY
  bool elastic() const { return generation >= 0; }
};

// Reads the environment. nullopt when no launcher variables are set (a plain single process).
// Inconsistent variables (rank >= world size, non-numbers) are an error naming the variable.
StatusOr<std::optional<DistEnv>> detect_dist_env();

}  // namespace cann::train
