// `cann-train scale`: the auto-scaler's rules (auto_scaler.h) signal by signal, the launch
// range the bounds stay in, and the command itself against a job's store: found from the
// environment or this machine's job registry, following a queue file and the job's measured
// throughput, each change written with its reason.
#include <gtest/gtest.h>
#include <unistd.h>

#include <ctime>

#include "comm/store.h"
#include "debug/job_registry.h"
#include "elastic/auto_scaler.h"
#include "elastic/node_membership.h"
#include "monitor/snapshot.h"
#include "test_util.h"

namespace cann::elastic {
namespace {

AutoScaleConfig bounds_1_to_4() {
  AutoScaleConfig c;
  c.min_nodes = 1;
  c.max_nodes = 4;
  c.cooldown_s = 0;
  return c;
}

ScaleSignals on_nodes(int nodes) {
  ScaleSignals s;
  s.nodes = nodes;
  s.minute = 12 * 60;
  return s;
}

TEST(AutoScalerTest, AQueueYieldsTheNodesAndAnEmptyOneGivesThemBack) {
  AutoScaler a(bounds_1_to_4());
  ScaleSignals s = on_nodes(4);
  s.queued = 3;
  auto c = a.decide(s, 1, 4, 0.0);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->min_nodes, 1);
  EXPECT_EQ(c->max_nodes, 1);
  EXPECT_EQ(c->reason, "3 jobs queued: yielding nodes down to 1");
  EXPECT_FALSE(a.decide(s, 1, 1, 1.0));  // already there: nothing to do
  s.queued = 0;
  c = a.decide(s, 1, 1, 2.0);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->max_nodes, 4);
  EXPECT_EQ(c->reason, "queue empty: up to 4 nodes");
}

TEST(AutoScalerTest, WindowsAreClippedToTheBounds) {
  AutoScaleConfig cfg = bounds_1_to_4();
  auto windows = parse_scale_policy(
      "- {from: \"08:00\", to: \"18:00\", min_nodes: 2, max_nodes: 8}\n"
      "- {from: \"22:00\", to: \"06:00\", min_nodes: 1, max_nodes: 1}\n",
      "policy.yaml");
  ASSERT_TRUE(windows.ok()) << windows.status().message();
  cfg.windows = *windows;
  AutoScaler a(cfg);
  auto c = a.decide(on_nodes(2), 1, 1, 0.0);  // noon
  ASSERT_TRUE(c);
  EXPECT_EQ(c->min_nodes, 2);
  EXPECT_EQ(c->max_nodes, 4);  // 8 is beyond the bounds
  EXPECT_EQ(c->reason, "window 08:00-18:00 in force");
  ScaleSignals night = on_nodes(4);
  night.minute = 23 * 60;
  c = a.decide(night, 2, 4, 1.0);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->max_nodes, 1);
  // Outside every window the bounds stay; without windows, the bounds themselves.
  ScaleSignals evening = on_nodes(1);
  evening.minute = 20 * 60;
  EXPECT_FALSE(a.decide(evening, 1, 1, 2.0));
  AutoScaler plain(bounds_1_to_4());
  c = plain.decide(evening, 1, 1, 3.0);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->max_nodes, 4);
  EXPECT_EQ(c->reason, "bounds 1..4");
}

