// `bench calibrate` on a machine made busy for real: spinning processes pinned to every core.
// It must refuse to write the spec (one line, exit 1) unless --accept-busy, which writes it
// marked; a quiet run writes it unmarked; `run --strategy auto` on a marked spec warns once.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "core/fs.h"
#include "core/machine_load.h"
#include "core/threads.h"
#include "plan/cluster.h"
#include "plan/predict.h"
#include "test_util.h"

namespace cann {
namespace {

const std::string kBinary = CANN_TRAIN_BINARY;

// Two spinning children per core, each pinned to its core; killed (by pid) on destruction.
class BusyLoops {
 public:
  BusyLoops() {
    for (int core = 0; core < hardware_threads(); ++core)
      for (int k = 0; k < 2; ++k) {
        const pid_t pid = fork();
        if (pid == 0) {
          cpu_set_t set;
          CPU_ZERO(&set);
          CPU_SET(core, &set);
          sched_setaffinity(0, sizeof(set), &set);
          alarm(300);  // never outlive a crashed test
          volatile unsigned long spin = 0;
          while (true) spin = spin + 1;
        }
        if (pid > 0) pids_.push_back(pid);
      }
    usleep(300 * 1000);  // let the scheduler see them runnable
  }
  ~BusyLoops() {
    for (pid_t p : pids_) kill(p, SIGKILL);
    for (pid_t p : pids_) waitpid(p, nullptr, 0);
  }

 private:
  std::vector<pid_t> pids_;
};

TEST(MultiProcBenchCalibrateTest, RefusesOnABusyMachineUnlessAccepted) {
  test::TempDir dir;
  const std::string spec = dir.file("local.yaml");
  BusyLoops busy;
  auto r =
      test::run_command({kBinary, "bench", "calibrate", "--nproc", "1", "--output", spec}, 120);
  test::expect_one_line_error(r, 1, {"other runnable tasks", "--accept-busy"},
                              "cann-train bench: error: the machine is busy: ");
  EXPECT_FALSE(path_exists(spec)) << "a spec measured under load was written";

  r = test::run_command(
      {kBinary, "bench", "calibrate", "--nproc", "1", "--output", spec, "--accept-busy"}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto c = plan::load_cluster_spec(spec);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_NE(c->measured_under_load.find("other runnable tasks"), std::string::npos)
      << c->measured_under_load;
  // The runtime's floor, measured from the worker's own resident set: this binary's code alone
  // is megabytes, and a worker with no training state holds far less than a gigabyte.
  const double floor_mib = plan::reserved_bytes(c->device) / 1048576.0;
  EXPECT_GT(floor_mib, 4.0);
  EXPECT_LT(floor_mib, 1024.0);
}

TEST(MultiProcBenchCalibrateTest, QuietRunWritesTheSpecUnmarked) {
  // One device of 1 core leaves the others free: a single other task on a 2-core machine
  // is no reason to refuse. Only a machine busier than that cannot run this test.
  const LoadReading now = sample_load();
  if (now.ok && now.runnable - 1 > hardware_threads() - 1)
    GTEST_SKIP() << "the machine is busy (" << now.runnable - 1
                 << " other runnable tasks): a quiet run cannot be tested now";
  test::TempDir dir;
  const std::string spec = dir.file("local.yaml");
  auto r =
      test::run_command({kBinary, "bench", "calibrate", "--nproc", "1", "--output", spec}, 120);
  if (r.exit_code == 1 && r.output.find("the machine is busy") != std::string::npos)
    GTEST_SKIP() << "the machine became busy while measuring: " << r.output;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto c = plan::load_cluster_spec(spec);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->measured_under_load, "");
  EXPECT_NE(test::read_text(spec).find("3 repeats of each"), std::string::npos);
  // No output tiles; thin GEMMs measured at d = 16..256, each a fraction of the peak (the
  // fastest shape measured), the fastest thin one near it.
  EXPECT_EQ(c->device.gemm_tile, 0);
  const auto& thin = c->device.gemm_efficiency_by_min_dim;
  ASSERT_EQ(thin.size(), 5u);
  EXPECT_EQ(thin.front().first, 16);
  EXPECT_EQ(thin.back().first, 256);
  for (const auto& [dim, eff] : thin) {
    EXPECT_GT(eff, 0.05) << dim;
    EXPECT_LE(eff, 1.0) << dim;
  }
  // Huge pages as the kernel gives them to buffers that advise them.
  const std::string thp = test::read_text("/sys/kernel/mm/transparent_hugepage/enabled");
  EXPECT_EQ(c->device.huge_pages,
            thp.find("[always]") != std::string::npos || thp.find("[madvise]") != std::string::npos)
      << thp;
}

TEST(MultiProcBenchCalibrateTest, AutoWarnsOnceOnASpecMeasuredUnderLoad) {
  test::TempDir home;
  ASSERT_TRUE(make_dirs(home.file("clusters")).ok());
  // A calibrated spec as `bench calibrate --accept-busy` writes it.
  test::write_text(home.file("clusters/local.yaml"),
                   "name: local\nnodes: 1\ndevices_per_node: 2\n"
                   "device: {name: cpu-core, peak_tflops: 0.02, memory_gb: 4, "
                   "memory_bandwidth_GBps: 5, tdp_watts: 0, hourly_cost_usd: 0, "
                   "compute_units: 1, gemm_efficiency: 1.0, memory_efficiency: 1.0, "
                   "precision: fp32}\n"
                   "intra_node: {bandwidth_GBps: 2, latency_us: 50, topology: switch, "
                   "efficiency: 1.0, interconnect: shared-memory}\n"
                   "inter_node: {bandwidth_GBps: 1, latency_us: 500, efficiency: 1.0, "
                   "interconnect: tcp-loopback}\n"
                   "measured_under_load: \"4 other runnable tasks before measuring\"\n");
  auto r =
      test::run_command({kBinary, "run", "--strategy", "auto", "--steps", "1", "--monitor", "off",
                         "--eval-every", "0", "--sample-tokens", "0", "--nproc-per-node", "2"},
                        240, {"CANN_TRAIN_HOME=" + home.path()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string warning = "was measured under load (4 other runnable tasks before measuring)";
  const size_t first = r.output.find(warning);
  ASSERT_NE(first, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(warning, first + 1), std::string::npos) << "warned twice:\n" << r.output;
  EXPECT_NE(r.output.find("bench calibrate` on a quiet machine"), std::string::npos);
}

}  // namespace
}  // namespace cann
