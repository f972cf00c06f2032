// Unit tests of the fault-tolerance pieces below the agent: the background checkpoint writer
// (snapshot semantics, pacing, failures), the choice of in-memory snapshots after a failure,
// event lines under concurrent writers, and the heartbeat monitor's three verdicts.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/async_writer.h"
#include "ckpt/checkpoint.h"
#include "ckpt/replicas.h"
#include "comm/store.h"
#include "core/event_log.h"
#include "core/fs.h"
#include "elastic/heartbeat_monitor.h"
#include "elastic/worker_process.h"
#include "model/spec.h"
#include "plan/engine_support.h"
#include "test_util.h"

namespace cann {
namespace {

using test::TempDir;

ckpt::CheckpointWrite one_section(int64_t step, const std::vector<char>& data) {
  ckpt::CheckpointWrite w;
  w.step = step;
  w.meta_json = "{}";
  w.sections.push_back({"params", data.data(), data.size()});
  return w;
}

TEST(AsyncCheckpointWriterTest, WritesTheStateAsItWasAtSubmit) {
  TempDir dir;
  std::mutex mu;
  std::vector<ckpt::AsyncWriteResult> results;
  ckpt::AsyncCheckpointWriter writer(dir.file("ck"), ckpt::WriteOptions{2, 0.0},
                                     [&](const ckpt::AsyncWriteResult& r) {
                                       std::lock_guard lock(mu);
                                       results.push_back(r);
                                     });
  std::vector<char> state(100000, 'a');
  writer.submit(one_section(1, state));
  // The next "step" changes the buffer at once; the checkpoint must not see it.
  std::fill(state.begin(), state.end(), 'b');
  writer.submit(one_section(2, state));
  std::fill(state.begin(), state.end(), 'c');
  writer.submit(one_section(3, state));
  ASSERT_TRUE(writer.wait().ok());
  ASSERT_EQ(results.size(), 3u);
  for (const auto& r : results) EXPECT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(results[2].bytes, 100000u);
  // keep_last 2: step 1 pruned; steps 2 and 3 hold what they held at submit.
  auto listed = ckpt::list_checkpoints(dir.file("ck"));
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  for (char expected : {'c', 'b'}) {
    const std::string& path = (*listed)[expected == 'c' ? 0 : 1];
    auto ck = ckpt::read_checkpoint(path);
    ASSERT_TRUE(ck.ok()) << ck.status().message();
    EXPECT_EQ(ck->find("params")->data, std::vector<char>(100000, expected)) << path;
  }
}

// The writer copies into buffers it made ahead (prepare) or kept from the previous write:
// sections that grow, shrink, appear or go between checkpoints, larger or smaller than the
// prepared ones, must still come back exactly as submitted.
TEST(AsyncCheckpointWriterTest, ReusedBuffersFollowChangingSections) {
  TempDir dir;
  ckpt::AsyncCheckpointWriter writer(dir.file("ck"), ckpt::WriteOptions{8, 0.0},
                                     [](const ckpt::AsyncWriteResult&) {});
  writer.prepare({6000, 100, 5 << 20});
  const std::vector<std::vector<size_t>> layouts = {{5000, 70}, {200, 9000, 3}, {0, 4}, {6000}};
  std::vector<std::vector<std::vector<char>>> submitted;
  for (size_t k = 0; k < layouts.size(); ++k) {
    std::vector<std::vector<char>> data;
    ckpt::CheckpointWrite w;
    w.step = static_cast<int64_t>(k + 1);
    w.meta_json = "{}";
    for (size_t i = 0; i < layouts[k].size(); ++i)
      data.emplace_back(layouts[k][i], static_cast<char>('a' + 3 * k + i));
    for (size_t i = 0; i < data.size(); ++i)
      w.sections.push_back({"s" + std::to_string(i), data[i].data(), data[i].size()});
    writer.submit(w);
    for (auto& d : data) std::fill(d.begin(), d.end(), 'z');  // the next step's changes
    for (size_t i = 0; i < data.size(); ++i)
      std::fill(data[i].begin(), data[i].end(), static_cast<char>('a' + 3 * k + i));
    submitted.push_back(std::move(data));
  }
  ASSERT_TRUE(writer.wait().ok());
  auto listed = ckpt::list_checkpoints(dir.file("ck"));
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), layouts.size());
  for (const std::string& path : *listed) {
    auto ck = ckpt::read_checkpoint(path);
    ASSERT_TRUE(ck.ok()) << ck.status().message();
    const size_t k = static_cast<size_t>(ck->step - 1);
    ASSERT_LT(k, submitted.size());
    ASSERT_EQ(ck->sections.size(), submitted[k].size()) << path;
    for (size_t i = 0; i < submitted[k].size(); ++i)
      EXPECT_EQ(ck->find("s" + std::to_string(i))->data, submitted[k][i]) << path << " s" << i;
  }
}

