// Multi-node elastic membership without processes: the records' JSON, the leader's choice of the
// next generation's members (order, bounds, global batch), time-window scale policies, the
// node's snapshots across generations, and heartbeats through a store outage.
#include <gtest/gtest.h>

#include "ckpt/checkpoint.h"
#include "ckpt/replicas.h"
#include "comm/store.h"
#include "core/fs.h"
#include "elastic/heartbeat_monitor.h"
#include "elastic/node_membership.h"
#include "elastic/rendezvous.h"
#include "elastic/scale_policy.h"
#include "test_util.h"

namespace cann::elastic {
namespace {

NodeBounds bounds(int min_nodes, int max_nodes) {
  NodeBounds b;
  b.min_nodes = min_nodes;
  b.max_nodes = max_nodes;
  return b;
}

// Node 0 decides once what every node launches: the others take its record, an agent of node
// 0 started again takes the record instead of deciding again, and node 0's error reaches the
// others as its message (node 0 itself gets its own error back).
TEST(LaunchAgreementTest, NodeZeroDecidesOnceAndEveryNodeLaunchesThat) {
  auto store = comm::open_store("memory://launch-agreement");
  ASSERT_TRUE(store.ok()) << store.status().message();
  int decided = 0;
  auto decide = [&]() -> StatusOr<AgentConfig::NodeLaunch> {
    ++decided;
    return AgentConfig::NodeLaunch{2,
                                   {"run", "--strategy", "gbs=8,zero=1", "--seq-len", ""},
                                   8,
                                   {{1, "dp=2,pp=1,mbs=4,gbs=8"}, {2, "dp=2,tp=2,mbs=4,gbs=8"}}};
  };
  auto other = agree_on_launch(**store, "job/launch", false, decide, 0.0);
  EXPECT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("node 0 did not say what to launch within 0 s"),
            std::string::npos)
      << other.status().message();
  auto first = agree_on_launch(**store, "job/launch", true, decide, 5.0);
  ASSERT_TRUE(first.ok()) << first.status().message();
  for (bool decides : {false, true}) {
    auto got = agree_on_launch(**store, "job/launch", decides, decide, 5.0);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(got->nproc_per_node, 2);
    EXPECT_EQ(got->global_batch, 8);
    EXPECT_EQ(got->worker_args, first->worker_args);
    EXPECT_EQ(got->node_layouts, first->node_layouts);
    EXPECT_EQ(got->node_layouts.at(2), "dp=2,tp=2,mbs=4,gbs=8");
  }
  EXPECT_EQ(decided, 1);
  EXPECT_EQ(first->worker_args.back(), "");

  auto refuse = []() -> StatusOr<AgentConfig::NodeLaunch> {
    return InvalidArgument("no layout fits");
  };
  auto mine = agree_on_launch(**store, "job2/launch", true, refuse, 5.0);
  EXPECT_EQ(mine.status().code(), StatusCode::kInvalidArgument);
  auto theirs = agree_on_launch(**store, "job2/launch", false, refuse, 5.0);
  EXPECT_EQ(theirs.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(
      theirs.status().message().find("node 0 could not choose what to launch: no layout fits"),
      std::string::npos)
      << theirs.status().message();
}

TEST(NodeMembershipTest, RecordRoundTripsAndListsRanksPerNode) {
  NodeRecord r;
  r.generation = 3;
  r.nproc_per_node = 2;
  r.nodes = {4, 1};
  r.restarts = 2;
  r.graceful = true;
  r.reason = "admitting node 1";
  const std::string json = node_record_json(r);
  EXPECT_NE(json.find("\"world_size\":4"), std::string::npos) << json;
  // Ranks follow the order of the nodes: node 4 holds ranks 0-1, node 1 ranks 2-3.
  EXPECT_NE(json.find("{\"node\":4,\"rank\":1}"), std::string::npos) << json;
  EXPECT_NE(json.find("{\"node\":1,\"rank\":2}"), std::string::npos) << json;
  auto back = parse_node_record(json);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->generation, 3);
  EXPECT_EQ(back->nodes, (std::vector<int>{4, 1}));
  EXPECT_EQ(back->restarts, 2);
  EXPECT_TRUE(back->graceful);
  EXPECT_EQ(back->index_of(1), 1);
  EXPECT_EQ(back->index_of(7), -1);
  EXPECT_FALSE(parse_node_record("{\"generation\":1}").ok());
  EXPECT_FALSE(parse_bounds("{\"min_nodes\":3,\"max_nodes\":2}").ok());
}

TEST(NodeMembershipTest, SurvivorsKeepTheirOrderAndJoinersFollowById) {
  const NodeBounds b = bounds(1, 4);
  auto m = next_members({3, 0}, {5, 2}, b, 2, 0);
  ASSERT_TRUE(m);
  EXPECT_EQ(*m, (std::vector<int>{3, 0, 2, 5}));
  // Capped at max_nodes; the joiners with the highest ids wait.
  m = next_members({3, 0}, {5, 2}, bounds(1, 3), 2, 0);
  ASSERT_TRUE(m);
  EXPECT_EQ(*m, (std::vector<int>{3, 0, 2}));
  // Below min_nodes: no generation.
  EXPECT_FALSE(next_members({1}, {}, bounds(2, 4), 2, 0));
  EXPECT_FALSE(next_members({}, {}, bounds(1, 4), 2, 0));
}

TEST(NodeMembershipTest, WorldSizeMustDivideTheGlobalBatch) {
  // 3 nodes x 2 = 6 does not divide 8: two nodes go on, the third waits.
  auto m = next_members({0, 1, 2}, {}, bounds(1, 3), 2, 8);
  ASSERT_TRUE(m);
  EXPECT_EQ(*m, (std::vector<int>{0, 1}));
  // 12 over 1..3 nodes of 2: 3 nodes fit (6 divides 12).
  m = next_members({0, 1, 2}, {}, bounds(1, 3), 2, 12);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->size(), 3u);
  // Nothing between min and the nodes at hand fits.
  EXPECT_FALSE(next_members({0, 1, 2}, {}, bounds(3, 3), 2, 8));
  EXPECT_EQ(smallest_admissible(bounds(3, 5), 2, 16), 4);
  EXPECT_EQ(smallest_admissible(bounds(3, 3), 2, 16), 0);
  EXPECT_EQ(smallest_admissible(bounds(3, 3), 2, 0), 3);
}

