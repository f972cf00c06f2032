// `cann-train bench calibrate`: measures this machine and writes the cluster spec "local" that
// the planner reads (`cann-train search --cluster local`).
//
// A "device" here is one worker process with one thread (one core): the unit a data-, tensor-
// or pipeline-parallel strategy places on this machine. Every worker measures at the same time,
// so each figure is what a device gets while its neighbours work too:
//   device.peak_tflops           the best fp32 GEMM rate over a set of shapes (1 thread);
//   device.memory_bandwidth_GBps a 64 MiB copy (read + write bytes / time);
//   device.memory_gb             MemTotal / devices;
//   intra_node                   shm all-reduce: bus bandwidth at 64 MiB, latency at 8 bytes;
//   inter_node                   the gloo backend over loopback TCP (this machine has no
//                                network link of its own; replace with a real one's figures).
// Efficiencies are 1.0 since the peaks are measured, not nominal.
#pragma once

#include <string>

#include "core/status.h"
#include "train/dist_env.h"

namespace cann::cli {

// GFLOP/s of repeated (m x k) * (k x n) fp32 GEMMs through the engine's linear layer, with
// whatever thread count is set (about 3 GFLOP of work, at least two repetitions).
double gemm_gflops(int m, int n, int k);

// The worker side; rank 0 writes `output` (a YAML path) and prints a summary.
Status run_calibrate_worker(const train::DistEnv& env, const std::string& output);

}  // namespace cann::cli