TEST(AsyncCheckpointWriterTest, BandwidthCapPacesTheWrite) {
  // 3 MB at 20 MB/s: at least 0.15 s, whatever the disk's speed.
  TempDir dir;
  ckpt::AsyncCheckpointWriter writer(dir.file("ck"), ckpt::WriteOptions{1, 20e6}, nullptr);
  std::vector<char> state(3000000, 'x');
  const auto t0 = std::chrono::steady_clock::now();
  writer.submit(one_section(1, state));
  const double submit_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(writer.wait().ok());
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("submit %.3f s, paced write %.3f s\n", submit_s, total_s);
  EXPECT_GE(total_s, 0.14);
  EXPECT_LT(submit_s, total_s / 2) << "the caller waited for the paced write";
}

TEST(AsyncCheckpointWriterTest, FailedWriteIsReportedAndKeepsEarlierOnes) {
  TempDir dir;
  test::write_text(dir.file("blocker"), "x");
  std::string message;
  ckpt::AsyncCheckpointWriter writer(dir.file("blocker/ck"), ckpt::WriteOptions{},
                                     [&](const ckpt::AsyncWriteResult& r) {
                                       if (!r.status.ok()) message = r.status.message();
                                     });
  std::vector<char> state(10, 'x');
  writer.submit(one_section(4, state));
  Status s = writer.wait();
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(message.find("blocker"), std::string::npos) << message;
}

// The worked example of ckpt/replicas.h.
TEST(ReplicaPlanTest, CommittedStepIsTheNewestAndNeighboursBackUp) {
  TempDir dir;
  std::vector<char> data(8, 'x');
  const std::vector<std::vector<int>> steps = {{7, 8}, {6, 7}, {7, 8}};
  for (int r = 0; r < 3; ++r)
    for (int s : steps[r])
      ASSERT_TRUE(
          ckpt::write_checkpoint(dir.file("rank" + std::to_string(r)), one_section(s, data), 2)
              .ok());
  // Rank 1 died during step 8 before its snapshot; ranks 0 and 2 wrote step 8, whose
  // collectives rank 1 had finished: nothing is trained twice. Behind the step-8 copies come
  // the older steps' (each step's own copy first, then ring order), should none of step 8's
  // verify; every rank tries the same files step by step, so all fall back alike.
  ckpt::ReplicaPlan plan = ckpt::plan_replica_restore(dir.path(), 3);
  EXPECT_EQ(plan.step, 8);
  auto at = [&](int rank, int step) {
    return dir.file("rank" + std::to_string(rank) + "/step-0000000" + std::to_string(step));
  };
  const std::string r0 = at(0, 8), r2 = at(2, 8);
  EXPECT_EQ(plan.candidates[0],
            r0 + ";" + r2 + ";" + at(0, 7) + ";" + at(1, 7) + ";" + at(2, 7) + ";" + at(1, 6));
  EXPECT_EQ(plan.candidates[1],
            r2 + ";" + r0 + ";" + at(1, 7) + ";" + at(2, 7) + ";" + at(0, 7) + ";" + at(1, 6));
  EXPECT_EQ(plan.candidates[2],
            r2 + ";" + r0 + ";" + at(2, 7) + ";" + at(0, 7) + ";" + at(1, 7) + ";" + at(1, 6));

  // Once rank 1 has its own copy of step 8, it comes first, the others after in ring order.
  ASSERT_TRUE(ckpt::write_checkpoint(dir.file("rank1"), one_section(8, data), 2).ok());
  plan = ckpt::plan_replica_restore(dir.path(), 3);
  EXPECT_EQ(plan.step, 8);
  EXPECT_EQ(plan.candidates[1],
            at(1, 8) + ";" + r2 + ";" + r0 + ";" + at(1, 7) + ";" + at(2, 7) + ";" + at(0, 7));

  // Rank 1 lost its copies: it takes its neighbour's first.
  ASSERT_TRUE(remove_all(dir.file("rank1")).ok());
  plan = ckpt::plan_replica_restore(dir.path(), 3);
  EXPECT_EQ(plan.step, 8);
  EXPECT_EQ(plan.candidates[1], r2 + ";" + r0 + ";" + at(2, 7) + ";" + at(0, 7));
}

