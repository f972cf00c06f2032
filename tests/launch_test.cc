// Launching and supervising workers through the real binary: local multi-process training,
// failure of a worker (really killed), torchrun-style environments, and two "nodes" in network
// namespaces joined by a veth link with redis-server as the rendezvous store.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "netns_nodes.h"
#include "test_util.h"
#include "train/comm_config.h"

namespace cann {
namespace {

using test::run_cann;

const char kModel[] =
    "architecture: gpt\nhidden_size: 32\nnum_hidden_layers: 1\nnum_attention_heads: 2\n"
    "vocab_size: 256\nseq_length: 32\n";

std::vector<std::string> train_args(const std::string& model, int steps, int batch = 4) {
  return {"run",
          "--model",
          model,
          "--steps",
          std::to_string(steps),
          "--batch-size",
          std::to_string(batch),
          "--seq-len",
          "16",
          "--sample-tokens",
          "0",
          "--eval-every",
          "0",
          "--eval-batches",
          "1"};
}

TEST(MultiProcLaunchTest, TwoWorkersTrainAndPrefixOutput) {
  test::TempDir dir;
  test::write_text(dir.file("m.yaml"), kModel);
  auto args = train_args(dir.file("m.yaml"), 4);
  args.insert(args.end(), {"--nproc-per-node", "2", "--log-json", dir.file("log.jsonl")});
  const test::CommandResult r = run_cann(args, 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 0] "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2 ranks"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("done: steps 1..4"), std::string::npos) << r.output;
  // Only rank 0 shows progress.
  EXPECT_EQ(r.output.find("[rank 1] step"), std::string::npos) << r.output;
  std::ifstream log(dir.file("log.jsonl"));
  int lines = 0;
  for (std::string l; std::getline(log, l);) ++lines;
  EXPECT_EQ(lines, 4);
}

TEST(MultiProcLaunchTest, DataParallelMatchesSingleProcess) {
  // The same global batch split over 2 ranks gives the same loss curve as one process, up to
  // fp32 summation order (the per-rank means are averaged instead of one mean over the batch).
  test::TempDir dir;
  test::write_text(dir.file("m.yaml"), kModel);
  auto single = train_args(dir.file("m.yaml"), 6);
  single.insert(single.end(), {"--log-json", dir.file("single.jsonl"), "--threads", "1"});
  ASSERT_EQ(run_cann(single, 120).exit_code, 0);
  auto dp = train_args(dir.file("m.yaml"), 6);
  dp.insert(dp.end(), {"--log-json", dir.file("dp.jsonl"), "--nproc-per-node", "2"});
  const auto r = run_cann(dp, 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream a(dir.file("single.jsonl")), b(dir.file("dp.jsonl"));
  std::regex loss_re("\"loss\":([-0-9.e]+)");
  std::string la, lb;
  int n = 0;
  while (std::getline(a, la) && std::getline(b, lb)) {
    std::smatch ma, mb;
    ASSERT_TRUE(std::regex_search(la, ma, loss_re));
    ASSERT_TRUE(std::regex_search(lb, mb, loss_re));
    EXPECT_NEAR(std::stod(ma[1]), std::stod(mb[1]), 2e-4) << "step " << n + 1;
    ++n;
  }
  EXPECT_EQ(n, 6);
}

// The pids whose parent is `parent` (from /proc/*/stat: "pid (comm) state ppid ...").
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> pids;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(f)), {});
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) pids.push_back(std::stoi(name));
  }
  std::sort(pids.begin(), pids.end());
  return pids;
}

TEST(MultiProcLaunchTest, KilledWorkerIsNamedAndOthersStop) {
  test::TempDir dir;
  test::write_text(dir.file("m.yaml"), kModel);
  auto args = train_args(dir.file("m.yaml"), 100000, 6);
  args.insert(args.end(), {"--nproc-per-node", "3", "--comm-timeout", "20"});
  std::vector<std::string> argv = {CANN_TRAIN_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  auto result = std::async(std::launch::async, [&] { return test::run_command(argv, 120); });
  // Wait for the agent and its three workers to be up and training.
  pid_t victim = -1;
  for (int i = 0; i < 200 && victim < 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      const std::string name = e.path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      const auto kids = children_of(std::stoi(name));
      if (kids.size() == 3) {
        std::ifstream cmd("/proc/" + name + "/cmdline");
        std::string c((std::istreambuf_iterator<char>(cmd)), {});
        if (c.find("--nproc-per-node") != std::string::npos &&
            c.find(dir.path()) != std::string::npos)
          victim = kids[1];
      }
    }
  }
  ASSERT_GT(victim, 0) << "workers not found";
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const auto t0 = std::chrono::steady_clock::now();
  kill(victim, SIGKILL);
  const test::CommandResult r = result.get();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("(pid " + std::to_string(victim) + ") was killed by signal 9"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("the other 2 workers stopped"), std::string::npos) << r.output;
  EXPECT_LT(took, 15.0) << "the survivors did not stop promptly";
}

