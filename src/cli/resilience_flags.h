// The fault-tolerance flags of `cann-train run`: elastic supervision (--elastic, heartbeats,
// restarts, in-memory snapshots) and asynchronous checkpoint pacing. Kept apart from
// run_command.cc so that file stays a list of the training flags.
#pragma once

#include <map>
#include <string>

namespace CLI {
class App;
}
namespace cann::train {
struct TrainConfig;
}
namespace cann::elastic {
struct AgentConfig;
}
namespace cann::plan {
struct LinkSpec;
}

namespace cann::cli {

struct ResilienceFlags {
  bool elastic = false;
  double heartbeat_interval_s = 0.1;
  double heartbeat_timeout_s = 1.0;
  int max_restarts = 3;
  int snapshot_every = 1;
};

void add_resilience_flags(CLI::App* run, train::TrainConfig* config, ResilienceFlags* flags);

// Checks the combination; returns an error line for the user, or "" when it is fine.
std::string check_resilience_flags(const ResilienceFlags& flags);

// --elastic across nodes (--nnodes MIN:MAX): a generation's world size (nodes x nproc_per_node)
// must divide the global batch, so that every rank keeps an equal share of the same global
// batch. Sets *global_batch; returns an error line when no node count in [min, max] fits.
// Under model parallelism (`layouts` given and the strategy's tp, pp, cp or ep > 1) the layout
// of each node count is planned instead (train/elastic_layouts.h; the planner prices the
// machine's calibrated spec, the nodes joined by `inter_node` where given) and printed unless
// config.quiet; the error line then says that no count has one.
std::string check_elastic_nodes(const train::TrainConfig& config, int min_nodes, int max_nodes,
                                int nproc_per_node, int* global_batch,
                                std::map<int, std::string>* layouts = nullptr,
                                const plan::LinkSpec* inter_node = nullptr);

// Fills the agent's elastic settings.
void apply_resilience_flags(const ResilienceFlags& flags, const train::TrainConfig& config,
                            elastic::AgentConfig* agent);

}  // namespace cann::cli
