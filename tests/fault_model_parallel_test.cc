// Elastic training under model parallelism: real `cann-train run --elastic` jobs on one machine
// whose layout splits the model (tensor, pipeline, context or expert parallel, ZeRO-3 with
// tensor parallelism), one worker really killed (SIGKILL) or stopped (SIGSTOP, which the
// heartbeat timeout turns into a kill) at a chosen step. The agent refills the rank in the same
// layout; the survivors keep their processes and rebuild their mesh; every rank loads its own
// in-memory snapshot of the committed step. Each run must finish every step and end with the
// same bytes in its final checkpoint (the whole model gathered, with both AdamW moments) as the
// same command without the fault: training is deterministic and every restore is exact.
//
// The model is tiny and a step takes milliseconds, so a run is about a second and the fault
// lands at a random point of a step (forward, backward, a pipeline send, a collective, the
// snapshot). Each test prints its refill time: from the signal to the first completed step of
// the new generation.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/replicas.h"
#include "fault_job.h"
#include "run_args.h"
#include "test_util.h"
#include "train/dist_env.h"
#include "train/state_keeper.h"

namespace cann {
namespace {

using test::events;
using test::find_event;
using test::Job;
using test::TempDir;

// 4 layers (pp=2 x vpp=2 gets one per chunk), 2 heads (tp=2 splits them), 32 tokens (cp=2
// splits them into 4 blocks).
const char kGpt[] =
    "architecture: gpt\nhidden_size: 64\nnum_hidden_layers: 4\nnum_attention_heads: 2\n"
    "vocab_size: 256\nseq_length: 32\n";
// Every second feed-forward a mixture of 4 experts, top-2: ep=2 puts 2 on each rank.
const char kMoe[] =
    "architecture: gpt\nhidden_size: 64\nnum_hidden_layers: 4\nnum_attention_heads: 2\n"
    "vocab_size: 256\nseq_length: 32\nnum_local_experts: 4\nnum_experts_per_tok: 2\n"
    "moe_layer_freq: 2\n";
constexpr int kSteps = 40;
constexpr int kFaultStep = 6;  // the signal goes out once the step log shows this step

struct Fault {
  std::string strategy;
  int nproc = 2;
  int rank = 1;  // the worker signalled
  int signal = SIGKILL;
  const char* model = kGpt;
  std::vector<std::string> extra = {};
};

std::vector<std::string> job_args(const std::string& dir, const Fault& f) {
  return test::fault_job(dir, kSteps, f.nproc)
      .strategy(f.strategy)
      .flag("--checkpoint-every", 100)
      .flag("--elastic")
      .flag("--snapshot-every", 1)
      .flags(f.extra)
      .args();
}

std::string final_data(const std::string& dir) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08d", kSteps);
  return test::read_text(dir + "/ck/" + name + "/data.bin");
}

class MultiProcModelParallelFaultTest : public ::testing::Test {
 protected:
  // Runs `f` without and with the fault and holds the two to each other.
  void refill_ends_like_a_fault_free_run(const Fault& f) {
    TempDir ref("cann-mp-ref"), run("cann-mp-fault");
    for (const TempDir* d : {&ref, &run}) test::write_text(d->file("m.yaml"), f.model);
    auto r = test::run_cann(job_args(ref.path(), f), 120);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string reference = final_data(ref.path());
    ASSERT_GT(reference.size(), 10000u);

    Job job(run.path(), job_args(run.path(), f));
    ASSERT_TRUE(job.wait_for_step(kFaultStep)) << job.output();
    const double signalled_at = job.signal_rank(f.rank, f.signal);
    ASSERT_GT(signalled_at, 0);
    ASSERT_EQ(job.wait(120), 0) << job.output();
    const std::string out = job.output();
    const auto ev = events(run.file("log.jsonl"));
    const auto* detected = find_event(ev, "failure_detected", 0);
    const auto* restored = find_event(ev, "state_restored", 1);
    const auto* resumed = find_event(ev, "training_resumed", 1);
    ASSERT_TRUE(detected && restored && resumed) << out;
    EXPECT_EQ((*detected)["rank"], f.rank);
    // Only the signalled rank was replaced; the others rebuilt their mesh in their processes.
    EXPECT_NE(out.find("generation 1 replaces 1 worker "), std::string::npos) << out;
    EXPECT_NE(out.find("resumes from the in-memory snapshot of step"), std::string::npos) << out;
    for (int rank = 0; rank < f.nproc; ++rank) {
      if (rank == f.rank) continue;
      EXPECT_NE(out.find("rank " + std::to_string(rank) + " rejoined as generation 1"),
                std::string::npos)
          << out;
    }
    // The survivors' rebuild of mesh, model and optimizer, the slowest one's.
    double rebuilt_s = -1;
    const std::regex rebuilt(R"(\(mesh and model rebuilt in ([0-9.]+) s\))");
    for (auto m = std::sregex_iterator(out.begin(), out.end(), rebuilt);
         m != std::sregex_iterator(); ++m)
      rebuilt_s = std::max(rebuilt_s, std::stod((*m)[1].str()));
    EXPECT_GE(rebuilt_s, 0.0) << out;
    // Rank 0 (the step log's writer) loaded its own snapshot, no other rank's.
    const std::string from = (*restored)["detail"].get<std::string>();
    EXPECT_NE(from.find("/rank0/step-"), std::string::npos) << from;
    // Every step up to the end logged; a restart goes back at most to the committed step.
    const std::vector<int> steps = test::logged_steps(run.file("log.jsonl"));
    ASSERT_FALSE(steps.empty());
    EXPECT_EQ(steps.back(), kSteps);
    for (size_t i = 1; i < steps.size(); ++i) {
      if (steps[i] != steps[i - 1] + 1) {
        EXPECT_LE(steps[i], steps[i - 1]) << "a step was skipped at " << i;
      }
    }
    const double detect = (*detected)["time"].get<double>() - signalled_at;
    const double back = (*resumed)["time"].get<double>() - signalled_at;
    std::printf(
        "refill %s (%s of rank %d): detected after %.3f s, a step completed after %.3f s; "
        "mesh and model rebuilt in %.3f s\n",
        f.strategy.c_str(), f.signal == SIGKILL ? "SIGKILL" : "SIGSTOP", f.rank, detect, back,
        rebuilt_s);
    EXPECT_TRUE(final_data(run.path()) == reference)
        << f.strategy << ": final parameters/moments differ from the fault-free run";
  }
};

TEST_F(MultiProcModelParallelFaultTest, SigkillDataAndTensorParallel) {
  refill_ends_like_a_fault_free_run({"dp=2,tp=2", 4, 3});
}

TEST_F(MultiProcModelParallelFaultTest, SigkillPipeline1F1B) {
  refill_ends_like_a_fault_free_run(
      {"pp=2,mbs=2", 2, 1, SIGKILL, kGpt, {"--pipeline-schedule", "1f1b"}});
}

// The first stage is rank 0, the step log's writer: its replacement writes the events.
TEST_F(MultiProcModelParallelFaultTest, SigkillInterleavedPipelineFirstStage) {
  refill_ends_like_a_fault_free_run({"pp=2,vpp=2,mbs=2", 2, 0});
}

TEST_F(MultiProcModelParallelFaultTest, SigkillExpertParallelMoe) {
  refill_ends_like_a_fault_free_run({"dp=2,ep=2", 2, 1, SIGKILL, kMoe});
}

// ep=4: one expert of each MoE layer per rank, so the killed rank held the only copy of its
// experts outside the snapshots.
TEST_F(MultiProcModelParallelFaultTest, SigkillFourWayExpertParallelMoe) {
  refill_ends_like_a_fault_free_run({"dp=4,ep=4", 4, 2, SIGKILL, kMoe});
}

// Experts moving every 2 steps (--expert-rebalance) while a rank is killed: the refilled rank
// and the survivors take their experts' placement from their own snapshots, and the end is the
// fault-free run's. The moves are priced on a spec the test brings (no calibration runs).
TEST_F(MultiProcModelParallelFaultTest, SigkillExpertParallelMoeWhileExpertsMove) {
  TempDir home("cann-mp-home");
  test::write_text(
      home.file("clusters/local.yaml"),
      "name: local\nnodes: 1\ndevices_per_node: 2\n"
      "device: {name: cpu-core, peak_tflops: 0.1, memory_gb: 8, memory_bandwidth_GBps: 20, "
      "compute_units: 1, gemm_efficiency: 1.0, memory_efficiency: 1.0, precision: fp32}\n"
      "intra_node: {bandwidth_GBps: 8, latency_us: 20, topology: switch, efficiency: 1.0}\n"
      "inter_node: {bandwidth_GBps: 1.5, latency_us: 50, efficiency: 1.0}\n");
  setenv("CANN_TRAIN_HOME", home.path().c_str(), 1);
  refill_ends_like_a_fault_free_run(
      {"dp=2,ep=2", 2, 1, SIGKILL, kMoe, {"--expert-rebalance", "every=2,cooldown=0"}});
  unsetenv("CANN_TRAIN_HOME");
}

TEST_F(MultiProcModelParallelFaultTest, SigkillContextParallel) {
  refill_ends_like_a_fault_free_run({"cp=2", 2, 1});
}

// ZeRO-3 shards the parameters of each tensor-parallel shard over the data-parallel ranks;
// sequence parallelism splits the tokens between the tensor-parallel ranks.
TEST_F(MultiProcModelParallelFaultTest, SigkillZero3WithTensorAndSequenceParallel) {
  refill_ends_like_a_fault_free_run({"dp=2,tp=2,sp=on,zero=3", 4, 2});
}

// ZeRO-1 over the two pipelines: each rank's snapshot holds its stage's parameters and its own
// moment shard, written without a gather; the refilled rank loads its own.
TEST_F(MultiProcModelParallelFaultTest, SigkillZero1WithPipeline) {
  refill_ends_like_a_fault_free_run({"dp=2,pp=2,mbs=2,zero=1", 4, 1});
}

// A combination: two pipelines of two stages under GPipe, their gradients reduced in bf16.
TEST_F(MultiProcModelParallelFaultTest, SigkillDataParallelGpipeWithCompression) {
  Fault f{"dp=2,pp=2,mbs=2", 4, 2};
  f.extra = {"--pipeline-schedule", "gpipe", "--compress", "bf16"};
  refill_ends_like_a_fault_free_run(f);
}

// A stopped stage blocks its neighbours in a pipeline send or receive; the agent sees its
// heartbeat go stale, kills it, and refills it.
TEST_F(MultiProcModelParallelFaultTest, SigstopPipelineStageIsRefilled) {
  refill_ends_like_a_fault_free_run(
      {"pp=2,mbs=2", 2, 1, SIGSTOP, kGpt, {"--heartbeat-timeout", "1"}});
}

// The worker's side: a rank's own snapshot loads only into that rank of that layout. Whatever
// the agent offers, another rank (or a data-parallel run) refuses it, naming both.
TEST(ElasticLayoutTest, RankSnapshotLoadsOnlyIntoItsOwnRankAndLayout) {
  TempDir dir("cann-mp-mark");
  const std::vector<char> data(16, 'x');
  ckpt::CheckpointWrite w;
  w.step = 7;
  w.meta_json = ckpt::with_rank_snapshot_mark("{}", {"dp=1,tp=2", 1});
  w.sections.push_back({"params", data.data(), data.size()});
  auto path = ckpt::write_checkpoint(dir.file("rank1"), w, 2);
  ASSERT_TRUE(path.ok()) << path.status().message();
  for (const std::string layout : {"dp=1,tp=2", ""}) {
    train::DistEnv env;
    env.rank = 0;
    env.world_size = 2;
    env.generation = 1;
    env.restore_from = *path;
    train::TrainConfig config;
    config.steps = 10;
    auto keeper = train::StateKeeper::create(config, &env, false);
    ASSERT_TRUE(keeper.ok()) << keeper.status().message();
    train::RunState run;
    run.rank_layout = layout;
    (*keeper)->bind(run);
    const StatusOr<int> step = (*keeper)->restore_at_start();
    ASSERT_FALSE(step.ok());
    const std::string expected =
        ": snapshot of rank 1 under --strategy dp=1,tp=2, loaded by rank 0 " +
        std::string(layout.empty() ? "of a data-parallel layout" : "under --strategy dp=1,tp=2");
    EXPECT_NE(step.status().message().find(expected), std::string::npos)
        << step.status().message();
    EXPECT_NE(step.status().message().find("hint:"), std::string::npos);
  }
}

// Across nodes a generation may change the world, so a model-parallel layout is planned at
// launch for every node count the range allows (train/elastic_layouts.h). Where no count has
// one (here a batch of 3 that tp=2's data-parallel ranks cannot share, and a spec whose 1 MB
// devices hold no other layout the planner could choose), the launch is refused in one line (exit
// 2), naming each count's reason.
TEST(ElasticLayoutTest, AModelParallelLayoutNoWorldAdmitsIsRefused) {
  TempDir home("cann-mp-home");
  test::write_text(
      home.file("clusters/local.yaml"),
      "name: local\nnodes: 1\ndevices_per_node: 2\n"
      "device: {name: cpu-core, peak_tflops: 0.1, memory_gb: 0.001, memory_bandwidth_GBps: 20, "
      "compute_units: 1, gemm_efficiency: 1.0, memory_efficiency: 1.0, precision: fp32}\n"
      "intra_node: {bandwidth_GBps: 8, latency_us: 20, topology: switch, efficiency: 1.0}\n"
      "inter_node: {bandwidth_GBps: 1.5, latency_us: 50, efficiency: 1.0}\n");
  std::vector<std::string> argv = {CANN_TRAIN_BINARY};
  const std::vector<std::string> args =
      test::RunArgs()
          .model("gpt_tiny")
          .steps(2)
          .nproc(2)
          .strategy("tp=2")
          .flags({"--batch-size", "3", "--elastic", "--nnodes", "2:2", "--rdzv",
                  "redis://127.0.0.1:1", "--rdzv-id", "refused"});
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = test::run_command(argv, 60, {"CANN_TRAIN_HOME=" + home.path()});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_NE(r.output.find("no node count in the range has a layout the engine trains"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("global batch 3 does not divide over 2 data-parallel ranks"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("hint:"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace cann