// A rank killed after its snapshot of step 9, ahead of the others (they were between step 9's
// collectives and their own snapshot of it): step 9 is committed, and its only copy comes first;
// should it be damaged, step 8's copies follow for everyone.
TEST(ReplicaPlanTest, ARankAheadHoldsTheOnlyCopyAndOlderStepsFollow) {
  TempDir dir;
  std::vector<char> data(8, 'x');
  const std::vector<std::vector<int>> steps = {{8}, {8, 9}};
  for (int r = 0; r < 2; ++r)
    for (int s : steps[r])
      ASSERT_TRUE(
          ckpt::write_checkpoint(dir.file("rank" + std::to_string(r)), one_section(s, data), 2)
              .ok());
  const ckpt::ReplicaPlan plan = ckpt::plan_replica_restore(dir.path(), 2);
  EXPECT_EQ(plan.step, 9);
  const std::string r1_9 = dir.file("rank1/step-00000009"), r0_8 = dir.file("rank0/step-00000008"),
                    r1_8 = dir.file("rank1/step-00000008");
  EXPECT_EQ(plan.candidates[0], r1_9 + ";" + r0_8 + ";" + r1_8);
  EXPECT_EQ(plan.candidates[1], r1_9 + ";" + r1_8 + ";" + r0_8);
  EXPECT_EQ(ckpt::snapshot_step(r1_9), 9);
  EXPECT_EQ(ckpt::snapshot_step("step-00000012"), 12);
  EXPECT_EQ(ckpt::snapshot_step(dir.file("rank1/.slot-0")), -1);
}

TEST(ReplicaPlanTest, NoSnapshotsMeansDisk) {
  TempDir dir;
  EXPECT_EQ(ckpt::plan_replica_restore(dir.path(), 4).step, -1);
  EXPECT_EQ(ckpt::plan_replica_restore(dir.file("missing"), 1).step, -1);
  // A world of one: its own copy only.
  std::vector<char> data(8, 'x');
  ASSERT_TRUE(ckpt::write_checkpoint(dir.file("rank0"), one_section(3, data), 2).ok());
  auto plan = ckpt::plan_replica_restore(dir.path(), 1);
  EXPECT_EQ(plan.step, 3);
  EXPECT_EQ(plan.candidates[0], dir.file("rank0/step-00000003"));
}

