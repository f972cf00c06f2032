// World group construction.
#include "train/distributed.h"

namespace cann::train {

StatusOr<std::unique_ptr<comm::Group>> make_world_group(const DistEnv& env,
                                                        const CommConfig& config,
                                                        std::shared_ptr<comm::Store>* store_out) {
  std::string url = env.store_url;
  if (url.empty()) {
    if (env.master_addr.empty() || env.master_port <= 0)
      return InvalidArgument(
          "launched by " + env.launcher +
          " without a rendezvous store; hint: pass --rdzv redis://HOST:PORT (or set "
          "CANN_TRAIN_STORE), or set MASTER_ADDR and MASTER_PORT");
    url = "tcp://" + env.master_addr + ":" + std::to_string(env.master_port) +
          (env.rank == 0 ? "?server=1" : "");
  }
  const auto timeout = std::chrono::milliseconds(static_cast<long>(config.timeout_s * 1000));
  CANN_ASSIGN_OR_RETURN(std::shared_ptr<comm::Store> store, comm::open_store(url, timeout));
  if (store_out != nullptr) *store_out = store;
  comm::GroupConfig g;
  g.backend = config.backend;
  if (g.backend == "auto")
    g.backend = env.local_world_size == env.world_size ? "shm" : "hierarchical";
  g.store = std::move(store);
  // Gloo keys are write-once: each elastic generation rebuilds the group under its own prefix.
  g.prefix = "cann/" + env.job_id + "/world";
  if (env.generation > 0) g.prefix += "/gen" + std::to_string(env.generation);
  g.rank = env.rank;
  g.size = env.world_size;
  g.timeout = timeout;
  g.debug_checks = config.debug;
  g.transport = config.transport;
  g.parallel_contexts = config.channels;
  g.split_bytes = config.split_bytes;
  g.allreduce_rules = config.allreduce_rules;
  g.hostname = env.comm_addr;
  g.host_id = env.host_id;
  return comm::create_group(g);
}

Status leave_together(comm::Store& store, const DistEnv& env, const std::string& what,
                      std::chrono::milliseconds timeout) {
  const std::string done = "cann/" + env.job_id + "/" + what + "-done/rank";
  CANN_RETURN_IF_ERROR(store.set(done + std::to_string(env.rank), "1"));
  std::vector<std::string> keys;
  for (int r = 0; r < env.world_size; ++r) keys.push_back(done + std::to_string(r));
  return store.wait(keys, timeout);
}

}  // namespace cann::train
