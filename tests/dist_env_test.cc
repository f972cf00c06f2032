// Launcher environments: cann-train's own agent, torchrun, Slurm and Open MPI, and the errors
// for inconsistent variables.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "train/dist_env.h"

namespace cann::train {
namespace {

// Sets the given variables (and clears every launcher variable first) for one test.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::string>& vars) {
    clear();
    for (const auto& [k, v] : vars) setenv(k.c_str(), v.c_str(), 1);
  }
  ~ScopedEnv() { clear(); }

 private:
  static void clear() {
    for (const char* v : {"RANK",
                          "WORLD_SIZE",
                          "LOCAL_RANK",
                          "LOCAL_WORLD_SIZE",
                          "GROUP_RANK",
                          "MASTER_ADDR",
                          "MASTER_PORT",
                          "CANN_TRAIN_STORE",
                          "CANN_TRAIN_JOB",
                          "CANN_TRAIN_HOST_ID",
                          "CANN_TRAIN_COMM_ADDR",
                          "SLURM_PROCID",
                          "SLURM_NTASKS",
                          "SLURM_LOCALID",
                          "SLURM_NTASKS_PER_NODE",
                          "SLURM_TASKS_PER_NODE",
                          "SLURM_NODEID",
                          "SLURM_JOB_ID",
                          "OMPI_COMM_WORLD_RANK",
                          "OMPI_COMM_WORLD_SIZE",
                          "OMPI_COMM_WORLD_LOCAL_RANK",
                          "OMPI_COMM_WORLD_LOCAL_SIZE",
                          "OMPI_COMM_WORLD_NODE_RANK",
                          "TORCHELASTIC_RUN_ID"})
      unsetenv(v);
  }
};

TEST(DistEnvTest, PlainProcessHasNoLauncher) {
  ScopedEnv e({});
  auto d = detect_dist_env();
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->has_value());
}

TEST(DistEnvTest, OwnAgent) {
  ScopedEnv e({{"RANK", "5"},
               {"WORLD_SIZE", "8"},
               {"LOCAL_RANK", "1"},
               {"LOCAL_WORLD_SIZE", "4"},
               {"GROUP_RANK", "1"},
               {"CANN_TRAIN_STORE", "file:///tmp/s"},
               {"CANN_TRAIN_JOB", "j/round0"},
               {"CANN_TRAIN_HOST_ID", "j/node1"},
               {"CANN_TRAIN_COMM_ADDR", "10.0.0.2"}});
  auto d = detect_dist_env();
  ASSERT_TRUE(d.ok() && d->has_value());
  const DistEnv& v = **d;
  EXPECT_EQ(v.launcher, "cann-train");
  EXPECT_EQ(v.rank, 5);
  EXPECT_EQ(v.world_size, 8);
  EXPECT_EQ(v.local_rank, 1);
  EXPECT_EQ(v.local_world_size, 4);
  EXPECT_EQ(v.node_rank, 1);
  EXPECT_EQ(v.store_url, "file:///tmp/s");
  EXPECT_EQ(v.job_id, "j/round0");
  EXPECT_EQ(v.host_id, "j/node1");
  EXPECT_EQ(v.comm_addr, "10.0.0.2");
}

TEST(DistEnvTest, Torchrun) {
  ScopedEnv e({{"RANK", "3"},
               {"WORLD_SIZE", "4"},
               {"LOCAL_RANK", "1"},
               {"LOCAL_WORLD_SIZE", "2"},
               {"MASTER_ADDR", "node0"},
               {"MASTER_PORT", "29500"},
               {"TORCHELASTIC_RUN_ID", "abc"}});
  auto d = detect_dist_env();
  ASSERT_TRUE(d.ok() && d->has_value());
  EXPECT_EQ((*d)->launcher, "torchrun");
  EXPECT_EQ((*d)->node_rank, 1);
  EXPECT_EQ((*d)->master_addr, "node0");
  EXPECT_EQ((*d)->master_port, 29500);
  EXPECT_EQ((*d)->job_id, "abc");
  EXPECT_TRUE((*d)->store_url.empty());
}

TEST(DistEnvTest, Slurm) {
  ScopedEnv e({{"SLURM_PROCID", "6"},
               {"SLURM_NTASKS", "8"},
               {"SLURM_LOCALID", "2"},
               {"SLURM_TASKS_PER_NODE", "4(x2)"},
               {"SLURM_NODEID", "1"},
               {"SLURM_JOB_ID", "991"}});
  auto d = detect_dist_env();
  ASSERT_TRUE(d.ok() && d->has_value());
  EXPECT_EQ((*d)->launcher, "slurm");
  EXPECT_EQ((*d)->rank, 6);
  EXPECT_EQ((*d)->world_size, 8);
  EXPECT_EQ((*d)->local_rank, 2);
  EXPECT_EQ((*d)->local_world_size, 4);
  EXPECT_EQ((*d)->node_rank, 1);
  EXPECT_EQ((*d)->job_id, "slurm-991");
}

TEST(DistEnvTest, OpenMpi) {
  ScopedEnv e({{"OMPI_COMM_WORLD_RANK", "3"},
               {"OMPI_COMM_WORLD_SIZE", "4"},
               {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
               {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  auto d = detect_dist_env();
  ASSERT_TRUE(d.ok() && d->has_value());
  EXPECT_EQ((*d)->launcher, "openmpi");
  EXPECT_EQ((*d)->rank, 3);
  EXPECT_EQ((*d)->node_rank, 1);
}

TEST(DistEnvTest, InconsistentVariablesNameTheProblem) {
  {
    ScopedEnv e({{"RANK", "4"}, {"WORLD_SIZE", "4"}});
    auto d = detect_dist_env();
    ASSERT_FALSE(d.ok());
    EXPECT_NE(d.status().message().find("rank 4 of world size 4"), std::string::npos);
    EXPECT_EQ(d.status().exit_code(), 2);
  }
  {
    ScopedEnv e({{"RANK", "one"}, {"WORLD_SIZE", "4"}});
    auto d = detect_dist_env();
    ASSERT_FALSE(d.ok());
    EXPECT_NE(d.status().message().find("RANK='one'"), std::string::npos);
  }
}

}  // namespace
}  // namespace cann::train