// Model parallelism (the second example of ckpt/replicas.h): a snapshot holds one rank's part,
// so each rank is offered its own copy and nothing else; a missing or foreign copy anywhere
// sends every rank to the disk checkpoint, with the reason.
TEST(ReplicaPlanTest, ModelParallelRanksTakeOnlyTheirOwnCopy) {
  TempDir dir;
  std::vector<char> data(8, 'x');
  auto write = [&](int rank, int step, int marked_rank, const std::string& layout) {
    ckpt::CheckpointWrite w = one_section(step, data);
    w.meta_json = ckpt::with_rank_snapshot_mark(w.meta_json, {layout, marked_rank});
    ASSERT_TRUE(ckpt::write_checkpoint(dir.file("rank" + std::to_string(rank)), w, 2).ok());
  };
  const std::string tp2 = "dp=1,tp=2,pp=1";
  write(0, 7, 0, tp2);
  write(0, 8, 0, tp2);
  write(1, 7, 1, tp2);
  ckpt::ReplicaPlan plan = ckpt::plan_replica_restore(dir.path(), 2);
  EXPECT_EQ(plan.step, 7);
  EXPECT_EQ(plan.candidates[0], dir.file("rank0/step-00000007"));
  EXPECT_EQ(plan.candidates[1], dir.file("rank1/step-00000007"));
  EXPECT_TRUE(plan.note.empty()) << plan.note;

  // Rank 1's copy holds rank 0's state: nobody loads a snapshot.
  ASSERT_TRUE(remove_all(dir.file("rank1")).ok());
  write(1, 7, 0, tp2);
  plan = ckpt::plan_replica_restore(dir.path(), 2);
  EXPECT_EQ(plan.step, -1);
  EXPECT_NE(plan.note.find("holds rank 0's state under " + tp2), std::string::npos) << plan.note;

  // Another layout's copy.
  ASSERT_TRUE(remove_all(dir.file("rank1")).ok());
  write(1, 7, 1, "dp=1,tp=1,pp=2");
  plan = ckpt::plan_replica_restore(dir.path(), 2);
  EXPECT_EQ(plan.step, -1);
  EXPECT_NE(plan.note.find("rank 0's is of " + tp2), std::string::npos) << plan.note;

  // Rank 1 has none: rank 0's copies serve nobody else.
  ASSERT_TRUE(remove_all(dir.file("rank1")).ok());
  plan = ckpt::plan_replica_restore(dir.path(), 2);
  EXPECT_EQ(plan.step, -1);
  EXPECT_NE(plan.note.find("rank 1 has no snapshot of step 8"), std::string::npos) << plan.note;
}

TEST(ReplicaPlanTest, RankSnapshotMarkRoundTrips) {
  const std::string meta = ckpt::with_rank_snapshot_mark("{\"a\":1}", {"dp=2,tp=2", 3});
  const auto mark = ckpt::rank_snapshot_mark(meta);
  ASSERT_TRUE(mark.has_value());
  EXPECT_EQ(mark->layout, "dp=2,tp=2");
  EXPECT_EQ(mark->rank, 3);
  EXPECT_NE(meta.find("\"a\":1"), std::string::npos);
  EXPECT_FALSE(ckpt::rank_snapshot_mark("{\"a\":1}").has_value());
  EXPECT_FALSE(ckpt::rank_snapshot_mark("not json").has_value());
  EXPECT_FALSE(ckpt::rank_snapshot_mark("{\"rank_snapshot\":{\"rank\":\"x\"}}").has_value());
}

// Snapshot roots of agents that were killed stay in memory until reboot; the next agent
// removes them. Only roots whose creator (pid and start time, in this pid namespace) is gone.
TEST(SnapshotRootTest, RootsOfEndedAgentsAreSweptAndOthersKept) {
  TempDir base("cann-snap-sweep");
  char link[64] = {};
  ASSERT_GT(::readlink("/proc/self/ns/pid", link, sizeof(link) - 1), 0);
  const std::string ns = std::to_string(std::strtoull(std::strchr(link, '[') + 1, nullptr, 10));
  const pid_t self = getpid();
  const long long start = elastic::process_start_ticks(self);
  ASSERT_GT(start, 0);
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);  // gone: its pid names no process now
  EXPECT_EQ(elastic::process_start_ticks(child), -1);
  auto root = [&](const std::string& mark) {
    const std::string dir = base.file("cann-train-snap-job-1" + mark + "-AbC123");
    EXPECT_TRUE(make_dirs(dir + "/rank0/step-00000003").ok());
    return dir;
  };
  const std::string live =
      root("-p" + std::to_string(self) + "s" + std::to_string(start) + "n" + ns);
  const std::string dead = root("-p" + std::to_string(child) + "s12345n" + ns);
  // This pid, another start time: the pid was reused by a process that did not make it.
  const std::string reused =
      root("-p" + std::to_string(self) + "s" + std::to_string(start + 1) + "n" + ns);
  const std::string other_ns = root("-p" + std::to_string(child) + "s12345n1");
  const std::string unmarked = base.file("cann-train-snap-job-2-XyZ789");
  ASSERT_TRUE(make_dirs(unmarked).ok());
  const std::string foreign =
      base.file("not-ours-p" + std::to_string(child) + "s1n" + ns + "-AAAAAA");
  ASSERT_TRUE(make_dirs(foreign).ok());

  EXPECT_EQ(elastic::sweep_stale_snapshot_roots(base.path()), 2);
  EXPECT_TRUE(is_directory(live));
  EXPECT_FALSE(is_directory(dead));
  EXPECT_FALSE(is_directory(reused));
  EXPECT_TRUE(is_directory(other_ns));
  EXPECT_TRUE(is_directory(unmarked));
  EXPECT_TRUE(is_directory(foreign));
  EXPECT_EQ(elastic::sweep_stale_snapshot_roots(base.path()), 0);
}

