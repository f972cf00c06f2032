// The calibrated 'local' cluster for a number of single-threaded processes on this machine, and
// the one-process-with-threads device: what `run --strategy auto` and `bench plan-vs-real` price
// their layouts on.
//
// A calibrated device is one worker process of one thread measured while every other worker
// measures too (bench_calibrate.h). With as many processes as cores that is the spec 'local'
// (written by `cann-train bench calibrate`). With more processes than cores they share the
// cores, and their GEMM rate, copy bandwidth and, above all, collective latency (a peer that is
// descheduled answers a time slice later) are what a calibration with that many processes
// measures; such a spec is kept beside 'local' as 'local-P' (P processes). Scaling the
// per-core figures by cores / P would get the compute right but not the latency, which is what
// tensor parallelism's many small all-reduces pay.
#pragma once

#include "core/status.h"
#include "plan/cluster.h"

namespace cann::cli {

// The spec for `processes` single-threaded workers on this machine of `cores` cores: 'local'
// when processes <= cores (its devices_per_node set to `processes`), else 'local-<processes>'.
// A missing spec is measured first by `cann-train bench calibrate` (its output hidden, a line
// saying so printed with `who` in front unless quiet).
StatusOr<plan::ClusterSpec> local_cluster(int processes, int cores, const char* who, bool quiet);

// The same spec measured now, into `path` (a YAML file), whatever is stored: for a benchmark
// that must price each layout under the load the machine has while it runs.
StatusOr<plan::ClusterSpec> local_cluster_measured_now(int processes, int cores,
                                                       const std::string& path, const char* who,
                                                       bool quiet);

// The name load_cluster_spec resolves for that many processes: "local" or "local-<P>".
std::string local_cluster_name(int processes, int cores);

// How much faster `threads` threads run the model's MLP GEMM (N tokens, hidden C, feed-forward
// F, capped so a large model costs no more than about a second and a half: three rounds, the
// best of each side) than one thread, at least 1. Leaves the process with `restore_threads`
// threads.
double thread_speedup(int threads, int N, int C, int F, int restore_threads);

// One process using every core as threads: a single device whose GEMM rate is the per-core rate
// times `speedup`, its memory every core's share and its bandwidth min(cores, speedup) times one.
plan::ClusterSpec threaded_device(const plan::ClusterSpec& local, int cores, double speedup);

}  // namespace cann::cli
