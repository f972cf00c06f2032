// `cann-train run` for a recommendation model (a spec with architecture dlrm or two_tower):
// the flags that only such a model takes, and the run itself.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "train/config.h"

namespace cann::cli {

struct RecsysFlags {
  std::string sparse_optimizer = "adagrad";
  float sparse_lr = 0.05f;
  long long eval_rows = 65536;
  std::string bad_lines = "fatal";
};

void add_recsys_flags(CLI::App* run, RecsysFlags* flags);
// A transformer run given a flag of a recommendation model: the error line, else "".
std::string refuse_recsys_flags(const CLI::App& run);
// Trains the recommendation model config.model names in this process; the exit status.
int run_recsys(const CLI::App& run, const train::TrainConfig& config, const RecsysFlags& flags);

}  // namespace cann::cli
