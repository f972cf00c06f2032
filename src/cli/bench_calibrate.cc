// Calibration measurements and the cluster spec they become.
#include "cli/bench_calibrate.h"

#include <malloc.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <vector>

#include "comm/group.h"
#include "core/fs.h"
#include "core/machine_load.h"
#include "core/pages.h"
#include "core/threads.h"
#include "core/timer.h"
#include "elastic/agent.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/residual.h"
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
// Thin GEMMs, by their smallest dimension: attention's per-head products (sequence x head size
// x sequence, sequence x sequence x head size) and small models' projections. Each is timed
// thin in n and thin in k (256 x d x 256 and 256 x 256 x d); the planner interpolates between
// them (device.gemm_efficiency_by_min_dim).
constexpr int kThinDims[] = {16, 32, 64, 128, 256};
constexpr int kThinOther = 256;
// The spread judged per measurement is named by an index: a shape's, kShapes' size for the
// copy, after it the thin GEMMs', and last the elementwise kernels'.
constexpr int kElementwiseMeasure = static_cast<int>(std::size(kShapes) + 1 + std::size(kThinDims));

// The rate of the two GEMMs thin in `dim` (same FLOPs each): together, their harmonic mean.
double thin_gemm_gflops(int dim) {
  const double a = gemm_gflops(kThinOther, dim, kThinOther);
  const double b = gemm_gflops(kThinOther, kThinOther, dim);
  return 2.0 / (1.0 / a + 1.0 / b);
}

double copy_GBps() {
  const size_t bytes = 64u << 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  std::memcpy(b.data(), a.data(), bytes);
  const int reps = 8;
  const double t0 = now_seconds();
  for (int r = 0; r < reps; ++r) std::memcpy((r % 2 ? a : b).data(), (r % 2 ? b : a).data(), bytes);
  return 2.0 * bytes * reps / (now_seconds() - t0) / 1e9;
}

// The rate, GB/s, at which the engine's elementwise kernels move the bytes the planner counts
// for them (plan/layer_cost*.cc, bf16 bytes per element doubled for fp32): one GPT block's set
// for 1024 tokens of width 256 and an MLP of 1024, each in the proportion a block runs it: two
// layernorms forward (8 bytes an element) and backward (12), the GeLU forward (8) and backward
// (12), two residual adds (12). Their operands fit in the core's caches, as a layer's do at the
// micro-batches the engine trains, so what bounds them is their arithmetic (tanh, rsqrt), not
// memory: on the family 26 EPYC 28 GB/s against a 36 GB/s copy.
double elementwise_GBps() {
  constexpr int N = 1024, C = 256, F = 1024;
  std::vector<float> x(static_cast<size_t>(N) * C), y(x.size()), dy(x.size()), dx(x.size());
  std::vector<float> h(static_cast<size_t>(N) * F), g(h.size()), dg(h.size()), dh(h.size());
  std::vector<float> w(C, 1.0f), b(C, 0.0f), dw(C), db(C), mean(N), rstd(N);
  // Values spread over the GeLU's curved range and the norms' usual scale.
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 97) / 24.0f - 2.0f;
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>(i % 89) / 22.0f - 2.0f;
  std::fill(dy.begin(), dy.end(), 0.01f);
  std::fill(dg.begin(), dg.end(), 0.01f);
  auto block = [&] {
    for (int i = 0; i < 2; ++i)
      kernels::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(),
                                 N, C);
    kernels::gelu_forward(g.data(), h.data(), h.size());
    for (int i = 0; i < 2; ++i) kernels::residual_forward(dx.data(), x.data(), y.data(), x.size());
    kernels::gelu_backward(dh.data(), h.data(), dg.data(), h.size());
    for (int i = 0; i < 2; ++i)
      kernels::layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                                  mean.data(), rstd.data(), N, C);
  };
  const double bytes = (2.0 * 8 + 2.0 * 12 + 2.0 * 12) * N * C + (8.0 + 12.0) * N * F;
  block();
  int reps = 0;
  const double t0 = now_seconds();
  do {
    block();
    ++reps;
  } while (now_seconds() - t0 < 0.1);
  return bytes * reps / (now_seconds() - t0) / 1e9;
}

