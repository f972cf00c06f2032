// `run --strategy auto`: the launcher calibrates the machine when it has no spec, the planner
// picks a layout, and the run trains with exactly what was announced.
#include <gtest/gtest.h>

#include <string>

#include "core/fs.h"
#include "test_util.h"

namespace cann {
namespace {

const std::string kBinary = CANN_TRAIN_BINARY;

// The chosen layout as announced, and what the run then reports: "N processes" must come with
// N ranks of one thread, "1 process x T threads" with one rank of T threads.
void expect_trained_as_announced(const std::string& out, int cores) {
  const size_t chose = out.find("chose ");
  ASSERT_NE(chose, std::string::npos) << out;
  const std::string rest = out.substr(chose);
  if (rest.rfind("chose 1 process", 0) == 0) {
    EXPECT_NE(out.find("1 rank x " + std::to_string(cores) + " threads"), std::string::npos) << out;
  } else {
    EXPECT_EQ(rest.rfind("chose " + std::to_string(cores) + " processes", 0), 0u) << out;
    EXPECT_NE(out.find(std::to_string(cores) + " ranks x 1 threads"), std::string::npos) << out;
    EXPECT_NE(out.find("planner predicts"), std::string::npos) << out;
  }
  EXPECT_NE(out.find("done: steps 1..2"), std::string::npos) << out;
}

class MultiProcAutoStrategyTest : public ::testing::Test {
 protected:
  test::TempDir home_;
  std::vector<std::string> env() const { return {"CANN_TRAIN_HOME=" + home_.path()}; }
};

TEST_F(MultiProcAutoStrategyTest, CalibratesFirstThenTrainsWithThePlannersChoice) {
  const std::vector<std::string> args = {
      kBinary,        "run", "--strategy",      "auto", "--steps",          "2", "--monitor", "off",
      "--eval-every", "0",   "--sample-tokens", "0",    "--nproc-per-node", "2"};
  auto r = test::run_command(args, 240, env());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("measuring this machine first"), std::string::npos) << r.output;
  EXPECT_TRUE(path_exists(home_.file("clusters/local.yaml")));
  EXPECT_NE(r.output.find("auto: planned"), std::string::npos) << r.output;
  expect_trained_as_announced(r.output, 2);
  // The second run reuses the calibration.
  r = test::run_command(args, 240, env());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("measuring this machine first"), std::string::npos) << r.output;
  expect_trained_as_announced(r.output, 2);
}

TEST_F(MultiProcAutoStrategyTest, RefusesWhatItCannPlan) {
  auto r = test::run_command(
      {kBinary, "run", "--strategy", "auto", "--nnodes", "2", "--steps", "1"}, 60, env());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--strategy auto across nodes plans with the measured link"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("bench tune --nnodes 2"), std::string::npos) << r.output;
  // A model no layout of this machine can hold: 175B parameters are 700 GB in fp32.
  r = test::run_command({kBinary, "run", "--strategy", "auto", "--model", "gpt_175b",
                         "--batch-size", "2", "--seq-len", "128", "--steps", "1"},
                        120, env());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("fits this machine's memory"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace cann