TEST(EventLogTest, LinesFromManyWritersStayWholeJson) {
  TempDir dir;
  const std::string path = dir.file("log.jsonl");
  constexpr int kThreads = 4, kEach = 200;
  {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        EventLog log;  // each its own descriptor, as the agent and rank 0 have
        ASSERT_TRUE(log.open(path).ok());
        for (int i = 0; i < kEach; ++i)
          ASSERT_TRUE(log.append({"checkpoint_saved", 1.5, t, i, std::string(300, 'a' + t)}).ok());
      });
    for (auto& th : threads) th.join();
  }
  std::ifstream in(path);
  int lines = 0;
  for (std::string line; std::getline(in, line); ++lines) {
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j.at("event"), "checkpoint_saved");
    EXPECT_EQ(j.at("detail").get<std::string>().size(), 300u);
  }
  EXPECT_EQ(lines, kThreads * kEach);
  EXPECT_EQ(event_json({"scaled", 2.25, -1, 3, "x"}),
            R"({"event":"scaled","time":2.25,"rank":null,"generation":3,"detail":"x"})");
}

class HeartbeatMonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = comm::open_store(
        "memory://heartbeat-" +
        std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    ASSERT_TRUE(s.ok());
    store_ = *s;
  }
  void beat(int rank, int gen, int step, int total, int seq) {
    ASSERT_TRUE(store_
                    ->set("job/heartbeat/rank" + std::to_string(rank),
                          std::to_string(gen) + " " + std::to_string(step) + " " +
                              std::to_string(total) + " " + std::to_string(seq))
                    .ok());
  }
  std::shared_ptr<comm::Store> store_;
};

TEST_F(HeartbeatMonitorTest, StaleBeatIsAFailureNamingTheRank) {
  elastic::HeartbeatMonitor m("job", 1.0, 30.0);
  m.start_generation(0, 2, 100.0);
  beat(0, 0, 0, 10, 1);
  beat(1, 0, 0, 10, 1);
  EXPECT_FALSE(m.poll(*store_, {true, true}, 100.1));
  EXPECT_TRUE(m.all_joined());
  beat(0, 0, 0, 10, 2);  // rank 1 stops beating
  EXPECT_FALSE(m.poll(*store_, {true, true}, 100.9));
  beat(0, 0, 0, 10, 3);
  auto f = m.poll(*store_, {true, true}, 101.2);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->rank, 1);
  EXPECT_NE(f->detail.find("stale"), std::string::npos) << f->detail;
  // An exited rank's heartbeat does not count.
  beat(0, 0, 0, 10, 4);
  EXPECT_FALSE(m.poll(*store_, {true, false}, 101.3));
}

TEST_F(HeartbeatMonitorTest, OldGenerationsBeatsDoNotCount) {
  elastic::HeartbeatMonitor m("job", 1.0, 5.0);
  m.start_generation(1, 1, 0.0);
  beat(0, 0, 50, 100, 9);  // left over from generation 0
  EXPECT_FALSE(m.poll(*store_, {true}, 1.0));
  EXPECT_FALSE(m.all_joined());
  auto f = m.poll(*store_, {true}, 5.5);
  ASSERT_TRUE(f);
  EXPECT_NE(f->detail.find("no heartbeat"), std::string::npos) << f->detail;
}

