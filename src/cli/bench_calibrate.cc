// Calibration measurements and the cluster spec they become.
#include "cli/bench_calibrate.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#include "comm/group.h"
#include "core/fs.h"
#include "core/threads.h"
#include "core/timer.h"
#include "kernels/cpu/linear.h"
#include "plan/cluster.h"
#include "train/distributed.h"

namespace cann::cli {
namespace {

struct GemmShape {
  int m, n, k;
};
// The projections of the demo and benchmark GPTs and a large square GEMM.
constexpr GemmShape kShapes[] = {
    {1024, 1024, 1024}, {2048, 1152, 384}, {2048, 384, 1536}, {512, 768, 192}, {256, 256, 64}};

double copy_GBps() {
  const size_t bytes = 64u << 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  std::memcpy(b.data(), a.data(), bytes);
  const int reps = 8;
  const double t0 = now_seconds();
  for (int r = 0; r < reps; ++r) std::memcpy((r % 2 ? a : b).data(), (r % 2 ? b : a).data(), bytes);
  return 2.0 * bytes * reps / (now_seconds() - t0) / 1e9;
}

// Average seconds of an all-reduce of `count` floats, the slowest rank's.
StatusOr<double> allreduce_seconds(comm::Group& g, size_t count, int reps) {
  std::vector<float> buf(count, 1.0f);
  CANN_RETURN_IF_ERROR(
      g.allreduce(buf.data(), count, comm::DataType::kFloat32, comm::ReduceOp::kSum)->wait());
  CANN_RETURN_IF_ERROR(g.barrier()->wait());
  const double t0 = now_seconds();
  for (int r = 0; r < reps; ++r)
    CANN_RETURN_IF_ERROR(
        g.allreduce(buf.data(), count, comm::DataType::kFloat32, comm::ReduceOp::kSum)->wait());
  float t = static_cast<float>((now_seconds() - t0) / reps);
  CANN_RETURN_IF_ERROR(g.allreduce(&t, 1, comm::DataType::kFloat32, comm::ReduceOp::kMax)->wait());
  return static_cast<double>(t);
}

double mem_total_gb() {
  long long kb = 0;
  if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    while (std::fgets(line, sizeof(line), f))
      if (std::sscanf(line, "MemTotal: %lld kB", &kb) == 1) break;
    std::fclose(f);
  }
  return static_cast<double>(kb) / (1024.0 * 1024.0);
}

}  // namespace

double gemm_gflops(int m, int n, int k) {
  std::vector<float> x(static_cast<size_t>(m) * k, 0.5f), w(static_cast<size_t>(n) * k, 0.25f),
      y(static_cast<size_t>(m) * n);
  kernels::linear_forward(y.data(), x.data(), w.data(), nullptr, m, k, n);
  const double flops = 2.0 * m * n * k;
  const int reps = std::max(2, static_cast<int>(3e9 / flops));
  const double t0 = now_seconds();
  for (int r = 0; r < reps; ++r)
    kernels::linear_forward(y.data(), x.data(), w.data(), nullptr, m, k, n);
  return flops * reps / (now_seconds() - t0) / 1e9;
}