TEST(NodeMembershipTest, SetBoundsNeedsARunningJob) {
  auto store = comm::open_store("memory://node-membership-bounds");
  ASSERT_TRUE(store.ok());
  auto missing = set_node_bounds(**store, "j", 1, 2, "test");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  NodeRecord r;
  r.nodes = {0, 1};
  ASSERT_TRUE((*store)->set("cann/j/membership", node_record_json(r)).ok());
  ASSERT_TRUE((*store)->set("cann/j/bounds", bounds_json(bounds(1, 2))).ok());
  auto old = set_node_bounds(**store, "j", 2, 3, "test");
  ASSERT_TRUE(old.ok()) << old.status().message();
  EXPECT_EQ(old->max_nodes, 2);
  auto now = parse_bounds(*(*store)->try_get("cann/j/bounds").value());
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->min_nodes, 2);
  EXPECT_EQ(now->max_nodes, 3);
  EXPECT_EQ(now->version, 1);
  r.state = JobState::kFinished;
  ASSERT_TRUE((*store)->set("cann/j/membership", node_record_json(r)).ok());
  EXPECT_EQ(set_node_bounds(**store, "j", 1, 1, "test").status().code(),
            StatusCode::kFailedPrecondition);
}

TEST(ScalePolicyTest, WindowsIncludingOneAcrossMidnight) {
  auto p = parse_scale_policy(
      "- {from: \"22:00\", to: \"06:00\", min_nodes: 2, max_nodes: 4}\n"
      "- {from: \"09:30\", to: \"18:00\", min_nodes: 1, max_nodes: 1}\n",
      "policy.yaml");
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ(window_in_force(*p, 23 * 60 + 30), 0u);
  EXPECT_EQ(window_in_force(*p, 5 * 60 + 59), 0u);
  EXPECT_EQ(window_in_force(*p, 6 * 60), std::nullopt);
  EXPECT_EQ(window_in_force(*p, 9 * 60 + 30), 1u);
  EXPECT_EQ(window_in_force(*p, 18 * 60), std::nullopt);
  // JSON, under "windows".
  auto j = parse_scale_policy(
      "{\"windows\": [{\"from\": \"00:00\", \"to\": \"00:00\", \"min_nodes\": 1, "
      "\"max_nodes\": 2}]}",
      "p.json");
  ASSERT_TRUE(j.ok()) << j.status().message();
  EXPECT_EQ(window_in_force(*j, 13 * 60), 0u);  // equal ends: the whole day
}

TEST(ScalePolicyTest, BadPoliciesNameTheWindowAndField) {
  auto bad = parse_scale_policy("- {from: \"25:00\", to: \"06:00\", min_nodes: 1, max_nodes: 2}",
                                "p.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("p.yaml: window 1"), std::string::npos);
  bad = parse_scale_policy("- {from: \"01:00\", to: \"06:00\", min_nodes: 3, max_nodes: 2}",
                           "p.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("min_nodes <= max_nodes"), std::string::npos);
  bad = parse_scale_policy("- {from: \"01:00\", to: \"06:00\", min: 1, max_nodes: 2}", "p.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown key 'min'"), std::string::npos);
  bad = parse_scale_policy("- {from: \"01:00\", min_nodes: 1, max_nodes: 2}", "p.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'to' is missing"), std::string::npos);
  EXPECT_FALSE(parse_scale_policy("[]", "p.yaml").ok());
  EXPECT_EQ(bad.status().exit_code(), 2);
}

