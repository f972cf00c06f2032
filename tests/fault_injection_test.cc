// The fault-injection suite: real `cann-train run` jobs whose workers are really killed,
// stopped, starved of disk or fed a corrupt checkpoint. In each, the job must finish its steps,
// lose no committed step, and, the world size being the same at the end as at the start, end
// with the same bytes in its final checkpoint (parameters and both AdamW moments) as a run
// without the fault: training is deterministic and every restore is exact.
//
// The model is small so a run takes about a second; steps are a millisecond or two, so a fault
// lands at a random point of a step (forward, backward, a collective, the snapshot).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpoint.h"
#include "fault_job.h"
#include "run_args.h"
#include "test_util.h"

namespace cann {
namespace {

namespace fs = std::filesystem;
using test::events;
using test::find_event;
using test::Job;
using test::logged_steps;
using test::TempDir;

const char kModel[] =
    "architecture: gpt\nhidden_size: 64\nnum_hidden_layers: 2\nnum_attention_heads: 2\n"
    "vocab_size: 256\nseq_length: 32\n";
constexpr int kSteps = 200;

std::vector<std::string> job_args(const std::string& dir, int steps = kSteps) {
  return test::fault_job(dir, steps, 2).flag("--checkpoint-every", 50).args();
}

std::string final_data(const std::string& dir, int step = kSteps) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08d", step);
  return test::read_text(dir + "/ck/" + name + "/data.bin");
}

class MultiProcFaultTest : public ::testing::Test {
 protected:
  // The fault-free run every faulty run is compared with, made once.
  static void SetUpTestSuite() {
    reference_dir_ = new TempDir("cann-fault-ref");
    test::write_text(reference_dir_->file("m.yaml"), kModel);
    auto r = test::run_cann(job_args(reference_dir_->path()), 120);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    reference_ = new std::string(final_data(reference_dir_->path()));
    ASSERT_GT(reference_->size(), 100000u);
  }
  static void TearDownTestSuite() {
    delete reference_;
    delete reference_dir_;
  }
  void SetUp() override { test::write_text(dir_.file("m.yaml"), kModel); }

  // Every step from 1 to kSteps logged, in order, each step after a restart continuing from
  // the committed one: nothing committed was lost.
  void expect_no_step_lost() {
    const std::vector<int> steps = logged_steps(dir_.file("log.jsonl"));
    ASSERT_FALSE(steps.empty());
    EXPECT_EQ(steps.front(), 1);
    EXPECT_EQ(steps.back(), kSteps);
    int highest = 0;
    for (size_t i = 0; i < steps.size(); ++i) {
      if (i > 0 && steps[i] != steps[i - 1] + 1) {
        // A restart: it goes back at most to the committed step, never before it.
        EXPECT_LE(steps[i], steps[i - 1]) << "a step was skipped at " << i;
        EXPECT_GE(steps[i], highest - 1) << "more than one step re-done at " << i;
      }
      highest = std::max(highest, steps[i]);
    }
  }
  void expect_same_as_reference() {
    const std::string got = final_data(dir_.path());
    ASSERT_EQ(got.size(), reference_->size());
    EXPECT_TRUE(got == *reference_) << "final parameters/moments differ from the fault-free run";
  }