TEST(MultiProcLaunchTest, TorchrunStyleEnvironment) {
  // Two workers started by hand the way torchrun starts them: RANK, WORLD_SIZE, LOCAL_RANK,
  // LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; rank 0 serves the TCP store.
  test::TempDir dir;
  test::write_text(dir.file("m.yaml"), kModel);
  const int port = test::free_tcp_port();
  std::vector<std::future<test::CommandResult>> ranks;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> argv = {CANN_TRAIN_BINARY};
    auto args = train_args(dir.file("m.yaml"), 3);
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--threads", "1"});
    std::vector<std::string> env = {
        "RANK=" + std::to_string(r),       "WORLD_SIZE=2",
        "LOCAL_RANK=" + std::to_string(r), "LOCAL_WORLD_SIZE=2",
        "MASTER_ADDR=127.0.0.1",           "MASTER_PORT=" + std::to_string(port)};
    ranks.push_back(
        std::async(std::launch::async, [argv, env] { return test::run_command(argv, 120, env); }));
  }
  const auto r0 = ranks[0].get();
  const auto r1 = ranks[1].get();
  EXPECT_EQ(r0.exit_code, 0) << r0.output;
  EXPECT_EQ(r1.exit_code, 0) << r1.output;
  EXPECT_NE(r0.output.find("done: steps 1..3"), std::string::npos) << r0.output;
}

// Two "nodes" (tests/netns_nodes.h): one agent per node with two workers each; collectives
// between nodes go over the veth link.
class MultiProcNetnsTest : public test::NetnsNodes {};

TEST_F(MultiProcNetnsTest, TwoNodesTimesTwoProcessesTrain) {
  test::TempDir dir;
  test::write_text(dir.file("m.yaml"), kModel);
  const std::string rdzv = start_redis(150);
  std::vector<std::future<test::CommandResult>> nodes;
  for (const std::string& ns : {ns1_, ns2_}) {
    std::vector<std::string> argv = {"/usr/sbin/ip", "netns", "exec", ns, CANN_TRAIN_BINARY};
    auto args = train_args(dir.file("m.yaml"), 4);
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--nnodes", "2", "--nproc-per-node", "2", "--rdzv", rdzv, "--rdzv-id",
                             "netns-" + suffix_, "--rdzv-timeout", "60", "--comm-timeout", "30"});
    nodes.push_back(
        std::async(std::launch::async, [argv] { return test::run_command(argv, 120); }));
  }
  const auto a = nodes[0].get();
  const auto b = nodes[1].get();
  std::system(("ip netns pids " + ns1_ + " | xargs -r kill 2>/dev/null").c_str());
  redis_.get();
  EXPECT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(b.exit_code, 0) << b.output;
  const std::string both = a.output + b.output;
  EXPECT_NE(both.find("4 ranks"), std::string::npos) << both;
  EXPECT_NE(both.find("done: steps 1..4"), std::string::npos) << both;
  EXPECT_EQ(both.find(password_), std::string::npos) << "the password leaked into the output";
}

