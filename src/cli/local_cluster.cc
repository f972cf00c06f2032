// Calibrated local clusters for any process count, calibrating on demand.
#include "cli/local_cluster.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "cli/bench_calibrate.h"
#include "core/threads.h"

namespace cann::cli {
namespace {

// `cann-train bench calibrate --nproc P [--output PATH]`, its output hidden.
Status calibrate(int processes, const std::string& output, const char* who, bool quiet) {
  if (!quiet) {
    std::printf("%s: measuring this machine first (cann-train bench calibrate --nproc %d%s%s)\n",
                who, processes, output.empty() ? "" : " --output ", output.c_str());
    std::fflush(stdout);
  }
  const std::string nproc = std::to_string(processes);
  const pid_t pid = fork();
  if (pid < 0) return Internal(std::string(who) + ": cannot start the calibration (fork failed)");
  if (pid == 0) {
    const int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDOUT_FILENO);
    // --accept-busy: a run must not stop because another build runs; the spec is marked and
    // `--strategy auto` warns on every run until it is measured again on a quiet machine.
    if (output.empty())
      execl("/proc/self/exe", "cann-train", "bench", "calibrate", "--nproc", nproc.c_str(),
            "--accept-busy", static_cast<char*>(nullptr));
    else
      execl("/proc/self/exe", "cann-train", "bench", "calibrate", "--nproc", nproc.c_str(),
            "--output", output.c_str(), "--accept-busy", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return Internal(std::string(who) + ": `cann-train bench calibrate --nproc " + nproc +
                    "` failed; hint: run it by hand to see why");
  return OkStatus();
}

}  // namespace

std::string local_cluster_name(int processes, int cores) {
  return processes <= cores ? "local" : "local-" + std::to_string(processes);
}

StatusOr<plan::ClusterSpec> local_cluster(int processes, int cores, const char* who, bool quiet) {
  const std::string name = local_cluster_name(processes, cores);
  auto spec = plan::load_cluster_spec(name);
  if (!spec.ok() && spec.status().code() == StatusCode::kNotFound) {
    const std::string output =
        name == "local" ? std::string() : plan::calibrated_cluster_dir() + "/" + name + ".yaml";
    CANN_RETURN_IF_ERROR(calibrate(name == "local" ? cores : processes, output, who, quiet));
    spec = plan::load_cluster_spec(name);
  }
  if (!spec.ok()) return spec.status();
  plan::ClusterSpec c = *spec;
  c.nodes = 1;
  c.devices_per_node = processes;
  return c;
}

StatusOr<plan::ClusterSpec> local_cluster_measured_now(int processes, int cores,
                                                       const std::string& path, const char* who,
                                                       bool quiet) {
  CANN_RETURN_IF_ERROR(calibrate(std::max(processes, cores), path, who, quiet));
  CANN_ASSIGN_OR_RETURN(plan::ClusterSpec c, plan::load_cluster_spec(path));
  c.nodes = 1;
  c.devices_per_node = processes;
  return c;
}

double thread_speedup(int threads, int N, int C, int F, int restore_threads) {
  N = std::min(N, 2048);
  C = std::min(C, 1024);
  F = std::min(F, 4096);
  // The best of three alternating rounds each: other work only ever slows a round, and one
  // slowed round of the threaded GEMM (the last run's processes still exiting) halved the
  // speed-up a forecast used.
  double one = 0, all = 0;
  for (int round = 0; round < 3; ++round) {
    set_num_threads(1);
    one = std::max(one, gemm_gflops(N, F, C));
    set_num_threads(threads);
    all = std::max(all, gemm_gflops(N, F, C));
  }
  set_num_threads(restore_threads);
  return std::max(1.0, all / one);
}

plan::ClusterSpec threaded_device(const plan::ClusterSpec& local, int cores, double speedup) {
  plan::ClusterSpec single = local;
  single.nodes = 1;
  single.devices_per_node = 1;
  single.device.peak_tflops *= speedup;
  single.device.bf16_gemm_tflops *= speedup;  // the fp32 speed-up: not measured for bf16
  single.device.memory_gb *= cores;
  single.device.memory_bandwidth_GBps *= std::min<double>(cores, speedup);
  single.device.elementwise_GBps *= std::min<double>(cores, speedup);
  return single;
}

}  // namespace cann::cli