Status run_calibrate_worker(const train::DistEnv& env, const std::string& output) {
  set_num_threads(1);
  const int P = env.world_size;
  train::CommConfig cc;
  cc.backend = "shm";
  CANN_ASSIGN_OR_RETURN(auto shm, train::make_world_group(env, cc));
  // GEMMs and copies on every device at once.
  CANN_RETURN_IF_ERROR(shm->barrier()->wait());
  std::vector<float> gemm;
  for (const GemmShape& s : kShapes) gemm.push_back(static_cast<float>(gemm_gflops(s.m, s.n, s.k)));
  float copy = static_cast<float>(copy_GBps());
  // Each figure as the slowest device measured it.
  CANN_RETURN_IF_ERROR(
      shm->allreduce(gemm.data(), gemm.size(), comm::DataType::kFloat32, comm::ReduceOp::kAvg)
          ->wait());
  CANN_RETURN_IF_ERROR(
      shm->allreduce(&copy, 1, comm::DataType::kFloat32, comm::ReduceOp::kAvg)->wait());
  const double big = 64.0 * (1 << 20);
  const double bus = P > 1 ? 2.0 * (P - 1) / P : 1.0;
  CANN_ASSIGN_OR_RETURN(double t_big, allreduce_seconds(*shm, static_cast<size_t>(big / 4), 10));
  CANN_ASSIGN_OR_RETURN(double t_small, allreduce_seconds(*shm, 2, 200));
  train::DistEnv genv = env;
  genv.job_id = env.job_id + "/calibrate-gloo";
  cc.backend = "gloo";
  CANN_ASSIGN_OR_RETURN(auto gloo, train::make_world_group(genv, cc));
  CANN_ASSIGN_OR_RETURN(double g_big, allreduce_seconds(*gloo, static_cast<size_t>(big / 4), 3));
  CANN_ASSIGN_OR_RETURN(double g_small, allreduce_seconds(*gloo, 2, 50));
  if (env.rank != 0) return OkStatus();

  const double peak_gflops = *std::max_element(gemm.begin(), gemm.end());
  const double intra_GBps = big * bus / t_big / 1e9;
  const double inter_GBps = big * bus / g_big / 1e9;
  // A ring all-reduce of a tiny message is 2(P-1) latency-bound steps.
  const double steps = P > 1 ? 2.0 * (P - 1) : 1.0;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M", std::localtime(&now));
  std::string yaml;
  char buf[512];
  std::snprintf(
      buf, sizeof(buf),
      "# Measured by `cann-train bench calibrate` on %s, %s, with %d devices (one process "
      "and one thread each),\n# all measuring at once. fp32 GEMM GFLOP/s by shape (m n k):",
      host, date, P);
  yaml += buf;
  for (size_t i = 0; i < gemm.size(); ++i) {
    std::snprintf(buf, sizeof(buf), " %dx%dx%d=%.1f", kShapes[i].m, kShapes[i].n, kShapes[i].k,
                  gemm[i]);
    yaml += buf;
  }
  yaml +=
      "\n# inter_node is the gloo backend over loopback TCP: this machine has no network link.\n"
      "# precision fp32: the engine trains in fp32, so the planner counts its own buffers.\n";
  std::snprintf(buf, sizeof(buf),
                "name: local\nnodes: 1\ndevices_per_node: %d\n"
                "device: {name: cpu-core, peak_tflops: %.5f, memory_gb: %.2f, "
                "memory_bandwidth_GBps: %.2f, tdp_watts: 0, hourly_cost_usd: 0, compute_units: 1, "
                "gemm_efficiency: 1.0, memory_efficiency: 1.0, precision: fp32}\n",
                P, peak_gflops / 1e3, mem_total_gb() / P, copy);
  yaml += buf;
  std::snprintf(buf, sizeof(buf),
                "intra_node: {bandwidth_GBps: %.3f, latency_us: %.2f, topology: switch, "
                "efficiency: 1.0, interconnect: shared-memory}\n"
                "inter_node: {bandwidth_GBps: %.3f, latency_us: %.2f, efficiency: 1.0, "
                "interconnect: tcp-loopback}\n",
                intra_GBps, t_small * 1e6 / steps, inter_GBps, g_small * 1e6 / steps);
  yaml += buf;
  const std::string path = output.empty() ? plan::calibrated_cluster_dir() + "/local.yaml" : output;
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos) CANN_RETURN_IF_ERROR(make_dirs(path.substr(0, slash)));
  CANN_RETURN_IF_ERROR(write_file_atomic(path, yaml));
  std::printf("%s", yaml.c_str());
  std::printf("wrote %s (use it with `cann-train search --cluster local`)\n", path.c_str());
  return OkStatus();
}

}  // namespace cann::cli