// The cluster user's path across nodes: `bench tune` on both nodes measures the link between
// them into comm.yaml, and `run --strategy auto --comm-config` plans the layout on node 0 with
// it; both nodes train what node 0 chose. Then the same as an elastic job (--nnodes 1:2): the
// node that joins first plans among the layouts such a job trains, and both train that.
TEST_F(MultiProcNetnsTest, TuneThenAutoPlansAcrossTheNodes) {
  test::TempDir dir;
  test::write_text(dir.file("m.yaml"), kModel);
  const std::string rdzv = start_redis(280);
  const std::vector<std::string> env = {"CANN_TRAIN_HOME=" + dir.file("home")};
  auto on_both = [&](const std::string& id,
                     const std::function<std::vector<std::string>(int)>& args,
                     const std::vector<std::string>& nodes_args = {"--nnodes", "2"}) {
    std::vector<std::future<test::CommandResult>> nodes;
    int n = 0;
    for (const std::string& ns : {ns1_, ns2_}) {
      std::vector<std::string> argv = {"/usr/sbin/ip", "netns", "exec", ns, CANN_TRAIN_BINARY};
      auto a = args(n++);
      argv.insert(argv.end(), a.begin(), a.end());
      argv.insert(argv.end(), nodes_args.begin(), nodes_args.end());
      argv.insert(argv.end(), {"--nproc-per-node", "2", "--rdzv", rdzv, "--rdzv-id", id + suffix_,
                               "--rdzv-timeout", "60"});
      nodes.push_back(std::async(std::launch::async,
                                 [argv, env] { return test::run_command(argv, 200, env); }));
    }
    std::vector<test::CommandResult> out;
    for (auto& f : nodes) out.push_back(f.get());
    return out;
  };
  const auto tune = on_both("tune-", [&](int n) {
    return std::vector<std::string>{"bench",
                                    "tune",
                                    "--sizes",
                                    "4K:256K",
                                    "--seconds-per-size",
                                    "0.02",
                                    "--channels",
                                    "1,2",
                                    "--bucket-steps",
                                    "0",
                                    "--output",
                                    dir.file("comm" + std::to_string(n) + ".yaml")};
  });
  for (const auto& r : tune) ASSERT_EQ(r.exit_code, 0) << r.output;
  auto t = train::read_comm_tuning(dir.file("comm0.yaml"));
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->nnodes, 2);
  ASSERT_TRUE(t->inter_node.has_value());
  EXPECT_GT(t->inter_node->bandwidth_GBps, 0);
  EXPECT_EQ(test::read_text(dir.file("comm0.yaml")), test::read_text(dir.file("comm1.yaml")));

  const auto runs = on_both("auto-", [&](int n) {
    auto a = train_args(dir.file("m.yaml"), 3);
    a.insert(a.end(), {"--strategy", "auto", "--comm-config",
                       dir.file("comm" + std::to_string(n) + ".yaml")});
    return a;
  });
  const auto elastic =
      on_both("auto-elastic-",
              [&](int n) {
                auto a = train_args(dir.file("m.yaml"), 3);
                a.insert(a.end(), {"--strategy", "auto", "--comm-config",
                                   dir.file("comm" + std::to_string(n) + ".yaml"), "--elastic"});
                return a;
              },
              {"--nnodes", "1:2"});
  std::system(("ip netns pids " + ns1_ + " | xargs -r kill 2>/dev/null").c_str());
  redis_.get();
  for (const auto& r : runs) EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::string both = runs[0].output + runs[1].output;
  EXPECT_NE(both.find("auto: planned"), std::string::npos) << both;
  EXPECT_NE(both.find("for 2 nodes x 2 cores"), std::string::npos) << both;
  EXPECT_NE(both.find("between nodes"), std::string::npos) << both;
  EXPECT_NE(both.find("comm config "), std::string::npos) << both;
  EXPECT_NE(both.find("done: steps 1..3"), std::string::npos) << both;

  for (const auto& r : elastic) EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::string twice = elastic[0].output + elastic[1].output;
  // One plan, printed by the node that made it; both agents launch its processes per node.
  const size_t planned = twice.find("auto: planned");
  ASSERT_NE(planned, std::string::npos) << twice;
  EXPECT_EQ(twice.find("auto: planned", planned + 1), std::string::npos) << twice;
  EXPECT_NE(twice.find("for 2 nodes x 2 cores"), std::string::npos) << twice;
  const size_t chose = twice.find("chose ");
  ASSERT_NE(chose, std::string::npos) << twice;
  const int per_node = twice.compare(chose, 15, "chose 1 process") == 0 ? 1 : 2;
  const std::string joined = "(" + std::to_string(per_node) + " workers per node";
  const size_t first = twice.find(joined);
  ASSERT_NE(first, std::string::npos) << twice;
  EXPECT_NE(twice.find(joined, first + 1), std::string::npos) << twice;
  EXPECT_NE(twice.find("done: steps 1..3"), std::string::npos) << twice;
}

}  // namespace
}  // namespace cann
