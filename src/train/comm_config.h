// comm.yaml: the communication choices `cann-train bench tune` measured on one topology, which
// `cann-train run --comm-config FILE` (or the environment variable CANN_COMM_CONFIG) trains
// with, as NCCL's tuner tables do for NCCL.
//
//   format: 1
//   tuned_for: {nnodes: 1, nproc_per_node: 2, transport: tcp, model: gpt_tiny}
//   measured_at: 2026-12-04T19:30:00Z
//   backend: shm                    # shm | gloo | hierarchical
//   gloo:                           # the gloo backend, and hierarchical's links between hosts
//     channels: 2                   # parallel Gloo contexts
//     split_bytes: 4194304          # messages from this size are split over the channels
//     allreduce:                    # fp32/integer all-reduce by message size, rows in order
//       - {below: 65536, algorithm: direct}
//       - {algorithm: ring}         # the last row takes every size left
//   bucket_size_mb: 4               # gradient buckets after the first (1 MiB)
//   links:                          # what the chosen setting measured, for the planner
//     intra_node: {bandwidth_GBps: 3.1, latency_us: 25}
//     inter_node: {bandwidth_GBps: 0.11, latency_us: 80}
//
// Every key is read; an unknown key, an algorithm the backend lacks, or rows out of order is one
// line naming the file and the key.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "comm/group.h"
#include "core/status.h"
#include "train/distributed.h"

namespace cann::train {

// A link as an all-reduce over it measured, in the planner's terms (plan::LinkSpec, as `bench
// calibrate` writes them): bus bandwidth at the largest size (nccl-tests' busbw), and latency
// as the smallest size's time over the 2(P-1) steps of a ring.
struct LinkFigures {
  double bandwidth_GBps = 0;
  double latency_us = 0;
};

struct CommTuning {
  // What it was measured on.
  int nnodes = 1;
  int nproc_per_node = 1;
  std::string transport = "tcp";
  std::string model;  // the model the bucket size was timed with
  std::string measured_at;
  // The choices.
  std::string backend = "shm";
  int channels = 2;
  size_t split_bytes = size_t{4} << 20;
  std::vector<comm::AllreduceRule> allreduce;  // empty: ring at every size
  double bucket_size_mb = 0;                   // 0: not tuned (run's default)
  std::optional<LinkFigures> intra_node, inter_node;
};

std::string comm_tuning_text(const CommTuning& t);
// Writes atomically (a failed write leaves the old file).
Status write_comm_tuning(const std::string& path, const CommTuning& t);
StatusOr<CommTuning> read_comm_tuning(const std::string& path);

// "backend shm, gloo 2 channels split from 4 MiB, all-reduce direct below 64 KiB then ring,
// buckets 4 MiB".
std::string comm_tuning_summary(const CommTuning& t);

// Trains with `t` on a world of `nnodes` x `nproc_per_node`: its backend (unless the command
// line named one), channels, split size and all-reduce table, and its bucket size (unless
// --bucket-size-mb was given). A backend that cannot span the world (shm on several nodes) is an
// error. Returns the start-up line: the file, the choices, what the command line kept, and a
// world other than the tuned one.
StatusOr<std::string> apply_comm_tuning(const CommTuning& t, const std::string& path, int nnodes,
                                        int nproc_per_node, bool backend_given, bool bucket_given,
                                        CommConfig* comm, double* bucket_mb);

}  // namespace cann::train
