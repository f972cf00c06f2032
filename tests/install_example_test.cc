// The engine as a package: `cmake --install` puts the library, the headers and the CMake
// package config under a prefix, and the out-of-tree project examples/custom_model configures
// against that prefix alone (find_package(cann_train)), builds, and runs: its own model from the
// engine's layers, gradient-checked, trained data-parallel over the engine's groups, and a group
// made from a rank list.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "test_util.h"

namespace cann {
namespace {

TEST(InstalledPackage, AnOutOfTreeProjectBuildsAgainstItAndTrains) {
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

  const auto configure = test::run_command(
      {"/usr/bin/cmake", "-S", std::string(CANN_SOURCE_DIR) + "/examples/custom_model", "-B", out,
       "-G", "Ninja", "-DCMAKE_PREFIX_PATH=" + prefix},
      120);
  ASSERT_EQ(configure.exit_code, 0) << configure.output;
  const auto compile = test::run_command({"/usr/bin/cmake", "--build", out}, 300);
  ASSERT_EQ(compile.exit_code, 0) << compile.output;
  const auto run = test::run_command({out + "/custom_model"}, 120);
  std::printf("%s", run.output.c_str());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("custom_model: every check holds"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace cann
