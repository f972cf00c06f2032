// create_group: validation common to all backends, then dispatch by name.
#include "comm/backends.h"

#include <unistd.h>

#include <fstream>

namespace cann::comm {

std::string default_host_id() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string boot;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, boot);
  return std::string(host) + "/" + boot;
}

const char* allreduce_algorithm_name(AllreduceAlgorithm a) {
  return a == AllreduceAlgorithm::kDirect ? "direct" : "ring";
}

AllreduceAlgorithm allreduce_algorithm_for(const std::vector<AllreduceRule>& rules, size_t bytes) {
  for (const AllreduceRule& r : rules)
    if (bytes < r.below_bytes || r.below_bytes == SIZE_MAX) return r.algorithm;
  return AllreduceAlgorithm::kRing;
}

StatusOr<std::unique_ptr<Group>> create_group(const GroupConfig& config) {
  if (config.size < 1 || config.rank < 0 || config.rank >= config.size)
    return InvalidArgument("rank " + std::to_string(config.rank) + " is outside a group of size " +
                           std::to_string(config.size));
  if (!config.store) return InvalidArgument("create_group needs a store for rendezvous");
  if (config.prefix.empty())
    return InvalidArgument("create_group needs a fresh key prefix (Gloo keys are write-once)");
  GroupConfig c = config;
  if (c.host_id.empty()) c.host_id = default_host_id();
  StatusOr<std::unique_ptr<Group>> group = InvalidArgument("");
  if (c.backend == "gloo") {
    group = make_gloo_group(c);
  } else if (c.backend == "shm") {
    group = make_shm_group(c);
  } else if (c.backend == "hierarchical") {
    group = make_hierarchical_group(c);
  } else {
    return InvalidArgument("unknown communication backend '" + c.backend +
                           "'; hint: use gloo, shm or hierarchical");
  }
  if (group.ok()) {
    (*group)->set_name(c.name);
    (*group)->set_default_timeout(c.timeout);
  }
  return group;
}

}  // namespace cann::comm
