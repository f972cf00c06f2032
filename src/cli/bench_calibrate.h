// `cann-train bench calibrate`: measures this machine and writes the cluster spec "local" that
// the planner reads (`cann-train search --cluster local`).
//
// A "device" here is one worker process with one thread (one core): the unit a data-, tensor-
// or pipeline-parallel strategy places on this machine. Every worker measures at the same time,
// so each figure is what a device gets while its neighbours work too:
//   device.peak_tflops           the best fp32 GEMM rate over a set of shapes (1 thread);
//   device.memory_bandwidth_GBps a 64 MiB copy (read + write bytes / time);
//   device.elementwise_GBps      the engine's layernorm, GeLU and residual kernels over the
//                                bytes the planner counts for them;
//   device.memory_gb             MemTotal / devices;
//   intra_node                   shm all-reduce: bus bandwidth at 64 MiB, latency at 8 bytes;
//   inter_node                   the gloo backend over loopback TCP (this machine has no
//                                network link of its own; replace with a real one's figures).
// Efficiencies are 1.0 since the peaks are measured, not nominal.
//
// A busy machine is refused (core/machine_load.h): after half a second of GEMMs (a cold core
// runs slower) each GEMM and copy is measured once unkept and kRepeats (3) times kept, the
// median kept; the load is read by the agent before the workers start and by rank 0
// after they finish. When another task shared the cores (runnable tasks beyond the cores the
// measurement leaves free, a spread between repeats over 10%, or a measuring process getting
// under 85% of its core), nothing is written and the command exits 1 with one line saying what
// was seen; --accept-busy writes the spec anyway, marked `measured_under_load: "..."`.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "train/dist_env.h"

namespace cann::cli {

// GFLOP/s of repeated (m x k) * (k x n) fp32 GEMMs through the engine's linear layer, with
// whatever thread count is set (about 3 GFLOP of work, at least two repetitions).
double gemm_gflops(int m, int n, int k);

// The agent's side: what it read of the load before starting the workers ("load1 runnable"),
// and the file rank 0 writes its busy verdict to (empty: quiet), both by environment.
inline constexpr char kCalibrateBeforeEnv[] = "CANN_TRAIN_CALIBRATE_LOAD_BEFORE";
inline constexpr char kCalibrateVerdictEnv[] = "CANN_TRAIN_CALIBRATE_VERDICT";

// The agent's side of `bench calibrate`: reads the load, starts `nproc` workers (0: one per
// core) with `worker_args`, and turns a busy verdict into one line and exit status 1.
int run_calibrate_agent(int nproc, bool accept_busy, const std::vector<std::string>& worker_args);

// The worker side; rank 0 writes `output` (a YAML path) and prints a summary, unless the
// machine was busy and `accept_busy` is false.
Status run_calibrate_worker(const train::DistEnv& env, const std::string& output, bool accept_busy);

}  // namespace cann::cli