  static TempDir* reference_dir_;
  static std::string* reference_;
  TempDir dir_{"cann-fault"};
};
TempDir* MultiProcFaultTest::reference_dir_ = nullptr;
std::string* MultiProcFaultTest::reference_ = nullptr;

TEST_F(MultiProcFaultTest, SigkillWorkerMidStep) {
  auto args = job_args(dir_.path());
  args.push_back("--elastic");
  Job job(dir_.path(), args);
  ASSERT_TRUE(job.wait_for_step(80)) << job.output();
  const double killed_at = job.signal_rank(1, SIGKILL);
  ASSERT_GT(killed_at, 0);
  ASSERT_EQ(job.wait(), 0) << job.output();
  const auto ev = events(dir_.file("log.jsonl"));
  const auto* detected = find_event(ev, "failure_detected", 0);
  const auto* resumed = find_event(ev, "training_resumed", 1);
  ASSERT_TRUE(detected && resumed) << job.output();
  EXPECT_TRUE(find_event(ev, "state_restored", 1));
  EXPECT_TRUE(find_event(ev, "rendezvous_complete", 1));
  EXPECT_EQ((*detected)["rank"], 1);
  EXPECT_NE((*detected)["detail"].get<std::string>().find("signal 9"), std::string::npos);
  // Rank 0 survived in its own process; only rank 1 was replaced.
  EXPECT_NE(job.output().find("rank 0 rejoined as generation 1"), std::string::npos)
      << job.output();
  EXPECT_NE(job.output().find("generation 1 replaces 1 worker "), std::string::npos);
  const double detect = (*detected)["time"].get<double>() - killed_at;
  const double back = (*resumed)["time"].get<double>() - killed_at;
  std::printf("SIGKILL: detected after %.3f s, training again (a step completed) after %.3f s\n",
              detect, back);
  EXPECT_LT(detect, 1.0);
  EXPECT_LT(back, 5.0);
  expect_no_step_lost();
  expect_same_as_reference();
}

// The state a snapshot must carry beyond parameters and moments: 1-bit Adam's error-feedback
// buffers of every rank (over Gloo, the backend between machines), and ZeRO's shards (each
// rank's snapshot its own moment pieces, and under stage 3 its parameter pieces). Each layout
// is compared with its own fault-free run.
TEST_F(MultiProcFaultTest, SigkillKeepsErrorFeedbackAndZeroShards) {
  for (const std::vector<std::string>& layout :
       {std::vector<std::string>{"--backend", "gloo", "--compress", "onebit"},
        std::vector<std::string>{"--strategy", "dp=2,zero=1"},
        std::vector<std::string>{"--strategy", "dp=2,zero=3"}}) {
    TempDir ref("cann-fault-layout-ref"), run("cann-fault-layout");
    for (const TempDir* d : {&ref, &run}) test::write_text(d->file("m.yaml"), kModel);
    auto ref_args = job_args(ref.path());
    ref_args.insert(ref_args.end(), layout.begin(), layout.end());
    auto r = test::run_cann(ref_args, 120);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto args = job_args(run.path());
    args.insert(args.end(), layout.begin(), layout.end());
    args.push_back("--elastic");
    Job job(run.path(), args);
    ASSERT_TRUE(job.wait_for_step(120)) << job.output();
    ASSERT_GT(job.signal_rank(1, SIGKILL), 0);
    ASSERT_EQ(job.wait(), 0) << job.output();
    EXPECT_NE(job.output().find("rank 0 rejoined as generation 1"), std::string::npos)
        << job.output();
    EXPECT_TRUE(final_data(run.path()) == final_data(ref.path()))
        << layout[1] << ": final state differs from the fault-free run";
  }
}

TEST_F(MultiProcFaultTest, SigstopWorkerIsAHang) {
  auto args = job_args(dir_.path());
  args.push_back("--elastic");
  Job job(dir_.path(), args);
  ASSERT_TRUE(job.wait_for_step(60)) << job.output();
  const double stopped_at = job.signal_rank(0, SIGSTOP);
  ASSERT_GT(stopped_at, 0);
  ASSERT_EQ(job.wait(), 0) << job.output();
  const auto ev = events(dir_.file("log.jsonl"));
  const auto* detected = find_event(ev, "failure_detected", 0);
  ASSERT_TRUE(detected) << job.output();
  EXPECT_NE((*detected)["detail"].get<std::string>().find("heartbeat is stale"), std::string::npos)
      << (*detected)["detail"];
  const double detect = (*detected)["time"].get<double>() - stopped_at;
  std::printf("SIGSTOP: detected after %.3f s (--heartbeat-timeout 1)\n", detect);
  EXPECT_GT(detect, 0.8);  // the last beat came up to one interval before the stop
  EXPECT_LT(detect, 3.0);
  expect_no_step_lost();
  expect_same_as_reference();
}

TEST_F(MultiProcFaultTest, SigkillDuringCheckpointWrite) {
  // Paced to 2 MB/s, each 1.4 MiB checkpoint takes about 0.7 s to write: rank 0 (the writer) is
  // killed while the step-50 temporary exists.
  auto args = job_args(dir_.path());
  args.insert(args.end(), {"--elastic", "--checkpoint-bandwidth", "2"});
  Job job(dir_.path(), args);
  bool writing = false;
  for (int i = 0; i < 6000 && !writing; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (!fs::exists(dir_.file("ck"))) continue;
    for (const auto& e : fs::directory_iterator(dir_.file("ck")))
      writing |= e.path().filename().string().rfind(".step-00000050.tmp-", 0) == 0;
  }
  ASSERT_TRUE(writing) << job.output();
  ASSERT_GT(job.signal_rank(0, SIGKILL), 0);
  ASSERT_EQ(job.wait(), 0) << job.output();
  expect_no_step_lost();
  expect_same_as_reference();
  // Every checkpoint under a final name verifies; the dead writer's temporary is never listed.
  auto listed = ckpt::list_checkpoints(dir_.file("ck"));
  ASSERT_TRUE(listed.ok());
  ASSERT_FALSE(listed->empty());
  for (const auto& p : *listed) EXPECT_TRUE(ckpt::read_checkpoint(p).ok()) << p;
  EXPECT_EQ(ckpt::read_latest_checkpoint(dir_.file("ck"))->step, kSteps);
}

// The published snapshots of each rank of a job started with --rdzv-id `id`, newest step first
// (a hidden ".slot-N" is one being written: not published, no copy a restart could take).
std::vector<std::vector<fs::path>> published_snapshots(const std::string& id, int world) {
  std::vector<std::vector<fs::path>> out(static_cast<size_t>(world));
  for (const auto& root : fs::directory_iterator("/dev/shm")) {
    if (root.path().filename().string().rfind("cann-train-snap-" + id.substr(0, 16), 0) != 0)
      continue;
    for (int r = 0; r < world; ++r) {
      const fs::path dir = root.path() / ("rank" + std::to_string(r));
      if (!fs::exists(dir)) continue;
      for (const auto& step : fs::directory_iterator(dir))
        if (step.path().filename().string().rfind("step-", 0) == 0)
          out[static_cast<size_t>(r)].push_back(step.path());
      std::sort(out[r].rbegin(), out[r].rend());
    }
  }
  return out;
}

int64_t step_of(const fs::path& p) {
  return std::stoll(p.filename().string().substr(5));
}

void damage(const fs::path& step_dir) {
  std::fstream f(step_dir / "data.bin", std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(200);
  f.write("\x5a\xa5", 2);
}

// Stops both workers of a 2-rank job at a moment `wanted` accepts (given each rank's published
// snapshots); between tries they run on for a few milliseconds.
bool freeze_when(Job& job, const std::string& id,
                 const std::function<bool(const std::vector<std::vector<fs::path>>&)>& wanted) {
  const pid_t w0 = job.worker(0), w1 = job.worker(1);
  if (w0 <= 0 || w1 <= 0) return false;
  for (int attempt = 0; attempt < 50; ++attempt) {
    kill(w0, SIGSTOP);
    kill(w1, SIGSTOP);
    if (wanted(published_snapshots(id, 2))) return true;
    kill(w0, SIGCONT);
    kill(w1, SIGCONT);
    std::this_thread::sleep_for(std::chrono::milliseconds(1 + attempt % 4));
  }
  return false;
}

TEST_F(MultiProcFaultTest, OwnSnapshotCorruptTakesTheNeighboursReplica) {
  const std::string id = "neighbour" + std::to_string(getpid());
  auto args = job_args(dir_.path());
  args.insert(args.end(), {"--elastic", "--rdzv-id", id});
  Job job(dir_.path(), args);
  ASSERT_TRUE(job.wait_for_step(90)) << job.output();
  // Freeze both workers where rank 1 holds a copy of the newest step (not behind rank 0, whose
  // copy would then serve it first), damage every snapshot rank 1 holds, then kill rank 1;
  // rank 0, the survivor, keeps its process and its own snapshots.
  ASSERT_TRUE(freeze_when(job, id, [](const auto& held) {
    return !held[1].empty() && (held[0].empty() || step_of(held[1][0]) >= step_of(held[0][0]));
  })) << job.output();
  const auto held = published_snapshots(id, 2);
  for (const fs::path& p : held[1]) damage(p);
  kill(job.worker(1), SIGKILL);
  // Rank 0 survives: it goes on once the agent has chosen the copies to load.
  ASSERT_TRUE(job.wait_for_output("restart 1 of")) << job.output();
  kill(job.worker(0), SIGCONT);
  ASSERT_EQ(job.wait(), 0) << job.output();
  const std::string out = job.output();
  EXPECT_NE(out.find("unusable, trying the next copy"), std::string::npos) << out;
  EXPECT_NE(out.find("checksum mismatch"), std::string::npos) << out;
  expect_no_step_lost();
  expect_same_as_reference();
}

// Memory damage in every copy of the committed step: all ranks go back to the step before it,
// which a rank still holds, and re-do one more step; nothing is lost and the bytes end equal.
TEST_F(MultiProcFaultTest, EveryCopyOfTheNewestStepDamagedGoesBackAStep) {
  const std::string id = "newestbad" + std::to_string(getpid());
  auto args = job_args(dir_.path());
  args.insert(args.end(), {"--elastic", "--rdzv-id", id});
  Job job(dir_.path(), args);
  ASSERT_TRUE(job.wait_for_step(90)) << job.output();
  // Frozen where rank 1, the one killed, holds the step before the newest: its files stay as
  // they are, while rank 0, let go on, may retire its own copy of that step when it publishes
  // the step in flight.
  int64_t newest = -1;
  ASSERT_TRUE(freeze_when(job, id, [&](const auto& held) {
    newest = -1;
    for (const auto& h : held)
      if (!h.empty()) newest = std::max(newest, step_of(h[0]));
    for (const fs::path& p : held[1])
      if (step_of(p) == newest - 1) return true;
    return false;
  })) << job.output();
  for (const auto& h : published_snapshots(id, 2))
    for (const fs::path& p : h)
      if (step_of(p) == newest) damage(p);
  kill(job.worker(1), SIGKILL);
  ASSERT_TRUE(job.wait_for_output("restart 1 of")) << job.output();
  kill(job.worker(0), SIGCONT);
  ASSERT_EQ(job.wait(), 0) << job.output();
  const std::string out = job.output();
  EXPECT_NE(out.find("no copy of the committed step " + std::to_string(newest) +
                     " verifies; restored step " + std::to_string(newest - 1)),
            std::string::npos)
      << out;
  const auto ev = events(dir_.file("log.jsonl"));
  const auto* restored = find_event(ev, "state_restored", 1);
  ASSERT_TRUE(restored) << job.output();
  EXPECT_EQ((*restored)["detail"].get<std::string>().rfind(
                "step " + std::to_string(newest - 1) + " from ", 0),
            0u)
      << (*restored)["detail"];
  expect_no_step_lost();
  expect_same_as_reference();
}

TEST_F(MultiProcFaultTest, BothCopiesGoneFallsBackToDisk) {
  const std::string id = "bothgone" + std::to_string(getpid());
  auto args = job_args(dir_.path());
  args.insert(args.end(), {"--elastic", "--rdzv-id", id});
  Job job(dir_.path(), args);
  ASSERT_TRUE(job.wait_for_step(120)) << job.output();
  const pid_t w0 = job.worker(0), w1 = job.worker(1);
  kill(w0, SIGSTOP);
  kill(w1, SIGSTOP);
  int removed = 0;
  for (const auto& root : fs::directory_iterator("/dev/shm")) {
    if (root.path().filename().string().rfind("cann-train-snap-" + id.substr(0, 16), 0) != 0)
      continue;
    for (const auto& rank : fs::directory_iterator(root.path())) {
      fs::remove_all(rank.path());
      ++removed;
    }
  }
  ASSERT_EQ(removed, 2);
  kill(w1, SIGKILL);
  ASSERT_TRUE(job.wait_for_output("restart 1 of")) << job.output();
  kill(w0, SIGCONT);
  ASSERT_EQ(job.wait(), 0) << job.output();
  const auto ev = events(dir_.file("log.jsonl"));
  const auto* restored = find_event(ev, "state_restored", 1);
  ASSERT_TRUE(restored) << job.output();
  EXPECT_NE((*restored)["detail"].get<std::string>().find("/ck/step-00000100"), std::string::npos)
      << (*restored)["detail"];
  EXPECT_NE(job.output().find("newest disk checkpoint"), std::string::npos);
  expect_same_as_reference();
}

TEST_F(MultiProcFaultTest, MaxRestartsBoundsACrashLoop) {
  auto args = job_args(dir_.path());
  args.insert(args.end(), {"--elastic", "--max-restarts", "1"});
  Job job(dir_.path(), args);
  ASSERT_TRUE(job.wait_for_step(40)) << job.output();
  ASSERT_GT(job.signal_rank(1, SIGKILL), 0);
  // Wait for generation 1 to train, then kill again.
  bool resumed = false;
  for (int i = 0; i < 3000 && !resumed; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    resumed = find_event(events(dir_.file("log.jsonl")), "training_resumed", 1) != nullptr;
  }
  ASSERT_TRUE(resumed) << job.output();
  const pid_t second = job.worker(1);
  ASSERT_GT(second, 0);
  kill(second, SIGKILL);
  EXPECT_EQ(job.wait(), 1) << job.output();
  const std::string out = job.output();
  EXPECT_NE(out.find("after 1 restart (--max-restarts 1)"), std::string::npos) << out;
  EXPECT_NE(out.find("(pid " + std::to_string(second) + ") was killed by signal 9"),
            std::string::npos)
      << out;
}

TEST_F(MultiProcFaultTest, CorruptNewestCheckpointResumesFromThePrevious) {
  auto first = job_args(dir_.path());
  first.insert(first.end(), {"--exit-interval", "150"});
  auto r = test::run_cann(first, 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string newest = dir_.file("ck/step-00000150");
  ASSERT_TRUE(fs::exists(newest)) << r.output;
  {
    std::fstream f(newest + "/data.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1000);
    f.write("\xff\x00\xff", 3);
  }
  auto second = job_args(dir_.path());
  second.push_back("--resume");
  r = test::run_cann(second, 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("skipping checkpoint " + newest), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("using the previous checkpoint"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("done: steps 101..200"), std::string::npos) << r.output;
  expect_same_as_reference();
}

// A 2 MiB tmpfs holds one 1.4 MiB checkpoint, not two: the step-100 write meets a full disk.
TEST_F(MultiProcFaultTest, FullDiskDuringACheckpointWrite) {
  const std::string mount_point = dir_.file("small");
  ASSERT_EQ(::mkdir(mount_point.c_str(), 0755), 0);
  if (::mount("tmpfs", mount_point.c_str(), "tmpfs", 0, "size=2m") != 0)
    GTEST_SKIP() << "cannot mount a 2 MiB tmpfs (" << std::strerror(errno)
                 << "); the disk-full test needs root or CAP_SYS_ADMIN";
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{mount_point};
  auto args = job_args(dir_.path());
  for (auto& a : args)
    if (a == dir_.path() + "/ck") a = mount_point + "/ck";
  args.insert(args.end(), {"--keep-checkpoints", "1"});
  auto r = test::run_cann(args, 120);
  // Every step trained; the periodic writes that did not fit are warnings, the final one an
  // error; the step-50 checkpoint is intact.
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("checkpoint for step 100 not written"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("disk full"), std::string::npos) << r.output;
  EXPECT_EQ(logged_steps(dir_.file("log.jsonl")).back(), kSteps);
  auto latest = ckpt::read_latest_checkpoint(mount_point + "/ck");
  ASSERT_TRUE(latest.ok()) << latest.status().message();
  EXPECT_EQ(latest->step, 50);
  // Resumed from it elsewhere, the run ends where the fault-free one did.
  fs::copy(mount_point + "/ck", dir_.file("ck"), fs::copy_options::recursive);
  auto resume = job_args(dir_.path());
  resume.push_back("--resume");
  r = test::run_cann(resume, 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("done: steps 51..200"), std::string::npos) << r.output;
  expect_same_as_reference();
}

// Not a fault, but what a job that comes back at another size needs: a checkpoint of 2 ranks
// (zero=0) loads in 1 process and in 4 ranks under ZeRO-1, the flat buffers sliced through the
// ParamTable, and training ends where the 2-rank run did, up to fp32 summation order.
TEST_F(MultiProcFaultTest, CheckpointLoadsAtAnotherWorldSizeAndStrategy) {
  auto first = job_args(dir_.path());
  first.insert(first.end(), {"--exit-interval", "100"});
  auto r = test::run_cann(first, 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto final_loss = [](const std::string& log) {
    double loss = -1;
    std::ifstream in(log);
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.value("step", 0) == kSteps) loss = j["loss"].get<double>();
    }
    return loss;
  };
  const double expected = final_loss(reference_dir_->file("log.jsonl"));
  ASSERT_GT(expected, 0);
  for (const std::vector<std::string>& layout :
       {std::vector<std::string>{"--nproc-per-node", "1"},
        std::vector<std::string>{"--nproc-per-node", "4", "--strategy", "dp=4,zero=1"}}) {
    const std::string copy = dir_.file("ck-" + layout[1]);
    fs::copy(dir_.file("ck"), copy, fs::copy_options::recursive);
    auto args = job_args(dir_.path());
    for (auto& a : args)
      if (a == dir_.path() + "/ck") a = copy;
    for (size_t i = 0; i + 1 < args.size(); ++i)
      if (args[i] == "--nproc-per-node") args.erase(args.begin() + i, args.begin() + i + 2);
    for (auto& a : args)
      if (a == dir_.file("log.jsonl")) a = dir_.file("log-" + layout[1] + ".jsonl");
    args.insert(args.end(), layout.begin(), layout.end());
    args.push_back("--resume");
    r = test::run_cann(args, 120);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("steps 101..200"), std::string::npos) << r.output;
    const double got = final_loss(dir_.file("log-" + layout[1] + ".jsonl"));
    std::printf("%s ranks: final loss %.6f, 2-rank run %.6f\n", layout[1].c_str(), got, expected);
    EXPECT_NEAR(got, expected, 5e-3) << layout[1] << " ranks";
  }
}

}  // namespace
}  // namespace cann
