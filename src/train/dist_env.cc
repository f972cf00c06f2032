// Launcher environment detection.
#include "train/dist_env.h"

#include <cstdlib>
#include <string>

namespace cann::train {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

StatusOr<int> env_int(const char* name, int fallback, bool required) {
  const char* v = env(name);
  if (v == nullptr) {
    if (required)
      return InvalidArgument("environment variable " + std::string(name) + " is not set");
    return fallback;
  }
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 0 || n > (1 << 24))
    return InvalidArgument("environment variable " + std::string(name) + "='" + v +
                           "' is not a valid count");
  return static_cast<int>(n);
}

// Slurm writes tasks per node as "4" or "4(x2),3": the first number is this layout's common case.
int slurm_tasks_per_node() {
  const char* v = env("SLURM_NTASKS_PER_NODE");
  if (v == nullptr) v = env("SLURM_TASKS_PER_NODE");
  return v != nullptr ? std::atoi(v) : 0;
}

}  // namespace

StatusOr<std::optional<DistEnv>> detect_dist_env() {
  DistEnv e;
  if (env("RANK") != nullptr && env("WORLD_SIZE") != nullptr) {
    e.launcher = env("CANN_TRAIN_STORE") != nullptr ? "cann-train" : "torchrun";
    CANN_ASSIGN_OR_RETURN(e.rank, env_int("RANK", 0, true));
    CANN_ASSIGN_OR_RETURN(e.world_size, env_int("WORLD_SIZE", 1, true));
    CANN_ASSIGN_OR_RETURN(e.local_rank, env_int("LOCAL_RANK", e.rank, false));
    CANN_ASSIGN_OR_RETURN(e.local_world_size, env_int("LOCAL_WORLD_SIZE", e.world_size, false));
    CANN_ASSIGN_OR_RETURN(e.node_rank,
                          env_int("GROUP_RANK", e.rank / std::max(1, e.local_world_size), false));
  } else if (env("SLURM_PROCID") != nullptr && env("SLURM_NTASKS") != nullptr) {
    e.launcher = "slurm";
    CANN_ASSIGN_OR_RETURN(e.rank, env_int("SLURM_PROCID", 0, true));
    CANN_ASSIGN_OR_RETURN(e.world_size, env_int("SLURM_NTASKS", 1, true));
    CANN_ASSIGN_OR_RETURN(e.local_rank, env_int("SLURM_LOCALID", 0, false));
    CANN_ASSIGN_OR_RETURN(e.node_rank, env_int("SLURM_NODEID", 0, false));
    const int per_node = slurm_tasks_per_node();
    e.local_world_size = per_node > 0 ? per_node : e.world_size;
    if (const char* job = env("SLURM_JOB_ID")) e.job_id = std::string("slurm-") + job;
  } else if (env("OMPI_COMM_WORLD_RANK") != nullptr && env("OMPI_COMM_WORLD_SIZE") != nullptr) {
    e.launcher = "openmpi";
    CANN_ASSIGN_OR_RETURN(e.rank, env_int("OMPI_COMM_WORLD_RANK", 0, true));
    CANN_ASSIGN_OR_RETURN(e.world_size, env_int("OMPI_COMM_WORLD_SIZE", 1, true));
    CANN_ASSIGN_OR_RETURN(e.local_rank, env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0, false));
    CANN_ASSIGN_OR_RETURN(e.local_world_size,
                          env_int("OMPI_COMM_WORLD_LOCAL_SIZE", e.world_size, false));
    CANN_ASSIGN_OR_RETURN(e.node_rank, env_int("OMPI_COMM_WORLD_NODE_RANK",
                                               e.rank / std::max(1, e.local_world_size), false));
  } else {
    return std::optional<DistEnv>();
  }
  if (e.world_size < 1 || e.rank >= e.world_size)
    return InvalidArgument("launcher environment (" + e.launcher + ") gives rank " +
                           std::to_string(e.rank) + " of world size " +
                           std::to_string(e.world_size) + "; hint: check the launch command");
  if (e.local_world_size < 1 || e.local_rank >= e.local_world_size)
    return InvalidArgument("launcher environment (" + e.launcher + ") gives local rank " +
                           std::to_string(e.local_rank) + " of " +
                           std::to_string(e.local_world_size) + " on this node");
  if (const char* s = env("CANN_TRAIN_STORE")) e.store_url = s;
  if (const char* j = env("CANN_TRAIN_JOB")) e.job_id = j;
  if (const char* h = env("CANN_TRAIN_HOST_ID")) e.host_id = h;
  if (const char* a = env("CANN_TRAIN_COMM_ADDR")) e.comm_addr = a;
  if (const char* m = env("MASTER_ADDR")) e.master_addr = m;
  CANN_ASSIGN_OR_RETURN(e.master_port, env_int("MASTER_PORT", 0, false));
  if (e.job_id.empty()) {
    if (const char* id = env("TORCHELASTIC_RUN_ID")) e.job_id = id;
  }
  if (e.job_id.empty()) e.job_id = "job";
  if (env("CANN_TRAIN_GENERATION") != nullptr) {
    CANN_ASSIGN_OR_RETURN(e.generation, env_int("CANN_TRAIN_GENERATION", 0, true));
    CANN_ASSIGN_OR_RETURN(e.snapshot_every, env_int("CANN_TRAIN_SNAPSHOT_EVERY", 1, false));
    if (const char* d = env("CANN_TRAIN_SNAPSHOT_DIR")) e.snapshot_dir = d;
    if (const char* r = env("CANN_TRAIN_RESTORE_FROM")) e.restore_from = r;
    if (const char* n = env("CANN_TRAIN_NODE_SNAPSHOTS")) e.node_snapshots = n;
    if (const char* s = env("CANN_TRAIN_STRATEGY")) e.strategy = s;
    CANN_ASSIGN_OR_RETURN(e.node_id, env_int("CANN_TRAIN_NODE_ID", -1, false));
    CANN_ASSIGN_OR_RETURN(e.micro_batch, env_int("CANN_TRAIN_MICRO_BATCH", 0, false));
    if (const char* h = env("CANN_TRAIN_HEARTBEAT_INTERVAL")) {
      char* end = nullptr;
      e.heartbeat_interval_s = std::strtod(h, &end);
      if (*end != '\0' || !(e.heartbeat_interval_s > 0))
        return InvalidArgument("environment variable CANN_TRAIN_HEARTBEAT_INTERVAL='" +
                               std::string(h) + "' is not a positive number of seconds");
    }
  }
  return std::optional<DistEnv>(e);
}

}  // namespace cann::train
