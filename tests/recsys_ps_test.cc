// Parameter-server shards: the shard's step rules driven directly (a synchronous step sums the
// workers' gradients and applies them once; bounded staleness holds a fast worker back and
// times out naming the late one; admission after K sightings; eviction of stale rows), and
// real jobs of workers and shard processes: any split of the same global batch over workers
// and of the tables over shards trains exactly what one process trains; a killed or stopped
// shard ends the job in one line within the timeout.
#include <gtest/gtest.h>

#include <signal.h>

#include <cmath>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "fault_job.h"
#include "netns_nodes.h"
#include "recsys/ps_shard.h"
#include "recsys/rec_spec.h"
#include "recsys_shard_spec.h"
#include "test_util.h"

namespace cann::recsys {
namespace {

ShardConfig shard_config(int shard, int shards, int workers) {
  ShardConfig c;
  c.shard = shard;
  c.shards = shards;
  c.workers = workers;
  c.optimizer.lr = 0.5f;
  c.timeout = std::chrono::milliseconds(2000);
  return c;
}

std::vector<float> pull_row(ShardTables& t, int step, int table, int64_t r) {
  std::vector<float> out(3);
  EXPECT_TRUE(t.pull(0, step, table, &r, 1, out.data()).ok());
  return out;
}

TEST(ShardTables, SynchronousStepSumsTheWorkersGradientsAndAppliesThemOnce) {
  const RecSpec spec = tiny_shard_spec();
  // Shard 1 of 2 holds the odd rows: row 3 of table 0 is at slot 1.
  ShardTables two(spec, shard_config(1, 2, 2)), one(spec, shard_config(1, 2, 1));
  EXPECT_EQ(two.local_rows(0), 5);
  EXPECT_EQ(two.local_rows(1), 3);  // rows 1, 3, 5 of 7
  const std::vector<float> start = pull_row(two, 1, 0, 3);
  EXPECT_EQ(start, pull_row(one, 1, 0, 3));  // a row starts the same wherever it lives
  // Worker 0 pushes g0, worker 1 pushes g1 for row 3; the one-worker shard gets g0 + g1.
  const std::vector<float> g0 = {0.1f, -0.2f, 0.3f}, g1 = {0.4f, 0.5f, -0.6f};
  std::vector<float> sum(3);
  for (int c = 0; c < 3; ++c) sum[c] = g0[c] + g1[c];
  std::thread first([&] { EXPECT_TRUE(two.push(0, 1, {{3}, {}}, {g0, {}}).ok()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(two.row(0, 3), start);  // worker 0's push waits for worker 1's
  EXPECT_TRUE(two.push(1, 1, {{3}, {}}, {g1, {}}).ok());
  first.join();
  EXPECT_TRUE(one.push(0, 1, {{3}, {}}, {sum, {}}).ok());
  EXPECT_EQ(two.row(0, 3), one.row(0, 3));
  EXPECT_NE(two.row(0, 3), start);
}

TEST(ShardTables, AMissingWorkerIsNamedWhenTheStepTimesOut) {
  ShardTables t(tiny_shard_spec(), shard_config(0, 1, 3));
  std::thread w1([&] { EXPECT_TRUE(!t.push(1, 1, {{2}, {}}, {{1, 1, 1}, {}}).ok()); });
  const Status s = t.push(0, 1, {{2}, {}}, {{1, 1, 1}, {}});
  w1.join();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("step 1 waited 3.0 s for the gradients of worker(s) 2"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("hint"), std::string::npos);
}

TEST(ShardTables, BoundedStalenessHoldsTheFastWorkerBack) {
  ShardConfig c = shard_config(0, 1, 2);
  c.staleness = 1;
  c.timeout = std::chrono::milliseconds(300);
  ShardTables t(tiny_shard_spec(), c);
  int64_t r = 4;
  std::vector<float> out(3);
  // Worker 0 runs ahead: steps 1 and 2 need nothing from worker 1 (2 - 1 - 1 = 0).
  EXPECT_TRUE(t.pull(0, 1, 0, &r, 1, out.data()).ok());
  EXPECT_TRUE(t.push(0, 1, {{4}, {}}, {{1, 0, 0}, {}}).ok());
  EXPECT_TRUE(t.pull(0, 2, 0, &r, 1, out.data()).ok());
  EXPECT_TRUE(t.push(0, 2, {{4}, {}}, {{1, 0, 0}, {}}).ok());
  // Step 3 needs worker 1's step 1: it times out naming worker 1 ...
  const Status s = t.pull(0, 3, 0, &r, 1, out.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("for worker 1 to push step 1"), std::string::npos) << s.message();
  // ... and goes on once worker 1 pushed it (applied on arrival, not summed).
  EXPECT_TRUE(t.push(1, 1, {{4}, {}}, {{0, 1, 0}, {}}).ok());
  EXPECT_TRUE(t.pull(0, 3, 0, &r, 1, out.data()).ok());
  // A finished worker holds no one back.
  EXPECT_TRUE(t.finish(1).ok());
  EXPECT_TRUE(t.pull(0, 9, 0, &r, 1, out.data()).ok());
}

TEST(ShardTables, RowsAreAdmittedAfterKSightingsAndEvictedWhenStale) {
  ShardConfig c = shard_config(0, 1, 1);
  c.admit_after = 3;
  c.evict_after = 5;
  ShardTables t(tiny_shard_spec(), c);
  const std::vector<float> zeros(3, 0.0f);
  EXPECT_EQ(pull_row(t, 1, 1, 6), zeros);  // seen once: not admitted, reads as zeros
  // A gradient for a row not admitted is dropped.
  EXPECT_TRUE(t.push(0, 1, {{}, {6}}, {{}, {1, 1, 1}}).ok());
  EXPECT_EQ(pull_row(t, 2, 1, 6), zeros);
  EXPECT_EQ(t.admitted_rows(), 0);
  const std::vector<float> admitted = pull_row(t, 3, 1, 6);  // the third sighting admits it
  EXPECT_NE(admitted, zeros);
  EXPECT_EQ(t.admitted_rows(), 1);
  EXPECT_TRUE(t.push(0, 3, {{}, {6}}, {{}, {1, 1, 1}}).ok());
  const std::vector<float> trained = pull_row(t, 4, 1, 6);
  EXPECT_NE(trained, admitted);
  // Untouched from step 4 to step 10 (> 5 steps): evicted, counted from zero again.
  EXPECT_EQ(pull_row(t, 10, 1, 6), zeros);
  EXPECT_EQ(t.admitted_rows(), 0);
  EXPECT_EQ(pull_row(t, 11, 1, 6), zeros);
  EXPECT_EQ(pull_row(t, 12, 1, 6), admitted);  // readmitted from its initial value
}

TEST(ShardTables, RowsOfAnotherShardAreRefused) {
  ShardTables t(tiny_shard_spec(), shard_config(1, 2, 1));
  int64_t r = 2;  // an even row belongs to shard 0
  std::vector<float> out(3);
  const Status s = t.pull(0, 1, 0, &r, 1, out.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("row 2 of table 0 is not on this shard"), std::string::npos);
}

TEST(ShardTables, ASliceOfAHugeTableCostsOnlyTheRowsItTouched) {
  // 20M rows x 64 over 4 shards: 1.3 GB of address space per shard, of which a few touched
  // rows are resident (the mapping is backed on first write).
  auto spec = parse_rec_spec(
      "architecture: two_tower\nsparse_features: 2\nuser_features: 1\n"
      "table_rows: [20000000, 1000]\nembedding_dim: 64\ntower_mlp: [8]\n",
      "big.yaml");
  ASSERT_TRUE(spec.ok());
  ShardTables t(*spec, shard_config(2, 4, 1));
  EXPECT_EQ(t.local_rows(0), 5000000);
  std::vector<float> out(64);
  for (int64_t r = 2; r < 4000; r += 4) ASSERT_TRUE(t.pull(0, 1, 0, &r, 1, out.data()).ok());
  EXPECT_EQ(t.admitted_rows(), 1000);
}

// ------------------------------------------------------------------------ jobs of real processes

// The arguments of the comparison runs: synthetic dlrm_tiny, 40 steps of 384, one thread per
// process.
std::vector<std::string> compare_args() {
  return {"run", "--model",      "dlrm_tiny", "--steps",     "40",   "--batch-size",
          "384", "--eval-every", "20",        "--eval-rows", "6000", "--threads",
          "1"};
}

// A run's evaluation lines and its last progress line without its speed, which differs from run
// to run while the rest must not.
std::vector<std::string> lines_of(const std::string& out) {
  std::vector<std::string> lines;
  for (const char* step : {"eval step 20:", "eval step 40:", "step 40/40:"}) {
    std::string l = test::line_with(out, step);
    EXPECT_FALSE(l.empty()) << out;
    if (l.rfind("step 40/40:", 0) == 0) l = l.substr(0, l.find(", "));
    lines.push_back(l);
  }
  return lines;
}

std::vector<std::string> eval_lines(const std::vector<std::string>& extra) {
  std::vector<std::string> args = compare_args();
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = test::run_cann(args, 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return lines_of(r.output);
}

TEST(MultiProcRecsysPs, AnySplitOverWorkersAndShardsTrainsWhatOneProcessTrains) {
  const auto one = eval_lines({});
  std::printf("one process: %s | %s | %s\n", one[0].c_str(), one[1].c_str(), one[2].c_str());
  // Awkward splits: 3 workers (128 rows each), 3 shards of tables of 1000..20000 rows.
  for (const auto& [w, s] : std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {3, 2}, {2, 3}}) {
    SCOPED_TRACE(std::to_string(w) + " workers, " + std::to_string(s) + " shards");
    const auto got =
        eval_lines({"--nproc-per-node", std::to_string(w), "--ps-shards", std::to_string(s)});
    EXPECT_EQ(got, one);
  }
}

TEST(MultiProcRecsysPs, BoundedStalenessTrainsToTheSameQuality) {
  const auto r =
      test::run_cann({"run", "--model", "dlrm_tiny", "--steps", "300", "--batch-size", "256",
                      "--eval-every", "0", "--eval-rows", "20000", "--threads", "1",
                      "--nproc-per-node", "2", "--ps-shards", "2", "--ps-staleness", "2"},
                     120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto sync =
      test::run_cann({"run", "--model", "dlrm_tiny", "--steps", "300", "--batch-size", "256",
                      "--eval-every", "0", "--eval-rows", "20000", "--threads", "1"},
                     120);
  ASSERT_EQ(sync.exit_code, 0) << sync.output;
  auto auc = [](const std::string& out) {
    const std::string l = test::line_with(out, "eval step 300: auc ");
    return l.empty() ? 0.0 : std::stod(l.substr(20, 6));
  };
  std::printf("AUC: synchronous one process %.4f, staleness 2 over 2 workers %.4f\n",
              auc(sync.output), auc(r.output));
  EXPECT_NEAR(auc(r.output), auc(sync.output), 0.01);
}

TEST(MultiProcRecsysPs, CompressedDenseGradientsTrainToTheSameQuality) {
  // The dense gradients through 1-bit Adam and top-k (10%) after 30 fp32 steps: the AUC within
  // 0.01 of the uncompressed run's (the dense layers are a small part of what the model learns;
  // the rows, through the shards, are exact).
  auto run = [](const std::vector<std::string>& extra) {
    std::vector<std::string> args = {
        "run", "--model",          "dlrm_tiny", "--steps",     "300",   "--batch-size",
        "256", "--eval-every",     "0",         "--eval-rows", "20000", "--threads",
        "1",   "--nproc-per-node", "2",         "--ps-shards", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = test::run_cann(args, 120);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const std::string l = test::line_with(r.output, "eval step 300: auc ");
    return l.empty() ? 0.0 : std::stod(l.substr(20, 6));
  };
  const double plain = run({});
  for (const char* c : {"onebit", "topk:0.1", "bf16"}) {
    const double auc = run({"--compress", c, "--onebit-warmup", "30"});
    std::printf("AUC with --compress %s: %.4f (uncompressed %.4f)\n", c, auc, plain);
    EXPECT_NEAR(auc, plain, 0.01) << c;
  }
}

// A job of 2 workers and 2 shards (ranks 2 and 3) long enough to be caught mid-run.
std::vector<std::string> long_job(const std::string& extra_timeout) {
  return {"run", "--model",        "dlrm_tiny",  "--steps",          "1000000", "--eval-every",
          "0",   "--threads",      "1",          "--nproc-per-node", "2",       "--ps-shards",
          "2",   "--comm-timeout", extra_timeout};
}

TEST(MultiProcRecsysPs, AKilledShardEndsTheJobNamingIt) {
  test::TempDir dir;
  test::Job job(dir.path(), long_job("5"));
  ASSERT_TRUE(job.wait_for_output("step 100/", 60)) << job.output();
  const double t = job.signal_rank(3, SIGKILL);
  ASSERT_GT(t, 0);
  const int code = job.wait(30);
  std::printf("the job ended %.2f s after the kill with status %d\n", test::now_s() - t, code);
  EXPECT_NE(code, 0);
  EXPECT_NE(code, -1) << "hung";
  EXPECT_NE(job.output().find("rank 3"), std::string::npos) << job.output();
}

TEST(MultiProcRecsysPs, AStoppedShardEndsTheJobWithinTheTimeout) {
  test::TempDir dir;
  test::Job job(dir.path(), long_job("2"));
  ASSERT_TRUE(job.wait_for_output("step 100/", 60)) << job.output();
  const double t = job.signal_rank(2, SIGSTOP);
  ASSERT_GT(t, 0);
  const int code = job.wait(30);
  std::printf("the job ended %.2f s after the stop with status %d\n", test::now_s() - t, code);
  EXPECT_NE(code, 0);
  EXPECT_NE(code, -1) << "hung";
  EXPECT_NE(job.output().find("parameter-server shard 0"), std::string::npos) << job.output();
}

// Two nodes (network namespaces, redis rendezvous): one worker and one shard on each, the
// workers' dense group and every pull and push across the veth link.
class MultiProcRecsysNodes : public test::NetnsNodes {};

TEST_F(MultiProcRecsysNodes, WorkersAndShardsOnTwoNodesTrainWhatOneProcessTrains) {
  const auto one = eval_lines({});
  const std::string rdzv = start_redis(150);
  std::vector<std::future<test::CommandResult>> nodes;
  for (const std::string& ns : {ns1_, ns2_}) {
    std::vector<std::string> argv = {"/usr/sbin/ip", "netns", "exec", ns, CANN_TRAIN_BINARY};
    const auto args = compare_args();
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(),
                {"--nnodes", "2", "--nproc-per-node", "1", "--ps-shards", "2", "--rdzv", rdzv,
                 "--rdzv-id", "recsys-" + suffix_, "--rdzv-timeout", "60", "--comm-timeout", "30"});
    nodes.push_back(
        std::async(std::launch::async, [argv] { return test::run_command(argv, 120); }));
  }
  const auto a = nodes[0].get();
  const auto b = nodes[1].get();
  std::system(("ip netns pids " + ns1_ + " | xargs -r kill 2>/dev/null").c_str());
  redis_.get();
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_EQ(lines_of(a.output + b.output), one);
}

TEST(RecsysPsFlags, UsageErrorsAreOneLine) {
  test::expect_one_line_error(
      test::run_cann({"run", "--model", "dlrm_tiny", "--nproc-per-node", "2"}), 2,
      {"share its tables through parameter-server shards", "hint: add --ps-shards"});
  test::expect_one_line_error(test::run_cann({"run", "--model", "dlrm_tiny", "--nproc-per-node",
                                              "3", "--ps-shards", "1", "--batch-size", "512"}),
                              2, {"--batch-size 512 does not split over 3 workers"});
}

}  // namespace
}  // namespace cann::recsys
