// `cann-train run` for a recommendation model (a spec with architecture dlrm or two_tower):
// the flags that only such a model takes, and the run: in this process, or as W workers and S
// parameter-server shards started by the agent (ranks [0, W/nnodes) of every node are workers,
// the next S/nnodes its shards).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "elastic/agent.h"
#include "train/config.h"
#include "train/distributed.h"

namespace cann::cli {

struct RecsysFlags {
  std::string sparse_optimizer = "adagrad";
  float sparse_lr = 0.05f;
  long long eval_rows = 65536;
  std::string bad_lines = "fatal";
  int ps_shards = 0;
  int ps_staleness = -1;  // -1: synchronous
  int ps_admit_after = 1;
  int ps_evict_after = 0;
};

void add_recsys_flags(CLI::App* run, RecsysFlags* flags);
// A transformer run given a flag of a recommendation model: the error line, else "".
std::string refuse_recsys_flags(const CLI::App& run);
// Trains the recommendation model config.model names. `agent` carries the launch as run's
// flags set it (workers per node, nodes, rendezvous, arguments); `comm` the dense group's
// backend and timeout. Returns the exit status.
int run_recsys(const CLI::App& run, const train::TrainConfig& config, const RecsysFlags& flags,
               elastic::AgentConfig agent, const train::CommConfig& comm);

}  // namespace cann::cli