TEST_F(HeartbeatMonitorTest, NoProgressWhileBeatingIsAHang) {
  elastic::HeartbeatMonitor m("job", 1.0, 30.0);
  m.start_generation(0, 1, 0.0);
  double t = 0.0;
  int seq = 0;
  // Steps of 1 s each: the median is 1 s, the limit max(10 x 1 s, 5 s) = 10 s.
  for (int step = 0; step <= 4; ++step, t += 1.0) {
    beat(0, 0, step, 100, ++seq);
    EXPECT_FALSE(m.poll(*store_, {true}, t));
  }
  // Beating on, step stuck at 4 (reached at t = 4).
  for (; t < 13.9; t += 0.5) {
    beat(0, 0, 4, 100, ++seq);
    EXPECT_FALSE(m.poll(*store_, {true}, t)) << t;
  }
  beat(0, 0, 4, 100, ++seq);
  auto f = m.poll(*store_, {true}, 14.5);
  ASSERT_TRUE(f);
  EXPECT_NE(f->detail.find("no progress"), std::string::npos) << f->detail;
  // After the last step, work without steps (the final sample) is not a hang.
  m.start_generation(1, 1, 20.0);
  seq = 0;
  t = 20.0;
  for (int step = 96; step <= 100; ++step, t += 1.0) {
    beat(0, 1, step, 100, ++seq);
    EXPECT_FALSE(m.poll(*store_, {true}, t));
  }
  beat(0, 1, 100, 100, ++seq);
  EXPECT_FALSE(m.poll(*store_, {true}, t + 59.9)) << "heartbeat fresh, run done";
}

}  // namespace
}  // namespace cann

namespace cann {
namespace {

TEST(ElasticFlagsTest, BadCombinationsAreUsageErrors) {
  auto r = test::run_cann(
      {"run", "--elastic", "--nnodes", "2", "--rdzv", "redis://127.0.0.1:1", "--steps", "1"}, 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("needs --rdzv redis://HOST:PORT and --rdzv-id ID"), std::string::npos)
      << r.output;
  r = test::run_cann({"run", "--nnodes", "1:2", "--steps", "1"}, 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("a range of nodes needs --elastic"), std::string::npos) << r.output;
  r = test::run_cann({"run", "--elastic", "--nnodes", "2:1", "--steps", "1"}, 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("1 <= MIN <= MAX"), std::string::npos) << r.output;
  // 2 or 3 nodes of 2 workers: neither 4 nor 6 divides a global batch of 5.
  r = test::run_cann(
      {"run", "--elastic", "--nnodes", "2:3", "--nproc-per-node", "2", "--batch-size", "5",
       "--rdzv", "redis://127.0.0.1:1", "--rdzv-id", "x", "--steps", "1"},
      60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("divides the global batch 5"), std::string::npos) << r.output;
  r = test::run_cann({"run", "--elastic", "--heartbeat-interval", "0.5", "--heartbeat-timeout",
                      "0.2", "--steps", "1"},
                     60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--heartbeat-timeout 0.2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("must exceed --heartbeat-interval 0.5"), std::string::npos) << r.output;
  r = test::run_cann({"run", "--max-restarts", "-1"}, 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

// Across elastic nodes each generation has its own world: a dp= given at launch follows it
// (the trainer says so); on fixed nodes a dp= that the processes do not match is refused.
TEST(ElasticLayoutRulesTest, ADataParallelDegreeFollowsTheWorldAcrossElasticNodes) {
  auto spec = model::load_model_spec("gpt_tiny");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  auto s = plan::parse_strategy("dp=4");
  ASSERT_TRUE(s.ok());
  plan::EngineShape shape;
  shape.world = 2;
  const Status fixed = plan::engine_supports(*s, *spec, shape);
  EXPECT_EQ(fixed.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(fixed.message().find("processes were started"), std::string::npos) << fixed.message();
  shape.elastic_nodes = true;
  EXPECT_TRUE(plan::engine_supports(*s, *spec, shape).ok());
  shape.world = 6;
  EXPECT_TRUE(plan::engine_supports(*s, *spec, shape).ok());
}

}  // namespace
}  // namespace cann