TEST(AutoScalerTest, ThroughputShedsOrTakesOneNodeAtATime) {
  AutoScaleConfig cfg = bounds_1_to_4();
  cfg.min_node_tokens_per_s = 1000;
  AutoScaler a(cfg);
  ScaleSignals s = on_nodes(4);
  s.node_tokens_per_s = 800;
  auto c = a.decide(s, 1, 4, 0.0);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->max_nodes, 3);
  EXPECT_EQ(c->reason.rfind("throughput 800 tokens/s per node on 4 nodes < 1000: shedding a node",
                            0),
            0u)
      << c->reason;
  s.nodes = 3;
  s.node_tokens_per_s = 1100;  // between the threshold and 1.25x: hold
  EXPECT_FALSE(a.decide(s, 1, 3, 1.0));
  s.node_tokens_per_s = 1300;  // room for one more
  c = a.decide(s, 1, 3, 2.0);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->max_nodes, 4);
  // Never below the band's minimum, never above its maximum.
  s.nodes = 1;
  s.node_tokens_per_s = 10;
  EXPECT_FALSE(a.decide(s, 1, 1, 3.0));
  s.nodes = 4;
  s.node_tokens_per_s = 5000;
  EXPECT_FALSE(a.decide(s, 1, 4, 4.0));
  // Unmeasured throughput: the band alone.
  s.node_tokens_per_s.reset();
  c = a.decide(s, 1, 2, 5.0);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->max_nodes, 4);
}

TEST(AutoScalerTest, TheCooldownHoldsAChangeAndSaysSoOnce) {
  AutoScaleConfig cfg = bounds_1_to_4();
  cfg.cooldown_s = 60;
  AutoScaler a(cfg);
  ScaleSignals s = on_nodes(4);
  s.queued = 1;
  ASSERT_TRUE(a.decide(s, 1, 4, 100.0));  // the first change is free
  s.queued = 0;
  EXPECT_FALSE(a.decide(s, 1, 1, 110.0));
  EXPECT_EQ(a.held(), "cooldown: 1..4 (queue empty: up to 4 nodes) waits 50 s more");
  EXPECT_FALSE(a.decide(s, 1, 1, 120.0));
  EXPECT_EQ(a.held(), "");  // the same hold is not said again
  auto c = a.decide(s, 1, 1, 161.0);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->max_nodes, 4);
}

TEST(ScaleBoundsTest, TheLaunchRangeIsKeptAndEnforced) {
  auto store = comm::open_store("memory://scale-bounds-launch");
  ASSERT_TRUE(store.ok());
  NodeRecord r;
  r.nodes = {0, 1};
  ASSERT_TRUE((*store)->set("cann/j/membership", node_record_json(r)).ok());
  NodeBounds b;
  b.min_nodes = b.launch_min = 1;
  b.max_nodes = b.launch_max = 3;
  b.reason = "launch";
  ASSERT_TRUE((*store)->set("cann/j/bounds", bounds_json(b)).ok());
  auto old = set_node_bounds(**store, "j", 2, 2, "maintenance on node 2");
  ASSERT_TRUE(old.ok()) << old.status().message();
  auto now = get_node_bounds(**store, "j");
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->min_nodes, 2);
  EXPECT_EQ(now->max_nodes, 2);
  EXPECT_EQ(now->launch_min, 1);
  EXPECT_EQ(now->launch_max, 3);
  EXPECT_EQ(now->reason, "maintenance on node 2");
  EXPECT_EQ(now->version, 1);
  auto beyond = set_node_bounds(**store, "j", 1, 5, "more");
  ASSERT_FALSE(beyond.ok());
  EXPECT_EQ(beyond.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(beyond.status().message().find("launch range --nnodes 1:3"), std::string::npos)
      << beyond.status().message();
}

// A job's records in a file store, as its agents and rank 0 write them.
struct FakeJob {
  test::TempDir dir{"cann-scale-job"};
  std::string url = "file://" + dir.file("store");
  std::shared_ptr<comm::Store> store;

  explicit FakeJob(int nodes, int min_nodes, int max_nodes) {
    auto s = comm::open_store(url);
    EXPECT_TRUE(s.ok()) << s.status().message();
    store = *s;
    NodeRecord r;
    for (int i = 0; i < nodes; ++i) r.nodes.push_back(i);
    EXPECT_TRUE(store->set("cann/job7/membership", node_record_json(r)).ok());
    NodeBounds b;
    b.launch_min = 1;
    b.launch_max = 3;
    b.min_nodes = min_nodes;
    b.max_nodes = max_nodes;
    EXPECT_TRUE(store->set("cann/job7/bounds", bounds_json(b)).ok());
  }
  NodeBounds bounds() const {
    auto b = get_node_bounds(*store, "job7");
    EXPECT_TRUE(b.ok());
    return b.ok() ? *b : NodeBounds{};
  }
};

