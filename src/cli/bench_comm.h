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
  double seconds_per_size = 0.2;  // timing budget per (backend, op, size) and repeat
  int repeat = 3;                 // timings per (backend, op, size): median, min, max
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

// One measured (backend, op, size): the median of the repeats' seconds per call, their range,
// and the bandwidths of the median (nccl-tests' algbw and busbw, GB/s).
struct CommRow {
  std::string backend, op;
  int nproc = 0;
  size_t size_bytes = 0;
  double time_s = 0, time_min_s = 0, time_max_s = 0;
  double algbw = 0, busbw = 0;
  double vs_raw = 0;  // all-reduce: busbw / raw Gloo's at the same size; 0 when not measured
};

// The target: the shm all-reduce's bus bandwidth at least 3x raw Gloo's ring all-reduce at
// 64 MiB or more (the largest such size measured is judged).
inline constexpr size_t kCommTargetBytes = size_t{64} << 20;
inline constexpr double kCommTargetRatio = 3.0;
struct CommTarget {
  bool judged = false;  // false: no shm and raw Gloo all-reduce of 64 MiB or more measured
  bool met = false;
  size_t size_bytes = 0;
  double ratio = 0;
};
CommTarget judge_comm_target(const std::vector<CommRow>& rows);

// The worker side: every rank runs this; rank 0 prints the table (or JSON) to stdout, with the
// machine, the load and the target's verdict. Returns whether the target was met (true when it
// was not judged).
StatusOr<bool> run_comm_bench_worker(const CommBenchConfig& config, const train::DistEnv& env);

}  // namespace cann::cli
