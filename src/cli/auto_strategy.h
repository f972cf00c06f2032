// `run --strategy auto`: the planner picks how this machine trains the model.
//
// The candidates are every layout the engine can run on this machine's cores: one process
// using all of them as threads (every micro-batch size that divides the global batch), and
// every split over one single-threaded process per core that the engine trains: the planner's
// search with its engine-supported-only option (plan/search.h, plan/engine_support.h), one
// call. Each is priced by the planner on the machine's calibrated cluster spec ('local',
// measured by `bench calibrate`, which runs first when there is none); the one-process
// candidate on a single device whose GEMM rate is the calibrated per-core rate times the
// speed-up threads give this GEMM here (measured on the spot), memory and bandwidth times the
// cores. The fastest candidate that fits in memory wins.
#pragma once

#include <string>

#include "core/status.h"
#include "plan/cluster.h"
#include "plan/strategy.h"
#include "train/config.h"

namespace cann::cli {

struct AutoChoice {
  int processes = 1;
  int threads = 1;  // per process
  // For `run --strategy`: the chosen split; for one process the unset strategy (the whole
  // batch at once).
  plan::Strategy strategy = {.dp = 0, .mbs = 0};
  std::string report;  // lines for the user: the choice, its prediction, the runner-up
};

// `cores`: the devices to plan for (this machine's cores). Across `nodes` > 1 machines like
// this one, `inter_node` is the link between them as `bench tune` measured it (comm.yaml's
// links.inter_node): the candidates are then one process per node using every core, and one
// single-threaded process per core, each split over all nodes by the same engine-only search.
// With elastic_nodes (`--elastic` across nodes), the layouts such a job trains at its largest
// size (plan::EngineShape::elastic_nodes); the caller then plans the other sizes from the
// choice (train/elastic_layouts.h).
StatusOr<AutoChoice> choose_auto_strategy(const train::TrainConfig& config, int cores,
                                          int nodes = 1, const plan::LinkSpec* inter_node = nullptr,
                                          bool elastic_nodes = false);

}  // namespace cann::cli