TEST(MultiProcScaleTest, AutoFollowsTheQueueOfAJobNamedByTheEnvironment) {
  FakeJob job(2, 1, 2);
  const std::string queue = job.dir.file("queue");
  test::write_text(queue, "0\n");
  // The queue fills a second in; the command is stopped after three.
  auto r = test::run_command(
      {"/bin/sh", "-c",
       "(sleep 1; echo 2 > " + queue + ") & exec " + CANN_TRAIN_BINARY +
           " scale --auto --queue " + queue + " --cooldown 0 --interval 0.1"},
      3.0, {"CANN_TRAIN_JOB=job7", "CANN_TRAIN_STORE=" + job.url});
  EXPECT_NE(r.output.find("job job7: nodes 1..2 -> 1..3: queue empty: up to 3 nodes"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("nodes 1..3 -> 1..1: 2 jobs queued: yielding nodes down to 1"),
            std::string::npos)
      << r.output;
  const NodeBounds b = job.bounds();
  EXPECT_EQ(b.max_nodes, 1);
  EXPECT_EQ(b.reason, "2 jobs queued: yielding nodes down to 1");
}

TEST(MultiProcScaleTest, AutoShedsANodeWhenThroughputPerNodeFalls) {
  FakeJob job(3, 1, 3);
  monitor::RankSnapshot snap;
  snap.time = static_cast<double>(std::time(nullptr));
  snap.step = 40;
  snap.tokens_per_s = 1500;  // the job's, over 3 nodes: 500 per node
  ASSERT_TRUE(job.store->set("cann/job7/monitor/rank0", snap.to_json()).ok());
  auto r = test::run_cann({"scale", "--job", "job7", "--rdzv", job.url, "--auto",
                           "--min-node-throughput", "600", "--interval", "0.1"},
                          1.5);
  EXPECT_NE(r.output.find("nodes 1..3 -> 1..2: throughput 500 tokens/s per node on 3 nodes < "
                          "600: shedding a node"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(job.bounds().max_nodes, 2);
}

TEST(MultiProcScaleTest, TheJobIsFoundInTheRegistryAndBadBoundsAreOneLine) {
  FakeJob job(2, 1, 3);
  test::TempDir home("cann-scale-home");
  ::setenv("CANN_TRAIN_HOME", home.path().c_str(), 1);
  ASSERT_TRUE(debug::register_job({"job7", job.url, "job7", 6, static_cast<int>(::getpid())}).ok());
  auto r = test::run_command({CANN_TRAIN_BINARY, "scale", "--min-nodes", "2", "--max-nodes", "2"},
                             60, {"CANN_TRAIN_HOME=" + home.path()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(job.bounds().min_nodes, 2);
  EXPECT_EQ(job.bounds().reason, "scale");
  // Beyond the launch range, min above max, a signal without --auto: usage, one line each.
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--min-nodes", "1", "--max-nodes", "5"},
           {"--min-nodes", "3", "--max-nodes", "2"},
           {"--queue", "q"},
           {"--auto"}}) {
    std::vector<std::string> argv = {CANN_TRAIN_BINARY, "scale"};
    argv.insert(argv.end(), args.begin(), args.end());
    r = test::run_command(argv, 60, {"CANN_TRAIN_HOME=" + home.path()});
    EXPECT_EQ(r.exit_code, 2) << args[0] << ": " << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
  debug::unregister_job("job7");
  ::unsetenv("CANN_TRAIN_HOME");
}

}  // namespace
}  // namespace cann::elastic
