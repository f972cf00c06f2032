// The engine as a package: `cmake --install` puts the library, the headers and the CMake
// package config under a prefix, and the out-of-tree project examples/ configures against that
// prefix alone (find_package(cann_train)), builds, and runs:
//   custom_model: its own model from the engine's layers, gradient-checked, trained
//     data-parallel over the engine's groups, and a group made from a rank list;
//   custom_op: its own activation with a declared distribution rule in the engine's
//     transformer, gradient-checked, trained in one process and under dp=2 and tp=2 alike;
//   elastic_callbacks: the engine's Trainer under the elastic agent in the user's program, a
//     worker really killed, and the program's fault handlers and step callbacks told what
//     failed and what was restored.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <signal.h>

#include "fault_job.h"
#include "test_util.h"

namespace cann {
namespace {

TEST(MultiProcInstalledPackage, AnOutOfTreeProjectBuildsAgainstItAndTrains) {
  test::TempDir dir;
  const std::string build = std::filesystem::path(CANN_TRAIN_BINARY).parent_path().string();
  const std::string prefix = dir.file("prefix"), out = dir.file("example");
  const auto install =
      test::run_command({"/usr/bin/cmake", "--install", build, "--prefix", prefix}, 120);
  ASSERT_EQ(install.exit_code, 0) << install.output;
  ASSERT_TRUE(std::filesystem::exists(prefix + "/lib/libcann_train.a")) << install.output;
  ASSERT_TRUE(std::filesystem::exists(prefix + "/lib/cmake/cann_train/cann_trainConfig.cmake"));
  ASSERT_TRUE(std::filesystem::exists(prefix + "/include/cann_train/comm/group.h"));
  EXPECT_FALSE(std::filesystem::exists(prefix + "/include/cann_train/cli")) << "not the library's";

  const auto configure =
      test::run_command({"/usr/bin/cmake", "-S", std::string(CANN_SOURCE_DIR) + "/examples", "-B",
                         out, "-G", "Ninja", "-DCMAKE_PREFIX_PATH=" + prefix},
                        120);
  ASSERT_EQ(configure.exit_code, 0) << configure.output;
  const auto compile = test::run_command({"/usr/bin/cmake", "--build", out}, 300);
  ASSERT_EQ(compile.exit_code, 0) << compile.output;
  const auto run = test::run_command({out + "/custom_model"}, 120);
  std::printf("%s", run.output.c_str());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("custom_model: every check holds"), std::string::npos) << run.output;
  const auto op = test::run_command({out + "/custom_op"}, 300);
  std::printf("%s", op.output.c_str());
  EXPECT_EQ(op.exit_code, 0) << op.output;
  EXPECT_NE(op.output.find("tp=2 over 2 processes: loss"), std::string::npos) << op.output;
  EXPECT_NE(op.output.find("custom_op: every check holds"), std::string::npos) << op.output;

  // The elastic program: rank 1 killed once both ranks are training; the agent replaces it.
  test::Job job(dir.path(), {"1000"}, out + "/elastic_callbacks");
  ASSERT_TRUE(job.wait_for_output("rank 1: step 50,", 120)) << job.output();
  ASSERT_GT(job.signal_rank(1, SIGKILL), 0);
  EXPECT_EQ(job.wait(240), 0) << job.output();
  const std::string o = job.output();
  std::printf("%s", o.substr(0, 4000).c_str());
  EXPECT_NE(o.find("agent: rank 1 failed (rank 1 (pid"), std::string::npos) << o;
  EXPECT_NE(o.find("rank 0: fault handled: "), std::string::npos) << o;
  EXPECT_NE(o.find("rank 1: fault handled: this rank's process was lost and started again"),
            std::string::npos)
      << o;
  EXPECT_NE(o.find("(generation 1)"), std::string::npos) << o;
  EXPECT_NE(o.find("rank 0: done at step 1000"), std::string::npos) << o;
  EXPECT_NE(o.find("rank 1: done at step 1000"), std::string::npos) << o;
}

}  // namespace
}  // namespace cann
