// Registration and validation of the fault-tolerance flags.
#include "cli/resilience_flags.h"

#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/local_cluster.h"
#include "cli/validators.h"
#include "core/threads.h"
#include "elastic/agent.h"
#include "elastic/node_membership.h"
#include "model/spec.h"
#include "plan/cluster.h"
#include "plan/strategy.h"
#include "train/config.h"
#include "train/elastic_layouts.h"

namespace cann::cli {

void add_resilience_flags(CLI::App* run, train::TrainConfig* config, ResilienceFlags* flags) {
  const char* kGroup = "Fault tolerance";
  run->add_option("--checkpoint-bandwidth", config->checkpoint_bandwidth_mb,
                  "Cap in MB/s on the background checkpoint write (0: none)")
      ->check(kNonNegative)
      ->group(kGroup);
  run->add_flag("--elastic", flags->elastic,
                "Survive worker failures: a dead, stopped or hung worker is detected and the "
                "workers restart from the last committed step held in memory; with --nnodes MIN:MAX "
                "nodes may fail, join and leave between MIN and MAX")
      ->group(kGroup);
  run->add_option("--heartbeat-interval", flags->heartbeat_interval_s,
                  "Seconds between a worker's heartbeats (--elastic)")
      ->check(kPositive)
      ->group(kGroup)
      ->capture_default_str();
  run->add_option("--heartbeat-timeout", flags->heartbeat_timeout_s,
                  "Seconds without a heartbeat after which a worker counts as hung (--elastic)")
      ->check(kPositive)
      ->group(kGroup)
      ->capture_default_str();
  run->add_option("--max-restarts", flags->max_restarts,
                  "Restarts after failures before the job gives up (--elastic)")
      ->check(kNonNegative)
      ->group(kGroup)
      ->capture_default_str();
  run->add_option("--snapshot-every", flags->snapshot_every,
                  "Steps between in-memory snapshots of the run state (--elastic)")
      ->check(kPositive)
      ->group(kGroup)
      ->capture_default_str();
}

std::string check_resilience_flags(const ResilienceFlags& flags) {
  if (flags.heartbeat_timeout_s <= flags.heartbeat_interval_s)
    return "--heartbeat-timeout " + std::to_string(flags.heartbeat_timeout_s) +
           " must exceed --heartbeat-interval " + std::to_string(flags.heartbeat_interval_s) +
           "; hint: a timeout of 5 to 10 intervals tolerates a late beat";
  return "";
}

std::string check_elastic_nodes(const train::TrainConfig& config, int min_nodes, int max_nodes,
                                int nproc_per_node, int* global_batch,
                                std::map<int, std::string>* layouts,
                                const plan::LinkSpec* inter_node) {
  const int gbs = config.strategy.gbs > 0 ? config.strategy.gbs : config.batch_size;
  *global_batch = gbs;
  if (layouts != nullptr && config.strategy.model_parallel()) {
    StatusOr<model::ModelSpec> spec = model::load_model_spec(config.model);
    if (!spec.ok()) return spec.status().message();
    const train::ElasticLayouts planned = train::plan_elastic_layouts(
        config, *spec, nproc_per_node, min_nodes, max_nodes,
        [&](int) -> StatusOr<plan::ClusterSpec> {
          CANN_ASSIGN_OR_RETURN(
              plan::ClusterSpec c,
              local_cluster(nproc_per_node, hardware_threads(), "elastic layouts", config.quiet));
          if (inter_node != nullptr) c.inter_node = *inter_node;
          return c;
        });
    std::string lines, why;
    for (const std::string& line : planned.lines) {
      lines += "\n  " + line;
      why += (why.empty() ? "" : "; ") + line;
    }
    if (planned.layouts.empty())
      return "--elastic --nnodes " + std::to_string(min_nodes) + ":" + std::to_string(max_nodes) +
             " with --strategy " + plan::strategy_brief(config.strategy) +
             ": no node count in the range has a layout the engine trains (" + why +
             "); hint: pick a --batch-size and --nproc-per-node that the split divides";
    if (!config.quiet)
      std::printf("elastic layouts, planned for every node count:%s\n", lines.c_str());
    *layouts = planned.layouts;
    return "";
  }
  elastic::NodeBounds bounds;
  bounds.min_nodes = min_nodes;
  bounds.max_nodes = max_nodes;
  if (elastic::smallest_admissible(bounds, nproc_per_node, gbs) == 0)
    return "--nnodes " + std::to_string(min_nodes) + ":" + std::to_string(max_nodes) +
           " with --nproc-per-node " + std::to_string(nproc_per_node) +
           ": no node count in the range gives a world size that divides the global batch " +
           std::to_string(gbs) + "; hint: pick a --batch-size that is a multiple of " +
           std::to_string(max_nodes * nproc_per_node);
  return "";
}

void apply_resilience_flags(const ResilienceFlags& flags, const train::TrainConfig& config,
                            elastic::AgentConfig* agent) {
  agent->elastic = flags.elastic;
  agent->heartbeat_interval_s = flags.heartbeat_interval_s;
  agent->heartbeat_timeout_s = flags.heartbeat_timeout_s;
  agent->max_restarts = flags.max_restarts;
  agent->snapshot_every = flags.snapshot_every;
  agent->log_json = config.log_json;
}

}  // namespace cann::cli
