// Multi-node elastic training through the real binary: two "nodes" are network namespaces
// joined by a veth pair, redis-server (the store) runs in the first, one agent per node with
// --elastic --nnodes 1:2 and two workers each. Faults are real: a whole node SIGKILLed, its link
// taken down, the store killed and restarted, a node started late.
//
// In each the job must finish every step with no committed step lost; where the world size ends
// as it began (the store outage), the final checkpoint equals a fault-free run's byte for byte.
// Survivors keep their processes where their peers' connections closed (a node killed) and on
// graceful changes (a node admitted, scaled away); a cut link leaves them blocked, and they are
// replaced. Model-parallel layouts are planned per node count and resharded from whole-state
// snapshots.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace cann {
namespace {

using test::TempDir;

const char kModel[] =
    "architecture: gpt\nhidden_size: 64\nnum_hidden_layers: 2\nnum_attention_heads: 2\n"
    "vocab_size: 256\nseq_length: 32\n";
constexpr int kSteps = 400;

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A process started in the background with its output in a file.
class Process {
 public:
  Process(const std::vector<std::string>& argv, const std::string& out) : out_(out) {
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      const int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<char*> cargv;
      for (auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
      cargv.push_back(nullptr);
      execv(cargv[0], cargv.data());
      _exit(127);
    }
  }
  ~Process() { stop(); }
  void interrupt() { kill(pid_, SIGINT); }
  void stop() {
    if (pid_ > 0 && !reaped_) {
      kill(-pid_, SIGKILL);
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      reaped_ = true;
    }
  }
  // Exit status (-1 on timeout).
  int wait(double timeout_s) {
    const double end = now_s() + timeout_s;
    while (now_s() < end) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  std::string output() const { return test::read_text(out_); }

 private:
  std::string out_;
  pid_t pid_ = -1;
  bool reaped_ = false;
};

std::vector<nlohmann::json> log_lines(const std::string& path, bool events) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("event") == events) out.push_back(j);
  }
  return out;
}

// The first event of that name: a pointer into `ev`, so never into a temporary (has_event).
const nlohmann::json* find_event(const std::vector<nlohmann::json>& ev, const std::string& name) {
  for (const auto& e : ev)
    if (e["event"] == name) return &e;
  return nullptr;
}
const nlohmann::json* find_event(std::vector<nlohmann::json>&&, const std::string&) = delete;

bool has_event(const std::vector<nlohmann::json>& ev, const std::string& name) {
  return find_event(ev, name) != nullptr;
}

class MultiProcElasticNodesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
    if (std::system("command -v ip >/dev/null 2>&1") != 0) GTEST_SKIP() << "iproute2 missing";
    if (std::system("command -v redis-server >/dev/null 2>&1") != 0)
      GTEST_SKIP() << "redis-server missing";
    suffix_ = std::to_string(getpid() % 100000);
    ns_[0] = "cel1-" + suffix_;
    ns_[1] = "cel2-" + suffix_;
    veth_[0] = "cev1-" + suffix_;
    veth_[1] = "cev2-" + suffix_;
    const std::string script =
        "set -e; ip netns add " + ns_[0] + "; ip netns add " + ns_[1] + "; ip link add " +
        veth_[0] + " type veth peer name " + veth_[1] + "; ip link set " + veth_[0] + " netns " +
        ns_[0] + "; ip link set " + veth_[1] + " netns " + ns_[1] + "; ip -n " + ns_[0] +
        " addr add 10.232.0.1/24 dev " + veth_[0] + "; ip -n " + ns_[1] +
        " addr add 10.232.0.2/24 dev " + veth_[1] + "; ip -n " + ns_[0] + " link set " + veth_[0] +
        " up; ip -n " + ns_[1] + " link set " + veth_[1] + " up; ip -n " + ns_[0] +
        " link set lo up; ip -n " + ns_[1] + " link set lo up";
    ASSERT_EQ(std::system(("(" + script + ") 2>&1").c_str()), 0) << "netns setup failed";
    ready_ = true;
    password_ = "cann-" + suffix_;
    rdzv_ = "redis://:" + password_ + "@10.232.0.1:6379";
    test::write_text(dir_.file("m.yaml"), kModel);
    start_redis();
  }
  void TearDown() override {
    if (!ready_) return;
    for (const std::string& ns : ns_)
      std::system(("ip netns pids " + ns + " | xargs -r kill -9 2>/dev/null").c_str());
    redis_.reset();
    // A SIGKILLed agent cannot remove its snapshot directory; this test's job ids end in suffix_.
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
      const std::string name = e.path().filename();
      if (name.rfind("cann-train-snap-", 0) == 0 &&
          name.find("-" + suffix_ + "-") != std::string::npos)
        std::filesystem::remove_all(e.path());
    }
    std::system(("ip netns del " + ns_[0] + " 2>/dev/null; ip netns del " + ns_[1] + " 2>/dev/null")
                    .c_str());
  }

  void start_redis() {
    redis_ = std::make_unique<Process>(
        std::vector<std::string>{"/usr/sbin/ip", "netns", "exec", ns_[0], "redis-server", "--port",
                                 "6379", "--bind", "10.232.0.1", "--requirepass", password_,
                                 "--save", "", "--appendonly", "no"},
        dir_.file("redis.txt"));
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
  }

  // One node's agent in namespace `node` (0 or 1), writing into `run`'s directory.
  std::unique_ptr<Process> start_node(int node, const std::string& run, const std::string& job,
                                      const std::vector<std::string>& extra = {}) {
    const std::string model = model_.empty() ? dir_.file("m.yaml") : model_;
    std::vector<std::string> argv = {"/usr/sbin/ip",
                                     "netns",
                                     "exec",
                                     ns_[node],
                                     CANN_TRAIN_BINARY,
                                     "run",
                                     "--model",
                                     model,
                                     "--steps",
                                     std::to_string(steps_),
                                     "--batch-size",
                                     std::to_string(batch_),
                                     "--seq-len",
                                     "32",
                                     "--sample-tokens",
                                     "0",
                                     "--eval-every",
                                     "0",
                                     "--eval-batches",
                                     "1",
                                     "--monitor",
                                     "off",
                                     "--threads",
                                     "1",
                                     "--quiet",
                                     "--nproc-per-node",
                                     std::to_string(nproc_),
                                     "--elastic",
                                     "--nnodes",
                                     "1:2",
                                     "--rdzv",
                                     rdzv_,
                                     "--rdzv-id",
                                     job,
                                     "--rdzv-timeout",
                                     "60",
                                     "--comm-timeout",
                                     "10",
                                     "--log-json",
                                     run + "/log.jsonl",
                                     "--checkpoint-dir",
                                     run + "/ck",
                                     "--checkpoint-every",
                                     "100"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<Process>(argv, run + "/node" + std::to_string(node) + ".txt");
  }

  static bool wait_for_step(const std::string& run, int step, double timeout_s = 90) {
    const std::string needle = "{\"step\":" + std::to_string(step) + ",";
    const double end = now_s() + timeout_s;
    while (now_s() < end) {
      if (test::read_text(run + "/log.jsonl").find(needle) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  // Every step logged, from 1 to steps_; a restart goes back at most one step before the
  // highest logged (the newest snapshot any node held); `exact`: no step logged twice.
  void expect_no_step_lost(const std::string& run, bool exact) const {
    std::vector<int> steps;
    for (const auto& j : log_lines(run + "/log.jsonl", false))
      if (j.contains("step")) steps.push_back(j["step"].get<int>());
    ASSERT_FALSE(steps.empty());
    EXPECT_EQ(steps.front(), 1);
    EXPECT_EQ(steps.back(), steps_);
    int highest = 0;
    for (size_t i = 1; i < steps.size(); ++i) {
      highest = std::max(highest, steps[i - 1]);
      if (steps[i] == steps[i - 1] + 1) continue;
      EXPECT_FALSE(exact) << "step " << steps[i] << " after " << steps[i - 1];
      EXPECT_LE(steps[i], steps[i - 1]) << "a step was skipped at " << i;
      EXPECT_GE(steps[i], highest - redo_) << "more than " << redo_ << " step(s) re-done at " << i;
    }
  }

  std::string final_data(const std::string& run) const {
    char name[32];
    std::snprintf(name, sizeof(name), "step-%08d", steps_);
    return test::read_text(run + "/ck/" + name + "/data.bin");
  }

  std::string out(const std::unique_ptr<Process>& a, const std::unique_ptr<Process>& b) const {
    return "node A:\n" + a->output() + "\nnode B:\n" + b->output();
  }

  struct Lost {
    std::string output;  // the survivor's
    std::string scaled;  // the scaled event's detail
    std::string restored;  // the state_restored event's detail
    std::string plan;      // the first snapshot_plan event's detail (the launch's layout)
  };
  // A whole node dies (agent and workers SIGKILLed) at step 120 of a run with `extra` flags:
  // the other trains on at world size 2 from the committed step and finishes.
  Lost lose_a_node(const std::string& job, const std::vector<std::string>& extra = {}) {
    const std::string run = dir_.path();
    auto a = start_node(0, run, job, extra);
    auto b = start_node(1, run, job, extra);
    EXPECT_TRUE(wait_for_step(run, 120)) << out(a, b);
    // The node without rank 0 dies (rank 0 writes the step log; when its node dies, the line of
    // the step it was finishing can be missing although the step is committed,
    // docs/elastic.md). Rank 0 printed its checkpoint of step 100.
    const int victim = a->output().find("[rank 0]") != std::string::npos ? 1 : 0;
    const double killed_at = now_s();
    // Every process of the node but the store (which runs in the first namespace).
    std::system(("for p in $(ip netns pids " + ns_[victim] +
                 "); do [ \"$(cat /proc/$p/comm)\" = redis-server ] || kill -9 $p; done")
                    .c_str());
    auto& survivor = victim == 1 ? a : b;
    EXPECT_EQ(survivor->wait(180), 0) << out(a, b);
    const auto ev = log_lines(run + "/log.jsonl", true);
    const auto* scaled = find_event(ev, "scaled");
    const auto* restored = find_event(ev, "state_restored");
    const auto* resumed = find_event(ev, "training_resumed");
    EXPECT_TRUE(scaled && restored && resumed) << out(a, b);
    if (resumed)
      std::printf("node killed (%s): training again %.2f s later\n", job.c_str(),
                  (*resumed)["time"].get<double>() - killed_at);
    // A step trained again after the restore, on the new layout, has the loss it had before
    // (the same parameters and samples; float sums in another order): the state was resharded.
    std::map<int, double> first;
    int repeated = 0;
    for (const auto& j : log_lines(run + "/log.jsonl", false)) {
      if (!j.contains("step") || !j.contains("loss")) continue;
      const int step = j["step"].get<int>();
      const double loss = j["loss"].get<double>();
      if (auto [it, fresh] = first.emplace(step, loss); !fresh) {
        ++repeated;
        EXPECT_NEAR(loss, it->second, 1e-3 * it->second) << "step " << step;
      }
    }
    std::printf("%d step(s) trained again after the restore; %s\n", repeated,
                test::line_with(survivor->output(), "generation 1 of").c_str());
    const std::string both = std::to_string(2 * nproc_), one = std::to_string(nproc_);
    if (scaled) {
      EXPECT_NE((*scaled)["detail"].get<std::string>().find("world size " + both + " -> " + one),
                std::string::npos)
          << (*scaled)["detail"];
    }
    if (restored) {
      EXPECT_NE((*restored)["detail"].get<std::string>().find("world size " + one),
                std::string::npos)
          << (*restored)["detail"];
    }
    expect_no_step_lost(run, false);
    // The peers' connections closed with their processes: the survivors kept theirs.
    EXPECT_NE(survivor->output().find("workers keep their processes"), std::string::npos)
        << survivor->output();
    EXPECT_NE(survivor->output().find("its process kept"), std::string::npos) << survivor->output();
    const auto* plan = find_event(ev, "snapshot_plan");
    return {survivor->output(), scaled ? (*scaled)["detail"].get<std::string>() : "",
            restored ? (*restored)["detail"].get<std::string>() : "",
            plan ? (*plan)["detail"].get<std::string>() : ""};
  }

  // A second node starts while the first trains alone: it is admitted at the next generation
  // (world 2 -> 4), its ranks receive the state from a rank of the first (under model
  // parallelism, `extra`, the first node's parts assembled), and no step is trained twice
  // (admission stops the workers at a step boundary).
  void admit_a_late_node(const std::string& job, const std::vector<std::string>& extra = {}) {
    steps_ = 2000;  // long enough to outlast the admission (a few seconds)
    const std::string run = dir_.path();
    auto a = start_node(0, run, job, extra);
    ASSERT_TRUE(wait_for_step(run, 80)) << a->output();
    auto b = start_node(1, run, job, extra);
    EXPECT_EQ(a->wait(180), 0) << out(a, b);
    EXPECT_EQ(b->wait(30), 0) << out(a, b);
    const auto ev = log_lines(run + "/log.jsonl", true);
    const auto* scaled = find_event(ev, "scaled");
    ASSERT_TRUE(scaled) << out(a, b);
    EXPECT_NE((*scaled)["detail"].get<std::string>().find("world size 2 -> 4"), std::string::npos);
    if (extra.empty()) {
      EXPECT_NE(b->output().find("received the snapshot of step"), std::string::npos) << out(a, b);
    } else {
      // Under model parallelism the first node's parts are assembled into the whole state
      // over the new world, which each rank slices onto the new layout.
      const auto* restored = find_event(ev, "state_restored");
      ASSERT_TRUE(restored) << out(a, b);
      EXPECT_NE((*restored)["detail"].get<std::string>().find(
                    "assembled from the snapshots of 2 ranks of generation 0, world size 4"),
                std::string::npos)
          << (*restored)["detail"];
    }
    // The first node's workers stopped at the agreed step and rejoined in their processes.
    EXPECT_NE(a->output().find("workers keep their processes"), std::string::npos) << a->output();
    EXPECT_NE(a->output().find("for the next generation"), std::string::npos) << a->output();
    expect_no_step_lost(run, true);
  }

  TempDir dir_{"cann-elastic-nodes"};
  std::string suffix_, ns_[2], veth_[2], password_, rdzv_;
  std::unique_ptr<Process> redis_;
  bool ready_ = false;
  int steps_ = kSteps;
  int redo_ = 1;  // steps a recovery may train again (a snapshot interval, or a checkpoint's)
  int nproc_ = 2, batch_ = 8;  // processes per node, global batch
  std::string model_;  // empty: the small gpt of m.yaml
};

// Under model parallelism each agent plans at launch the layout of every node count (the
// planner prices the spec in CANN_TRAIN_HOME, which the test brings so that no calibration
// runs): the workers see it through the environment they inherit.
class MultiProcElasticNodesModelParallelTest : public MultiProcElasticNodesTest {
 protected:
  void SetUp() override {
    MultiProcElasticNodesTest::SetUp();
    test::write_text(home_.file("clusters/local.yaml"),
                     "name: local\nnodes: 1\ndevices_per_node: 2\n"
                     "device: {name: cpu-core, peak_tflops: 0.1, memory_gb: 8, "
                     "memory_bandwidth_GBps: 20, compute_units: 1, gemm_efficiency: 1.0, "
                     "memory_efficiency: 1.0, precision: fp32}\n"
                     "intra_node: {bandwidth_GBps: 8, latency_us: 20, topology: switch, "
                     "efficiency: 1.0}\n"
                     "inter_node: {bandwidth_GBps: 1.5, latency_us: 50, efficiency: 1.0}\n");
    setenv("CANN_TRAIN_HOME", home_.path().c_str(), 1);
  }
  void TearDown() override {
    unsetenv("CANN_TRAIN_HOME");
    MultiProcElasticNodesTest::TearDown();
  }

  TempDir home_{"cann-elastic-home"};
};

// (a) A whole node dies (agent and workers SIGKILLed): the other finishes on the smaller world.
TEST_F(MultiProcElasticNodesTest, NodeKilledTheOtherFinishes) {
  const Lost lost = lose_a_node("kill-" + suffix_);
  EXPECT_TRUE(has_event(log_lines(dir_.path() + "/log.jsonl", true), "failure_detected"));
}

// (a') A node lost before any in-memory snapshot (snapshots further apart than the run got): no
// node holds a copy, so every rank loads the newest disk checkpoint (step 100) and the run trains
// the steps since then again and finishes.
TEST_F(MultiProcElasticNodesTest, NodeLostBeforeAnySnapshotResumesFromDisk) {
  redo_ = 100;
  lose_a_node("nosnap-" + suffix_, {"--snapshot-every", "100000"});
  const auto ev = log_lines(dir_.path() + "/log.jsonl", true);
  const auto* restored = find_event(ev, "state_restored");
  ASSERT_TRUE(restored);
  const std::string detail = (*restored)["detail"].get<std::string>();
  EXPECT_NE(detail.find("step 100 from"), std::string::npos) << detail;
  EXPECT_NE(detail.find("no in-memory snapshot on any node"), std::string::npos) << detail;
}

// --max-restarts bounds failure generations across nodes too: with 0, a lost node ends the job
// (exit 1, naming the bound) instead of shrinking it.
TEST_F(MultiProcElasticNodesTest, MaxRestartsEndsTheJob) {
  const std::string run = dir_.path();
  auto a = start_node(0, run, "max-" + suffix_, {"--max-restarts", "0"});
  auto b = start_node(1, run, "max-" + suffix_, {"--max-restarts", "0"});
  ASSERT_TRUE(wait_for_step(run, 60)) << out(a, b);
  std::system(("ip netns pids " + ns_[1] + " | xargs -r kill -9").c_str());
  EXPECT_EQ(a->wait(60), 1) << out(a, b);
  EXPECT_NE(a->output().find("after 0 restarts (--max-restarts 0)"), std::string::npos)
      << a->output();
  EXPECT_FALSE(has_event(log_lines(run + "/log.jsonl", true), "scaled"));
}

// (d) A node started later is admitted at the next generation and receives the state.
TEST_F(MultiProcElasticNodesTest, LateNodeIsAdmitted) {
  admit_a_late_node("late-" + suffix_);
}

// (c) The store is killed and restarted (empty) mid-run: the job rides out the outage.
TEST_F(MultiProcElasticNodesTest, StoreRestartIsSurvived) {
  steps_ = 1000;  // the outage (2 s) falls well inside the run
  TempDir ref_dir("cann-elastic-ref");
  const std::string ref = ref_dir.path();
  {
    auto a = start_node(0, ref, "ref-" + suffix_);
    auto b = start_node(1, ref, "ref-" + suffix_);
    ASSERT_EQ(a->wait(120), 0) << out(a, b);
    ASSERT_EQ(b->wait(30), 0) << out(a, b);
  }
  const std::string run = dir_.path();
  auto a = start_node(0, run, "redis-" + suffix_);
  auto b = start_node(1, run, "redis-" + suffix_);
  ASSERT_TRUE(wait_for_step(run, 100)) << out(a, b);
  redis_->stop();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  start_redis();
  EXPECT_EQ(a->wait(120), 0) << out(a, b);
  EXPECT_EQ(b->wait(30), 0) << out(a, b);
  const std::string both = out(a, b);
  EXPECT_NE(both.find("does not answer"), std::string::npos) << both;
  EXPECT_NE(both.find("answers again"), std::string::npos) << both;
  EXPECT_FALSE(has_event(log_lines(run + "/log.jsonl", true), "scaled")) << both;
  expect_no_step_lost(run, true);
  const std::string got = final_data(run), want = final_data(ref);
  ASSERT_GT(want.size(), 100000u);
  EXPECT_TRUE(got == want) << "final parameters differ from the fault-free run";
}

// (b) One node's link goes down: the side holding the store notices the silence (agent
// heartbeat timeout), goes on alone and finishes.
TEST_F(MultiProcElasticNodesTest, LinkDownTheStoreSideFinishes) {
  const std::string run = dir_.path();
  auto a = start_node(0, run, "link-" + suffix_);
  auto b = start_node(1, run, "link-" + suffix_);
  ASSERT_TRUE(wait_for_step(run, 120)) << out(a, b);
  ASSERT_EQ(std::system(("ip -n " + ns_[1] + " link set " + veth_[1] + " down").c_str()), 0);
  EXPECT_EQ(a->wait(120), 0) << out(a, b);
  const auto ev = log_lines(run + "/log.jsonl", true);
  const auto* scaled = find_event(ev, "scaled");
  ASSERT_TRUE(scaled) << out(a, b);
  EXPECT_NE((*scaled)["detail"].get<std::string>().find("world size 4 -> 2"), std::string::npos);
  EXPECT_NE(a->output().find("agent heartbeat stale"), std::string::npos) << a->output();
  // No connection closed: the survivors stayed blocked in a collective and were replaced.
  EXPECT_EQ(a->output().find("workers keep their processes"), std::string::npos) << a->output();
  expect_no_step_lost(run, false);
}

// `cann-train scale` lowers the bounds below the running size: the surplus node stops at a step
// boundary and leaves with exit 0, the other trains on without redoing a step. A job the store
// does not know is a usage error (exit 2). `scale --auto` applies its policy's window once.
TEST_F(MultiProcElasticNodesTest, ScaleDownStopsTheSurplusNode) {
  steps_ = 2000;
  const std::string run = dir_.path();
  const std::string job = "scale-" + suffix_;
  auto a = start_node(0, run, job);
  auto b = start_node(1, run, job);
  ASSERT_TRUE(wait_for_step(run, 100)) << out(a, b);
  auto scale = [&](const std::string& id) {
    return test::run_command({"/usr/sbin/ip", "netns", "exec", ns_[0], CANN_TRAIN_BINARY, "scale",
                              "--job", id, "--rdzv", rdzv_, "--min-nodes", "1", "--max-nodes", "1"},
                             30);
  };
  const auto unknown = scale("no-such-job");
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("no elastic job 'no-such-job'"), std::string::npos);
  const auto r = scale(job);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("nodes 1..2 -> 1..1"), std::string::npos) << r.output;
  // Once the leader has acted (the scaled event), a policy whose one window covers the day
  // raises the bounds back, once, until interrupted.
  for (int i = 0; i < 3000 && !has_event(log_lines(run + "/log.jsonl", true), "scaled"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  test::write_text(run + "/policy.yaml",
                   "- {from: \"00:00\", to: \"00:00\", min_nodes: 1, max_nodes: 2}\n");
  {
    Process policy({"/usr/sbin/ip", "netns", "exec", ns_[0], CANN_TRAIN_BINARY, "scale", "--job",
                    job, "--rdzv", rdzv_, "--auto", run + "/policy.yaml", "--interval", "0.2"},
                   run + "/policy.txt");
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    policy.interrupt();
    EXPECT_EQ(policy.wait(10), 0) << policy.output();
    const std::string text = policy.output();
    EXPECT_NE(text.find("nodes 1..1 -> 1..2: window 00:00-00:00 in force"), std::string::npos)
        << text;
    EXPECT_EQ(text.find("in force", text.find("in force") + 1), std::string::npos)
        << "applied more than once: " << text;
  }
  EXPECT_EQ(a->wait(120), 0) << out(a, b);
  EXPECT_EQ(b->wait(30), 0) << out(a, b);
  EXPECT_NE(out(a, b).find("leaving the job"), std::string::npos) << out(a, b);
  // The node that stays kept its workers' processes.
  EXPECT_NE(out(a, b).find("workers keep their processes"), std::string::npos) << out(a, b);
  const auto ev = log_lines(run + "/log.jsonl", true);
  // The first change, by hand, carries its reason into the leader's event.
  const auto* bounds = find_event(ev, "bounds_changed");
  ASSERT_TRUE(bounds) << out(a, b);
  EXPECT_NE((*bounds)["detail"].get<std::string>().find("max_nodes 2 -> 1 (scale)"),
            std::string::npos)
      << (*bounds)["detail"];
  const auto* scaled = find_event(ev, "scaled");
  ASSERT_TRUE(scaled) << out(a, b);
  EXPECT_NE((*scaled)["detail"].get<std::string>().find("world size 4 -> 2"), std::string::npos);
  expect_no_step_lost(run, true);
}

// dp=2 x tp=2 over two nodes loses one: tp=2 fits the two ranks left (dp 2 -> 1), so the
// launch's split stands and the state is sliced onto it from the whole snapshot. Each node
// holds both tensor-parallel shards (data parallelism spans the nodes), so no snapshot is
// copied to the other node: the survivors' own parts are the whole state.
TEST_F(MultiProcElasticNodesModelParallelTest, ANodeLostUnderTensorParallelismKeepsTheSplit) {
  const Lost lost = lose_a_node("mp-tp-" + suffix_, {"--strategy", "tp=2"});
  EXPECT_NE(lost.plan.find("4 ranks hold 2 distinct parts (dense and expert): 2 on more than one "
                           "node, 0 copied to the next node"),
            std::string::npos)
      << lost.plan;
  EXPECT_NE(lost.scaled.find("-> dp=1,tp=2,pp=1,ep=1,cp=1,"), std::string::npos) << lost.scaled;
  EXPECT_EQ(lost.output.find("re-planned"), std::string::npos) << lost.output;
  EXPECT_NE(lost.restored.find("assembled from the snapshots of 4 ranks"), std::string::npos)
      << lost.restored;
}

// tp=2 x pp=2 needs four ranks: the node left alone trains the layout the planner chose for
// two, resharded from the whole state of the committed step.
TEST_F(MultiProcElasticNodesModelParallelTest, ANodeLostUnderTensorAndPipelineIsReplanned) {
  const Lost lost = lose_a_node("mp-tppp-" + suffix_, {"--strategy", "tp=2,pp=2"});
  // Every rank's part is its own (dp=1): each is copied to the other node.
  EXPECT_NE(lost.plan.find("4 ranks hold 4 distinct parts (dense and expert): 0 on more than one "
                           "node, 4 copied to the next node"),
            std::string::npos)
      << lost.plan;
  EXPECT_NE(lost.scaled.find("--strategy dp=1,tp=2,pp=2"), std::string::npos) << lost.scaled;
  EXPECT_NE(lost.output.find("re-planned from tp=2,pp=2"), std::string::npos) << lost.output;
  EXPECT_NE(lost.restored.find("assembled from the snapshots of 4 ranks"), std::string::npos)
      << lost.restored;
}

// Experts on both nodes (dp=4 x ep=4: two of the 8 experts per rank) and one node lost: the two
// ranks left hold every expert between them (the launch's split at ep=2, 4 a rank), from the
// whole state of the committed step.
TEST_F(MultiProcElasticNodesModelParallelTest, ANodeLostUnderExpertParallelismSpreadsItsExperts) {
  model_ = "deepseek_tiny";
  steps_ = 200;
  const Lost lost = lose_a_node("mp-ep-" + suffix_, {"--strategy", "ep=4"});
  // The dense tensors live on every rank; each rank's experts on it alone, copied.
  EXPECT_NE(lost.plan.find("4 ranks hold 5 distinct parts (dense and expert): 1 on more than one "
                           "node, 4 copied to the next node"),
            std::string::npos)
      << lost.plan;
  EXPECT_NE(lost.output.find("re-planned from ep=4"), std::string::npos) << lost.output;
  EXPECT_NE(lost.restored.find("assembled from the snapshots of 4 ranks"), std::string::npos)
      << lost.restored;
}

// Three ranks a node, dp=6 x ep=6 (a small GPT with 8 experts: 2, 2, 1, 1, 1, 1 a rank), one
// node lost: the three ranks left take the launch's split with its experts spread over them,
// 3, 3 and 2 a rank, restored from the whole state of the committed step.
TEST_F(MultiProcElasticNodesModelParallelTest, ANodeLostSpreadsItsExpertsUnevenly) {
  model_ = dir_.file("moe.yaml");
  test::write_text(model_, std::string(kModel) + "num_local_experts: 8\nnum_experts_per_tok: 2\n");
  nproc_ = 3;
  batch_ = 12;
  const Lost lost = lose_a_node("mp-ep-uneven-" + suffix_, {"--strategy", "ep=6"});
  EXPECT_NE(lost.scaled.find("-> dp=3,tp=1,pp=1,ep=3,"), std::string::npos) << lost.scaled;
  EXPECT_NE(lost.output.find("re-planned from ep=6, its 8 experts 3, 3, 2 a rank"),
            std::string::npos)
      << lost.output;
  EXPECT_NE(lost.restored.find("assembled from the snapshots of 6 ranks"), std::string::npos)
      << lost.restored;
}

// One node trains pp=2; a second joins and the job goes on at dp=2 x pp=2, the joiner's ranks
// receiving the whole state of the step the first stopped at: no step is trained twice.
TEST_F(MultiProcElasticNodesModelParallelTest, ANodeJoinsAPipelineRun) {
  admit_a_late_node("mp-join-" + suffix_, {"--strategy", "pp=2"});
}

}  // namespace
}  // namespace cann
