// `run --plan FILE`: trains a plan written by `search --out` or `simulate --out`.
//
// The plan sets the model, the strategy, the global batch and the sequence length, and the
// processes per node when --nproc-per-node is not given; a flag that disagrees with it is an
// error. The model must be the one planned for (its fingerprint, plan_file.h) and the launch's
// processes the plan's devices; with --replan another world is planned again on the plan's
// cluster resized to it (same global batch, layouts the engine trains), and the new plan is
// written beside the old one. At the end of the run its leader writes the measured figures into
// the plan (--plan-out FILE: into FILE instead), next to the predicted ones.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "train/config.h"
#include "train/trainer.h"

namespace CLI {
class App;
}

namespace cann::cli {

struct PlanFlags {
  std::string path;
  bool replan = false;
  std::string out;
};

void add_plan_flags(CLI::App* run, PlanFlags* flags);

// Applies flags.path to `config` (nothing when it is empty). `nproc_per_node` is set from the
// plan when `nproc_given` is false; `world` > 0 is a worker's world size (its launcher's
// processes), else nproc_per_node x nnodes. On success flags.out names the plan the run records
// into; after a re-plan flags.path names the new plan, which the workers are given.
Status apply_plan(CLI::App* run, PlanFlags* flags, train::TrainConfig* config,
                  int* nproc_per_node, bool nproc_given, int nnodes, int world);

// The workers' arguments: the launcher's, with the plan flags replaced by the resolved plan
// (after a re-plan, the new one) and where to record.
std::vector<std::string> plan_worker_args(const std::vector<std::string>& args,
                                          const PlanFlags& flags);

// The run's leader: the measured figures of `summary` into flags.out.
Status record_plan_run(const PlanFlags& flags, const train::TrainConfig& config,
                       const train::RunSummary& summary, int world);

}  // namespace cann::cli
