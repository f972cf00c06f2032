// `cann-train bench tune`: measures the collectives of this job's topology under every setting
// the engine has (backend; Gloo channels, split size and all-reduce algorithm by size) and the
// gradient bucket size against the model's own backward, and writes the choices to comm.yaml
// (train/comm_config.h), which `cann-train run --comm-config` trains with.
//
// How it chooses (every rank measures, and every figure is the slowest rank's, so all ranks
// reach the same choices):
//   1. Each fp32 collective the engine trains with (all-reduce, reduce-scatter, all-gather,
//      all-to-all) at each size, validated before it is timed, for each backend that fits the
//      topology (shm and gloo on one node; hierarchical and gloo across nodes), and for
//      gloo-based ones each channel count (large messages always split), the all-reduce under
//      both of its algorithms (ring, direct).
//   2. Per backend and channel count, the best the engine can do at each size: unsplit (one
//      channel) below the size from which splitting saves time (summed over the collectives,
//      each by its share) at every larger size, split above; for the all-reduce
//      the faster algorithm at each size (the one of the size below unless the other is over 5%
//      faster, so noise does not flip it), rows merged where it does not change. The setting
//      whose mean ratio to the fastest measured time, over every collective and size, is
//      smallest is chosen.
//   3. The model trains a few steps with each bucket size, data-parallel over every rank, with
//      the chosen setting, in two rounds (ascending, then descending; the second only for the
//      engine's rule and the sizes within 10% of the fastest first trial); the median step
//      over both (the first two of each run left out) picks the bucket size.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "train/config.h"
#include "train/dist_env.h"

namespace cann::cli {

struct TuneConfig {
  size_t min_bytes = size_t{4} << 10;
  size_t max_bytes = size_t{64} << 20;
  int factor = 4;
  double seconds_per_size = 0.1;
  std::vector<int> channels = {1, 2, 4};
  std::vector<double> buckets_mb = {1, 2, 4, 8, 16, 25, 64};
  int bucket_steps = 10;  // 0: keep run's bucket size
  std::string output = "comm.yaml";
  std::string transport = "tcp";
  double timeout_s = 60.0;
  train::TrainConfig train;  // the model, batch and data the bucket trials train
};

// The worker side: every rank runs it; rank 0 prints the tables and the first rank of every
// node writes the same comm.yaml.
Status run_tune_worker(const TuneConfig& config, const train::DistEnv& env);

}  // namespace cann::cli
