// `cann-train bench comm`: collective bandwidth of cann-train's backends, nccl-tests style,
// next to raw Gloo's own ring all-reduce measured by the same processes in the same run.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "comm/group.h"
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

// Elements per rank of `op` on a whole buffer of `bytes` (fp32): all of it for the all-reduce,
// one of P blocks for the all-gather, reduce-scatter and all-to-all (at least 1).
size_t per_rank_count(const std::string& op, size_t bytes, int P);

// "4K", "64M", "1G", "512": sizes as the tables print them (powers of 1024).
std::string human_bytes(size_t bytes);

// Fills `in` so every output element of `op` (allreduce, allgather, reduce_scatter, alltoall;
// fp32, `count` per rank) has one known value, runs it once, and checks every element.
Status validate_collective(comm::Group& g, const std::string& op, size_t count,
                           std::vector<float>& in, std::vector<float>& out,
                           const comm::Options& opts);

// Runs `op` once over `count` fp32 elements per rank (`in`/`out` sized as validate_collective
// leaves them) and waits for it.
Status run_collective(comm::Group& g, const std::string& op, size_t count, std::vector<float>& in,
                      std::vector<float>& out, const comm::Options& opts);

// Average seconds per call of `call` (a collective over g) over enough calls to fill `budget`
// seconds, after a warm-up call; the slowest rank's figure, the same on every rank.
StatusOr<double> time_collective(comm::Group& g, const std::function<Status()>& call,
                                 double budget);

// Parses "4K:256M" into bytes; K/M/G are powers of 1024.
Status parse_size_range(const std::string& text, size_t* min_bytes, size_t* max_bytes);

// The worker side: every rank runs this; rank 0 prints the table (or JSON) to stdout.
Status run_comm_bench_worker(const CommBenchConfig& config, const train::DistEnv& env);

}  // namespace cann::cli
