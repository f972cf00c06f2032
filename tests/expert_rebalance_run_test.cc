// `run --expert-rebalance` through the binary: a MoE run under expert parallelism moves experts
// between its ranks as their load says, and trains exactly as the same run without moving them
// (the same losses, bit for bit, and the same whole-model checkpoint); what the flag cannot
// serve is refused in one line. Under --elastic: fault_model_parallel_test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>

#include "ckpt/checkpoint.h"
#include "run_args.h"
#include "test_util.h"

namespace cann {
namespace {

const std::string kBinary = CANN_TRAIN_BINARY;

// The moves are priced on the machine's calibrated spec; the tests bring their own, so that no
// calibration runs (or fails on a busy machine) and every run decides alike.
const char kSpec[] =
    "name: local\nnodes: 1\ndevices_per_node: 2\n"
    "device: {name: cpu-core, peak_tflops: 0.1, memory_gb: 8, memory_bandwidth_GBps: 20, "
    "tdp_watts: 0, hourly_cost_usd: 0, compute_units: 1, gemm_efficiency: 1.0, "
    "memory_efficiency: 1.0, runtime_reserve_GB: 0.03, precision: fp32}\n"
    "intra_node: {bandwidth_GBps: 8, latency_us: 20, topology: switch, efficiency: 1.0, "
    "interconnect: shared-memory}\n"
    "inter_node: {bandwidth_GBps: 1.5, latency_us: 50, efficiency: 1.0, "
    "interconnect: tcp-loopback}\n";

class MultiProcExpertRebalanceTest : public ::testing::Test {
 protected:
  void SetUp() override { test::write_text(home_.file("clusters/local.yaml"), kSpec); }
  test::CommandResult run(const std::string& name, std::vector<std::string> extra,
                          const std::string& model = "deepseek_tiny",
                          const std::string& strategy = "dp=2,ep=2") {
    std::vector<std::string> argv = {kBinary};
    const std::vector<std::string> base = test::RunArgs()
                                              .comparison_run(model, 8)
                                              .sample_tokens(0)
                                              .flag("--nproc-per-node", "2")
                                              .flag("--strategy", strategy)
                                              .flag("--log-json", dir_.file(name + ".jsonl"))
                                              .flag("--checkpoint-dir", dir_.file(name));
    argv.insert(argv.end(), base.begin(), base.end());
    argv.insert(argv.end(), extra.begin(), extra.end());
    return test::run_command(argv, 240, {"CANN_TRAIN_HOME=" + home_.path()});
  }
  // The "loss" field of every step line of a step log, as written.
  std::vector<std::string> losses(const std::string& name) {
    std::vector<std::string> out;
    std::istringstream in(test::read_text(dir_.file(name + ".jsonl")));
    for (std::string line; std::getline(in, line);) {
      const size_t at = line.find("\"loss\":");
      if (line.find("\"step\":") == std::string::npos || at == std::string::npos) continue;
      out.push_back(line.substr(at, line.find(',', at) - at));
    }
    return out;
  }
  ckpt::LoadedCheckpoint read(const std::string& name) {
    auto c = ckpt::read_checkpoint(dir_.file(name) + "/step-00000008");
    EXPECT_TRUE(c.ok()) << c.status().message();
    return c.ok() ? *c : ckpt::LoadedCheckpoint{};
  }
  test::TempDir home_, dir_;
};

TEST_F(MultiProcExpertRebalanceTest, MovesExpertsAndTrainsExactlyAsWithout) {
  const auto fixed = run("fixed", {});
  ASSERT_EQ(fixed.exit_code, 0) << fixed.output;
  const auto moving = run("moving", {"--expert-rebalance", "every=2,cooldown=0"});
  ASSERT_EQ(moving.exit_code, 0) << moving.output;
  // deepseek_tiny's router sends 1.5-1.8 times the mean load to the busiest of the two ranks:
  // the experts move, and the event says so in the output and in the step log.
  EXPECT_NE(moving.output.find("expert_migrated step 2:"), std::string::npos) << moving.output;
  EXPECT_NE(test::read_text(dir_.file("moving.jsonl")).find("\"expert_migrated\""),
            std::string::npos);
  EXPECT_EQ(fixed.output.find("expert_migrated"), std::string::npos);
  const std::vector<std::string> a = losses("fixed"), b = losses("moving");
  ASSERT_EQ(a.size(), 8u);
  EXPECT_EQ(a, b);
  // The checkpoints hold the whole model, each expert in its own place: the same bytes.
  const auto ca = read("fixed"), cb = read("moving");
  for (const char* s : {"params", "adam_m", "adam_v"}) {
    const ckpt::Section* x = ca.find(s);
    const ckpt::Section* y = cb.find(s);
    ASSERT_TRUE(x != nullptr && y != nullptr) << s;
    ASSERT_EQ(x->data.size(), y->data.size()) << s;
    EXPECT_EQ(std::memcmp(x->data.data(), y->data.data(), x->data.size()), 0) << s;
  }
}

// Replicated experts: the copies' gradients reach their owners in another order of additions
// than one GEMM over all rows, so the run agrees with the one without to float rounding.
TEST_F(MultiProcExpertRebalanceTest, ReplicatesHotExpertsAndTrainsAsWithout) {
  const auto fixed = run("fixed", {});
  ASSERT_EQ(fixed.exit_code, 0) << fixed.output;
  const auto copied = run("copied", {"--expert-rebalance", "every=2,cooldown=0,replicas=3"});
  ASSERT_EQ(copied.exit_code, 0) << copied.output;
  EXPECT_NE(copied.output.find("replicated on every rank"), std::string::npos) << copied.output;
  // The room for the copies is in the memory the run reports, as the planner predicts it.
  EXPECT_NE(copied.output.find("planner predicts"), std::string::npos);
  EXPECT_NE(copied.output.find("(+0.0%)"), std::string::npos) << copied.output;
  const std::vector<std::string> a = losses("fixed"), b = losses("copied");
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), 8u);
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = std::stod(a[i].substr(7)), y = std::stod(b[i].substr(7));
    EXPECT_NEAR(x, y, 1e-4 * std::abs(x)) << "step " << i + 1;
  }
  const auto ca = read("fixed"), cb = read("copied");
  const ckpt::Section* x = ca.find("params");
  const ckpt::Section* y = cb.find("params");
  ASSERT_TRUE(x != nullptr && y != nullptr);
  ASSERT_EQ(x->data.size(), y->data.size());
  const float* p = reinterpret_cast<const float*>(x->data.data());
  const float* q = reinterpret_cast<const float*>(y->data.data());
  double worst = 0;
  for (size_t i = 0; i < x->data.size() / sizeof(float); ++i)
    worst = std::max(worst, static_cast<double>(std::abs(p[i] - q[i])));
  EXPECT_LT(worst, 1e-3) << "largest parameter difference after 8 steps";
}

TEST_F(MultiProcExpertRebalanceTest, RefusesRunsItCannotRebalance) {
  struct Case {
    std::string model, strategy, value;
    std::vector<std::string> flags;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {"gpt_tiny", "dp=2", "every=2", {}, "has no experts"},
           {"deepseek_tiny", "dp=2", "every=2", {}, "has ep=1"},
           {"deepseek_tiny", "dp=2,ep=2", "every=2", {"--compress", "onebit"}, "--compress onebit"},
           {"deepseek_tiny", "dp=2,ep=2", "cooldown=2", {}, "every=K is required"},
           {"deepseek_tiny", "dp=2,ep=2", "every=2,replicas=8", {}, "is data parallelism"},
           {"deepseek_tiny", "dp=2,ep=2,zero=3", "every=2,replicas=1", {}, "ZeRO-3"},
       }) {
    std::vector<std::string> extra = c.flags;
    extra.insert(extra.end(), {"--expert-rebalance", c.value});
    const auto r = run("refused", extra, c.model, c.strategy);
    test::expect_one_line_error(r, 2, {"--expert-rebalance", c.says, "hint:"});
  }
}

}  // namespace
}  // namespace cann