// Busy for `seconds` on GEMMs: after idling, the processor takes about 0.2 s to reach its
// working clock (the first 0.1-0.2 s of GEMMs ran 25-40% slower than the rest on the family 26
// EPYC), so no measurement may start on a cold core.
void warm_up(double seconds) {
  const double t0 = now_seconds();
  while (now_seconds() - t0 < seconds) gemm_gflops(512, 512, 512);
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

// Each measurement is taken this many times: the median is kept, the spread judged.
constexpr int kRepeats = 3;

// kRepeats results of `measure` after one that is not kept: the first measurement of a GEMM
// shape or of the copy ran 30-45% slower on the family 26 EPYC whatever its warm-up calls (the
// first use of buffers of that size), which is not what the steps of a run see.
std::vector<double> kept_repeats(const std::function<double()>& measure) {
  measure();
  std::vector<double> v;
  for (int r = 0; r < kRepeats; ++r) v.push_back(measure());
  return v;
}

// This process's CPU time, all its threads.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// The agent's reading before it started the workers: "load1 runnable" (calibrate_env_before).
LoadReading reading_from_env() {
  LoadReading r;
  if (const char* v = std::getenv(kCalibrateBeforeEnv))
    r.ok = std::sscanf(v, "%lf %d", &r.load1, &r.runnable) == 2;
  return r;
}

// Whether the kernel gives huge pages to the engine's buffers, which advise them
// (MADV_HUGEPAGE): transparent huge pages "always" or "madvise", not "never".
bool advised_huge_pages() {
  // A sysfs file's size says nothing of its text: read a line.
  char line[128] = {};
  std::FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (f == nullptr) return false;
  const bool read = std::fgets(line, sizeof(line), f) != nullptr;
  std::fclose(f);
  return read &&
         (std::strstr(line, "[always]") != nullptr || std::strstr(line, "[madvise]") != nullptr);
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

int run_calibrate_agent(int nproc, bool accept_busy, const std::vector<std::string>& worker_args) {
  auto fail = [](const std::string& message, int code) {
    std::fprintf(stderr, "cann-train bench: error: %s\n", message.c_str());
    return code;
  };
  // Read before any worker starts, so every runnable task but this one is someone else's.
  const LoadReading before = sample_load();
  char reading[64];
  std::snprintf(reading, sizeof(reading), "%.2f %d", before.load1, before.runnable);
  if (before.ok) setenv(kCalibrateBeforeEnv, reading, 1);
  char verdict[] = "/tmp/cann-train-calibrate-XXXXXX";
  const int fd = mkstemp(verdict);
  if (fd < 0)
    return fail("cannot create a temporary file in /tmp; hint: check that it is writable", 1);
  close(fd);
  setenv(kCalibrateVerdictEnv, verdict, 1);
  elastic::AgentConfig ac;
  ac.nproc_per_node = nproc > 0 ? nproc : hardware_threads();
  ac.worker_args = worker_args;
  ac.plain_rank0_stdout = true;
  auto code = elastic::run_agent(ac);
  auto busy = read_file(verdict);
  std::remove(verdict);
  if (!code.ok()) return fail(code.status().message(), code.status().exit_code());
  if (*code == 0 && busy.ok() && !busy->empty() && !accept_busy)
    return fail("the machine is busy: " + *busy +
                    "; the cluster spec was not written; hint: run it again when the machine "
                    "is quieter, or pass --accept-busy to keep a spec measured under load",
                1);
  return *code;
}

Status run_calibrate_worker(const train::DistEnv& env, const std::string& output,
                            bool accept_busy) {
  set_num_threads(1);
  const int P = env.world_size;
  train::CommConfig cc;
  cc.backend = "shm";
  CANN_ASSIGN_OR_RETURN(auto shm, train::make_world_group(env, cc));
  // GEMMs and copies on every device at once, each kRepeats times: the median kept, the
  // largest spread and the smallest share of a core this process got judged below.
  CANN_RETURN_IF_ERROR(shm->barrier()->wait());
  std::vector<float> gemm;
  float worst[2] = {0, 0};  // largest spread; 1 - smallest CPU share
  int worst_of = -1;        // which measurement: a shape's index, or kShapes' size for the copy
  const double cpu0 = process_cpu_seconds(), wall0 = now_seconds();
  auto judge = [&](const std::vector<double>& v, int which) {
    const double sp = spread(v);
    if (sp > worst[0]) worst[0] = static_cast<float>(sp), worst_of = which;
    return median(v);
  };
  // The shapes, then the thin ones (which `judge` names by kShapes' size plus 1 + index).
  auto measure_gemms = [&](std::vector<float>* rates, std::vector<float>* thin) {
    for (size_t i = 0; i < std::size(kShapes); ++i) {
      const GemmShape& s = kShapes[i];
      rates->push_back(static_cast<float>(
          judge(kept_repeats([&] { return gemm_gflops(s.m, s.n, s.k); }), static_cast<int>(i))));
    }
    for (size_t i = 0; i < std::size(kThinDims); ++i) {
      std::vector<double> reps;
      for (int r = 0; r < kRepeats; ++r) reps.push_back(thin_gemm_gflops(kThinDims[i]));
      thin->push_back(
          static_cast<float>(judge(reps, static_cast<int>(std::size(kShapes) + 1 + i))));
    }
  };
  warm_up(0.5);
  std::vector<float> thin;
  measure_gemms(&gemm, &thin);
  // The same shapes with bf16 inputs and fp32 accumulation (`run --precision bf16`), where the
  // processor has AVX-512 BF16; every device agrees on whether it has.
  std::vector<float> gemm_bf16, thin_bf16;
  if (kernels::cpu_has_bf16()) {
    kernels::set_gemm_precision(kernels::GemmPrecision::kBf16);
    measure_gemms(&gemm_bf16, &thin_bf16);
    kernels::set_gemm_precision(kernels::GemmPrecision::kFp32);
    // The resident floor below is an fp32 worker's: the bf16 primitives made here (about
    // 8 MiB) would otherwise stay in it, and fp32 runs never make them.
    kernels::release_bf16_gemm_state();
  }
  float copy =
      static_cast<float>(judge(kept_repeats(copy_GBps), static_cast<int>(std::size(kShapes))));
  std::vector<double> kernel_rates;
  for (int r = 0; r < kRepeats; ++r) kernel_rates.push_back(elementwise_GBps());
  float elementwise = static_cast<float>(judge(kernel_rates, kElementwiseMeasure));
  worst[1] = static_cast<float>(
      std::max(0.0, 1 - (process_cpu_seconds() - cpu0) / std::max(now_seconds() - wall0, 1e-9)));
  // Each figure as the average device measured it; the worst spread and share of any device.
  float mine[2] = {worst[0], static_cast<float>(worst_of)};
  CANN_RETURN_IF_ERROR(
      shm->allreduce(gemm.data(), gemm.size(), comm::DataType::kFloat32, comm::ReduceOp::kAvg)
          ->wait());
  CANN_RETURN_IF_ERROR(
      shm->allreduce(&copy, 1, comm::DataType::kFloat32, comm::ReduceOp::kAvg)->wait());
  CANN_RETURN_IF_ERROR(
      shm->allreduce(&elementwise, 1, comm::DataType::kFloat32, comm::ReduceOp::kAvg)->wait());
  CANN_RETURN_IF_ERROR(
      shm->allreduce(thin.data(), thin.size(), comm::DataType::kFloat32, comm::ReduceOp::kAvg)
          ->wait());
  if (!gemm_bf16.empty()) {
    CANN_RETURN_IF_ERROR(shm->allreduce(gemm_bf16.data(), gemm_bf16.size(),
                                        comm::DataType::kFloat32, comm::ReduceOp::kAvg)
                             ->wait());
    CANN_RETURN_IF_ERROR(shm->allreduce(thin_bf16.data(), thin_bf16.size(),
                                        comm::DataType::kFloat32, comm::ReduceOp::kAvg)
                             ->wait());
  }
  CANN_RETURN_IF_ERROR(
      shm->allreduce(worst, 2, comm::DataType::kFloat32, comm::ReduceOp::kMax)->wait());
  // Which measurement spread widest, and on which device: from the device whose spread it was.
  const bool widest = mine[0] == worst[0];
  float widest_of[2] = {widest ? mine[1] : -1.0f, widest ? static_cast<float>(env.rank) : -1.0f};
  CANN_RETURN_IF_ERROR(
      shm->allreduce(widest_of, 2, comm::DataType::kFloat32, comm::ReduceOp::kMax)->wait());
  // Collective timings: the median of kRepeats; their spread is not judged (a latency of tens
  // of microseconds varies with every wake-up, loaded or not).
  const double big = 64.0 * (1 << 20);
  const double bus = P > 1 ? 2.0 * (P - 1) / P : 1.0;
  auto timed = [&](comm::Group& g, size_t count, int reps) -> StatusOr<double> {
    std::vector<double> t;
    for (int r = 0; r < kRepeats; ++r) {
      CANN_ASSIGN_OR_RETURN(double s, allreduce_seconds(g, count, reps));
      t.push_back(s);
    }
    return median(t);
  };
  CANN_ASSIGN_OR_RETURN(double t_big, timed(*shm, static_cast<size_t>(big / 4), 10));
  CANN_ASSIGN_OR_RETURN(double t_small, timed(*shm, 2, 200));
  train::DistEnv genv = env;
  genv.job_id = env.job_id + "/calibrate-gloo";
  cc.backend = "gloo";
  CANN_ASSIGN_OR_RETURN(auto gloo, train::make_world_group(genv, cc));
  CANN_ASSIGN_OR_RETURN(double g_big, timed(*gloo, static_cast<size_t>(big / 4), 3));
  CANN_ASSIGN_OR_RETURN(double g_small, timed(*gloo, 2, 50));
  // The runtime's resident floor: what a worker holds with its code and libraries loaded, BLAS
  // started and both communicators up, once the measurements' buffers are freed and the heap
  // has handed their pages back (malloc keeps freed buffers of a few MiB for reuse; a run's
  // flat buffers live as long as the run). A run's worker holds it beside its training state;
  // the largest of any worker is kept.
  malloc_trim(0);
  float floor_mib = static_cast<float>(process_resident_bytes() / 1048576.0);
  CANN_RETURN_IF_ERROR(
      shm->allreduce(&floor_mib, 1, comm::DataType::kFloat32, comm::ReduceOp::kMax)->wait());
  if (env.rank != 0) return OkStatus();

  // The load after: the other workers are leaving; give them a moment, then count.
  MeasurementNoise noise;
  noise.before = reading_from_env();
  noise.own_before = 1;  // the agent that read it
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  noise.after = sample_load();
  noise.own_after = 1;
  noise.max_spread = worst[0];
  const int which = static_cast<int>(widest_of[0]);
  char what[64] = "a measurement";
  if (which >= 0 && which < static_cast<int>(std::size(kShapes)))
    std::snprintf(what, sizeof(what), "GEMM %dx%dx%d", kShapes[which].m, kShapes[which].n,
                  kShapes[which].k);
  else if (which == static_cast<int>(std::size(kShapes)))
    std::snprintf(what, sizeof(what), "memory copy");
  else if (which > static_cast<int>(std::size(kShapes)) &&
           which <= static_cast<int>(std::size(kShapes) + std::size(kThinDims)))
    std::snprintf(what, sizeof(what), "GEMMs thin in %d",
                  kThinDims[which - std::size(kShapes) - 1]);
  else if (which == kElementwiseMeasure)
    std::snprintf(what, sizeof(what), "elementwise kernels");
  noise.max_spread_of = what;
  if (P > 1 && widest_of[1] >= 0)
    noise.max_spread_of += " on device " + std::to_string(static_cast<int>(widest_of[1]));
  noise.min_cpu_share = 1 - worst[1];
  const std::string busy = busy_reasons(noise, hardware_threads(), P);
  if (!busy.empty() && !accept_busy) {
    // The agent says it in one line (calibrate_verdict_path); run directly, say it here.
    if (const char* verdict = std::getenv(kCalibrateVerdictEnv))
      return write_file_atomic(verdict, busy);
    return FailedPrecondition("the machine is busy: " + busy +
                              "; the cluster spec was not written; hint: run it again when "
                              "the machine is quieter, or pass --accept-busy to keep it anyway");
  }

  // The peak is the fastest shape measured, thin ones included; each thin dimension's rate is
  // kept as its fraction of it.
  auto fastest = [](const std::vector<float>& a, const std::vector<float>& b) {
    double best = 0;
    for (float r : a) best = std::max(best, static_cast<double>(r));
    for (float r : b) best = std::max(best, static_cast<double>(r));
    return best;
  };
  const double peak_gflops = fastest(gemm, thin);
  const double bf16_gflops = fastest(gemm_bf16, thin_bf16);
  auto by_min_dim = [](const std::vector<float>& rates, double peak) {
    std::string out = "{";
    for (size_t i = 0; i < rates.size(); ++i) {
      char item[48];
      std::snprintf(item, sizeof(item), "%s%d: %.4f", i ? ", " : "", kThinDims[i],
                    std::min(1.0, rates[i] / peak));
      out += item;
    }
    return out + "}";
  };
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
  auto thin_rates = [&](const std::vector<float>& rates) {
    yaml += "; thin, 256 x d x 256 and 256 x 256 x d together:";
    for (size_t i = 0; i < rates.size(); ++i) {
      std::snprintf(buf, sizeof(buf), " d=%d %.1f", kThinDims[i], rates[i]);
      yaml += buf;
    }
  };
  thin_rates(thin);
  if (!gemm_bf16.empty()) {
    yaml += "\n# bf16-input GEMM GFLOP/s (run --precision bf16) by shape:";
    for (size_t i = 0; i < gemm_bf16.size(); ++i) {
      std::snprintf(buf, sizeof(buf), " %dx%dx%d=%.1f", kShapes[i].m, kShapes[i].n, kShapes[i].k,
                    gemm_bf16[i]);
      yaml += buf;
    }
    thin_rates(thin_bf16);
  }
  std::snprintf(buf, sizeof(buf),
                "\n# %d repeats of each: largest spread %.1f%% (%s), smallest CPU share %.0f%%; "
                "load average %.2f before, %.2f after.",
                kRepeats, 100 * noise.max_spread, noise.max_spread_of.c_str(),
                100 * noise.min_cpu_share, noise.before.load1, noise.after.load1);
  yaml += buf;
  yaml +=
      "\n# inter_node is the gloo backend over loopback TCP: this machine has no network link.\n"
      "# precision fp32: the engine keeps everything in fp32, so the planner counts its own\n"
      "# buffers; bf16_gemm_tflops prices the linear layers of `run --precision bf16` (0: no\n"
      "# AVX-512 BF16).\n"
      "# runtime_reserve_GB: the largest worker's resident set with the runtime up and no\n"
      "# training state (code, libraries, BLAS, communicators).\n"
      "# huge_pages: the kernel backs the engine's buffers (which advise it) with 2 MiB pages,\n"
      "# so each is resident to its last whole page.\n"
      "# gemm_tile 0: oneDNN's sgemm computes no whole output tiles; the thin GEMMs' measured\n"
      "# fractions of the peak (by the smallest dimension) price small shapes instead.\n"
      "# elementwise_GBps: the engine's norms, GeLU and residual adds over the bytes the\n"
      "# planner counts for them (they run from cache, bound by their arithmetic).\n";
  std::snprintf(
      buf, sizeof(buf),
      "name: local\nnodes: 1\ndevices_per_node: %d\n"
      "device: {name: cpu-core, peak_tflops: %.5f, bf16_gemm_tflops: %.5f, memory_gb: %.2f, "
      "memory_bandwidth_GBps: %.2f, tdp_watts: 0, hourly_cost_usd: 0, compute_units: 1, "
      "gemm_efficiency: 1.0, gemm_tile: 0, memory_efficiency: 1.0, elementwise_GBps: %.2f, "
      "runtime_reserve_GB: %.5f, huge_pages: %s, precision: fp32,\n",
      P, peak_gflops / 1e3, bf16_gflops / 1e3, mem_total_gb() / P, copy, elementwise,
      floor_mib / 1024.0, advised_huge_pages() ? "true" : "false");
  yaml += buf;
  yaml += "  gemm_efficiency_by_min_dim: " + by_min_dim(thin, peak_gflops);
  if (!thin_bf16.empty())
    yaml += ",\n  bf16_gemm_efficiency_by_min_dim: " + by_min_dim(thin_bf16, bf16_gflops);
  yaml += "}\n";
  std::snprintf(buf, sizeof(buf),
                "intra_node: {bandwidth_GBps: %.3f, latency_us: %.2f, topology: switch, "
                "efficiency: 1.0, interconnect: shared-memory}\n"
                "inter_node: {bandwidth_GBps: %.3f, latency_us: %.2f, efficiency: 1.0, "
                "interconnect: tcp-loopback}\n",
                intra_GBps, t_small * 1e6 / steps, inter_GBps, g_small * 1e6 / steps);
  yaml += buf;
  // Kept under load only with --accept-busy, and marked so: `run --strategy auto` warns.
  if (!busy.empty()) yaml += "measured_under_load: \"" + busy + "\"\n";
  const std::string path = output.empty() ? plan::calibrated_cluster_dir() + "/local.yaml" : output;
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos) CANN_RETURN_IF_ERROR(make_dirs(path.substr(0, slash)));
  CANN_RETURN_IF_ERROR(write_file_atomic(path, yaml));
  std::printf("%s", yaml.c_str());
  std::printf("wrote %s (use it with `cann-train search --cluster local`)\n", path.c_str());
  return OkStatus();
}

}  // namespace cann::cli