// A store whose reads can be made to fail, as a restarting Redis does.
class FlakyStore : public comm::Store {
 public:
  explicit FlakyStore(std::shared_ptr<comm::Store> base) : base_(std::move(base)) {}
  bool down = false;
  Status set(const std::string& k, std::string_view v) override { return base_->set(k, v); }
  StatusOr<std::string> get(const std::string& k, std::chrono::milliseconds t) override {
    return base_->get(k, t);
  }
  StatusOr<std::optional<std::string>> try_get(const std::string& k) override {
    if (down) return IoError("connection refused");
    return base_->try_get(k);
  }
  StatusOr<int64_t> add(const std::string& k, int64_t d) override { return base_->add(k, d); }
  StatusOr<std::string> compare_set(const std::string& k, const std::optional<std::string>& e,
                                    std::string_view d) override {
    return base_->compare_set(k, e, d);
  }
  Status wait(const std::vector<std::string>& k, std::chrono::milliseconds t) override {
    return base_->wait(k, t);
  }
  StatusOr<bool> remove(const std::string& k) override { return base_->remove(k); }
  std::string address() const override { return "flaky"; }

 private:
  std::shared_ptr<comm::Store> base_;
};

TEST(NodeMembershipTest, AStoreOutageIsNotAStaleHeartbeat) {
  auto base = comm::open_store("memory://node-membership-outage");
  ASSERT_TRUE(base.ok());
  FlakyStore store(*base);
  HeartbeatMonitor m("job", 1.0, 60.0);
  m.start_generation(0, 1, 100.0);
  ASSERT_TRUE(store.set("job/heartbeat/rank0", "0 1 10 1").ok());
  EXPECT_FALSE(m.poll(store, {true}, 100.1));
  store.down = true;  // 5 s without an answer: nothing is judged
  for (double t = 100.5; t < 105.1; t += 0.5) EXPECT_FALSE(m.poll(store, {true}, t)) << t;
  store.down = false;  // back, the beat not rewritten yet: the clock restarted at the outage end
  EXPECT_FALSE(m.poll(store, {true}, 105.5));
  auto f = m.poll(store, {true}, 106.2);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->verdict, HeartbeatVerdict::kStale);
}

TEST(NodeMembershipTest, NodeSnapshotsAcrossGenerationsNewestFirstAndPruned) {
  test::TempDir root("cann-node-snapshots");
  float value = 1.0f;
  auto write = [&](const std::string& rank_dir, int64_t step) {
    ckpt::CheckpointWrite w;
    w.step = step;
    w.meta_json = "{}";
    w.sections.push_back({"params", &value, sizeof(value)});
    ASSERT_TRUE(ckpt::write_checkpoint(join_path(root.path(), rank_dir), w, 2).ok());
  };
  write("gen0/rank2", 40);
  write("gen0/rank2", 41);
  write("gen0/rank3", 41);
  write("gen1/rank0", 45);
  write("gen1/rank0", 44);
  auto copies = ckpt::list_node_snapshots(root.path());
  ASSERT_EQ(copies.size(), 5u);
  EXPECT_EQ(copies[0].step, 45);
  EXPECT_NE(copies[0].path.find("gen1/rank0/step-00000045"), std::string::npos);
  EXPECT_EQ(copies[1].step, 44);
  EXPECT_EQ(copies.back().step, 40);
  ckpt::prune_node_snapshots(root.path(), 2);
  copies = ckpt::list_node_snapshots(root.path());
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0].step, 45);
  EXPECT_EQ(copies[1].step, 44);
  EXPECT_TRUE(ckpt::list_node_snapshots(root.file("missing")).empty());
}

TEST(ScalePolicyTest, ScaleCommandUsageErrors) {
  test::TempDir dir("cann-scale-cli");
  test::write_text(dir.file("bad.yaml"),
                   "- {from: \"9am\", to: \"17:00\", min_nodes: 1, max_nodes: 2}\n");
  const std::string store = "redis://127.0.0.1:1";
  auto r =
      test::run_cann({"scale", "--job", "j", "--rdzv", store, "--auto", dir.file("bad.yaml")}, 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("bad.yaml: window 1: times must be \"HH:MM\""), std::string::npos)
      << r.output;
  r = test::run_cann({"scale", "--job", "j", "--rdzv", store, "--min-nodes", "2"}, 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = test::run_cann({"scale", "--job", "j", "--rdzv", store, "--min-nodes", "1", "--max-nodes",
                      "2", "--auto", dir.file("bad.yaml")},
                     60);
  // Bounds and --auto together are the outer bounds of the policy: the bad file is the error.
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("bad.yaml: window 1"), std::string::npos) << r.output;
  // An unreachable store is not a usage error: exit 1, one line naming it.
  r = test::run_cann(
      {"scale", "--job", "j", "--rdzv", store, "--min-nodes", "1", "--max-nodes", "2"}, 60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("cannot reach the job's store"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace cann::elastic
