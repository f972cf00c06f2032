// `cann-train bench comm`: collective bandwidth of cann-train's backends, nccl-tests style,
// next to raw Gloo's own ring all-reduce measured by the same processes in the same run.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "train/dist_env.h"

namespace cann::cli {

struct CommBenchConfig {
  std::vector<std::string> backends;  // shm, gloo, hierarchical
  std::vector<std::string> ops;       // allreduce, allgather, reduce_scatter, alltoall
  size_t min_bytes = 4 << 10;
  size_t max_bytes = 256 << 20;
  int factor = 4;
  double seconds_per_size = 0.2;  // timing budget per (backend, op, size)
  bool json = false;
  bool raw_gloo = true;
  double timeout_s = 60.0;
};

// Parses "4K:256M" into bytes; K/M/G are powers of 1024.
Status parse_size_range(const std::string& text, size_t* min_bytes, size_t* max_bytes);

// The worker side: every rank runs this; rank 0 prints the table (or JSON) to stdout.
Status run_comm_bench_worker(const CommBenchConfig& config, const train::DistEnv& env);

}  // namespace cann::cli
