// A lost parameter-server shard under --elastic: the tables kept in files that outlive the shard
// (a shard process killed at any instruction, really killed, reopens at a step it applied whole,
// and the steps sent again then train exactly what an uninterrupted shard trains), files of
// another layout or a memory file system too small are one-line errors, and real jobs whose
// shard is killed or stopped mid-run finish with the very numbers of a run left alone; a killed
// worker, which --elastic does not replace, ends the job in one line.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <future>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fault_job.h"
#include "netns_nodes.h"
#include "recsys/ps_shard.h"
#include "recsys/rec_spec.h"
#include "test_util.h"

namespace cann::recsys {
namespace {

// Two tables of 40,000 and 30,000 rows of width 16 on one shard, so a step changes thousands of
// rows and a kill lands inside an apply as often as between them.
RecSpec wide_spec() {
  auto s = parse_rec_spec(
      "architecture: dlrm\ndense_features: 2\nsparse_features: 2\ntable_rows: [40000, 30000]\n"
      "hash_ids: false\nembedding_dim: 16\nbottom_mlp: [16]\ntop_mlp: [1]\n",
      "elastic_shard_test.yaml");
  EXPECT_TRUE(s.ok()) << s.status().message();
  return *s;
}

// Where the agent keeps them: a memory file system when there is one.
std::string memory_fs() {
  return access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "";
}

ShardConfig files_config(const std::string& dir, int workers) {
  ShardConfig c;
  c.workers = workers;
  c.optimizer.kind = SparseOptimizer::kLazyAdam;
  c.optimizer.lr = 0.05f;
  c.admit_after = 2;  // sightings counted across steps, and across a kill
  c.evict_after = 3;  // rows evicted and readmitted on the way
  c.timeout = std::chrono::milliseconds(20000);
  c.state_dir = dir;
  return c;
}

// Worker w's rows of table t at step `step`: a third of the table, chosen by a hash, distinct;
// five patterns, repeating.
const std::vector<int64_t>& rows_of(int step, int w, int t, int64_t n) {
  static std::vector<int64_t> patterns[5][2][2];
  std::vector<int64_t>& rows = patterns[step % 5][w][t];
  if (!rows.empty()) return rows;
  for (int64_t r = 0; r < n; ++r) {
    const uint64_t h = (static_cast<uint64_t>(r) * 0x9E3779B97F4A7C15ull) ^
                       (static_cast<uint64_t>(step % 5) << 40) ^ (static_cast<uint64_t>(w) << 50) ^
                       (static_cast<uint64_t>(t) << 56);
    if ((h >> 29) % 3 == 0) rows.push_back(r);
  }
  return rows;
}

// Steps [from, to] of two workers, each pulling its rows and pushing gradients made from them.
void run_steps(ShardTables& t, const RecSpec& spec, int from, int to) {
  auto worker = [&](int w) {
    for (int step = from; step <= to; ++step) {
      std::vector<std::vector<int64_t>> rows(2);
      std::vector<std::vector<float>> grads(2);
      for (int table = 0; table < 2; ++table) {
        rows[table] = rows_of(step, w, table, spec.table_rows[table]);
        std::vector<float> pulled(rows[table].size() * 16);
        ASSERT_TRUE(
            t.pull(w, step, table, rows[table].data(), rows[table].size(), pulled.data()).ok());
        grads[table].resize(pulled.size());
        for (size_t i = 0; i < pulled.size(); ++i)
          grads[table][i] = 0.1f * pulled[i] + 0.01f * static_cast<float>((i + step) % 7) - 0.03f;
      }
      ASSERT_TRUE(t.push(w, step, rows, grads).ok()) << "step " << step;
    }
  };
  std::thread a(worker, 0), b(worker, 1);
  a.join();
  b.join();
}

// Every row of both tables, as the shard reads them.
std::vector<float> all_rows(ShardTables& t, const RecSpec& spec) {
  std::vector<float> out;
  for (int table = 0; table < 2; ++table)
    for (int64_t r = 0; r < spec.table_rows[table]; ++r) {
      const std::vector<float> v = t.row(table, r);
      out.insert(out.end(), v.begin(), v.end());
    }
  return out;
}

TEST(ShardFiles, TablesInFilesReopenAtTheLastStepAndTrainOnAsIfNeverClosed) {
  const RecSpec spec = wide_spec();
  test::TempDir dir;
  ShardConfig anonymous = files_config("", 2);
  ShardTables reference(spec, anonymous);
  run_steps(reference, spec, 1, 8);
  {
    auto t = ShardTables::open(spec, files_config(dir.path(), 2));
    ASSERT_TRUE(t.ok()) << t.status().message();
    EXPECT_EQ((*t)->restored_step(), -1);
    run_steps(**t, spec, 1, 5);
  }
  auto t = ShardTables::open(spec, files_config(dir.path(), 2));
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ((*t)->restored_step(), 5);
  EXPECT_FALSE((*t)->undid_apply());
  run_steps(**t, spec, 6, 8);
  EXPECT_EQ(all_rows(**t, spec), all_rows(reference, spec));
  EXPECT_EQ((*t)->admitted_rows(), reference.admitted_rows());
}

TEST(ShardFiles, AShardKilledAnywhereReopensAtAWholeStepAndTheRepeatedStepsTrainTheSame) {
  const RecSpec spec = wide_spec();
  constexpr int kSteps = 14;
  for (int p = 0; p < 5; ++p)  // the row patterns made before the child is forked
    for (int w = 0; w < 2; ++w)
      for (int table = 0; table < 2; ++table) rows_of(p, w, table, spec.table_rows[table]);
  // How long making the files and the whole run take here, so the kills land inside the run.
  double open_s = 0.0, run_s = 0.0;
  {
    test::TempDir probe("cann-shard", memory_fs());
    const auto t0 = std::chrono::steady_clock::now();
    auto t = ShardTables::open(spec, files_config(probe.path(), 2));
    ASSERT_TRUE(t.ok()) << t.status().message();
    const auto t1 = std::chrono::steady_clock::now();
    run_steps(**t, spec, 1, kSteps);
    open_s = std::chrono::duration<double>(t1 - t0).count();
    run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  }
  ShardTables reference(spec, files_config("", 2));
  run_steps(reference, spec, 1, kSteps);
  const std::vector<float> want = all_rows(reference, spec);
  std::mt19937 rng(7);
  int undone = 0, kills = 0;
  for (int round = 0; round < 16; ++round) {
    test::TempDir dir("cann-shard", memory_fs());
    // The child trains the steps into the files until it is killed, at a random moment.
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      auto t = ShardTables::open(spec, files_config(dir.path(), 2));
      if (!t.ok()) _exit(3);
      run_steps(**t, spec, 1, kSteps);
      _exit(0);
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(
        open_s + std::uniform_real_distribution<double>(0.0, 1.1 * run_s)(rng)));
    kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    kills += WIFSIGNALED(status) ? 1 : 0;
    // The replacement: the tables as the last whole step left them (with what pulls of the next
    // step had already done, which repeating them repeats exactly), then the steps the workers
    // send again: the one in flight and those after it.
    auto t = ShardTables::open(spec, files_config(dir.path(), 2));
    ASSERT_TRUE(t.ok()) << t.status().message();
    const int at = std::max((*t)->restored_step(), 0);
    undone += (*t)->undid_apply() ? 1 : 0;
    run_steps(**t, spec, at + 1, kSteps);
    EXPECT_EQ(all_rows(**t, spec), want) << "round " << round << ", killed after step " << at;
  }
  std::printf(
      "files made in %.3f s, %d steps in %.3f s; %d shards killed mid-run, %d of them "
      "inside an apply, undone on reopening\n",
      open_s, kSteps, run_s, kills, undone);
  EXPECT_GT(kills, 0);
}

TEST(ShardFiles, FilesOfAnotherLayoutOrAFullMemoryFileSystemAreOneLineErrors) {
  const RecSpec spec = wide_spec();
  test::TempDir dir;
  {
    auto t = ShardTables::open(spec, files_config(dir.path(), 2));
    ASSERT_TRUE(t.ok()) << t.status().message();
  }
  auto other = ShardTables::open(spec, files_config(dir.path(), 3));
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("written by another layout"), std::string::npos)
      << other.status().message();
  EXPECT_EQ(other.status().message().find('\n'), std::string::npos);

  // A memory file system of 1 MiB for tables of 7 MiB: refused when made, never a fault later.
  test::TempDir small;
  if (mount("tmpfs", small.path().c_str(), "tmpfs", 0, "size=1m") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (not root)";
  auto full = ShardTables::open(spec, files_config(small.path() + "/shard", 2));
  umount(small.path().c_str());
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.status().message().find("cannot allocate"), std::string::npos)
      << full.status().message();
  EXPECT_NE(full.status().message().find("hint:"), std::string::npos);
}

// ------------------------------------------------------------------------ jobs of real processes

// 2 workers (ranks 0, 1) and 2 shards (ranks 2, 3) under --elastic, long enough to be caught.
// `workers` workers per node and 2 shards in all (one node: ranks 0, 1 workers, 2, 3 shards).
std::vector<std::string> elastic_job(bool elastic, int steps = 1500, int workers = 2) {
  std::vector<std::string> args = {
      "run",  "--model",          "dlrm_tiny", "--eval-every",   "0", "--eval-rows",
      "6000", "--threads",        "1",         "--ps-shards",    "2", "--ps-admit-after",
      "2",    "--ps-evict-after", "200",       "--comm-timeout", "20"};
  args.insert(args.end(),
              {"--steps", std::to_string(steps), "--nproc-per-node", std::to_string(workers)});
  if (elastic) args.push_back("--elastic");
  return args;
}

std::string final_line(const std::string& out, int steps = 1500) {
  const std::string l = test::line_with(out, "eval step " + std::to_string(steps) + ":");
  EXPECT_FALSE(l.empty()) << out;
  return l;
}

TEST(MultiProcRecsysElastic, AKilledOrStoppedShardIsReplacedAndTheRunEndsAsIfLeftAlone) {
  const auto whole = test::run_cann(elastic_job(false), 300);
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const std::string want = final_line(whole.output);
  std::printf("left alone: %s\n", want.c_str());
  const auto longer = test::run_cann(elastic_job(false, 1700), 300);
  ASSERT_EQ(longer.exit_code, 0) << longer.output;
  const std::string want_1700 = final_line(longer.output, 1700);
  for (const auto& [rank, sig] : std::vector<std::pair<int, int>>{{3, SIGKILL}, {2, SIGSTOP}}) {
    SCOPED_TRACE("rank " + std::to_string(rank) + ", signal " + std::to_string(sig));
    test::TempDir dir;
    // Checkpoints every 100 steps, so some are written around the loss.
    std::vector<std::string> args = elastic_job(true);
    args.insert(args.end(), {"--checkpoint-dir", dir.file("ck"), "--checkpoint-every", "100"});
    test::Job job(dir.path(), args);
    ASSERT_TRUE(job.wait_for_output("step 300/", 120)) << job.output();
    const double t = job.signal_rank(rank, sig);
    ASSERT_GT(t, 0);
    ASSERT_EQ(job.wait(300), 0) << job.output();
    const std::string out = job.output();
    EXPECT_NE(out.find("rank " + std::to_string(rank) + " (pid"), std::string::npos) << out;
    EXPECT_NE(out.find("restart 1 of 3"), std::string::npos) << out;
    EXPECT_NE(out.find("from the tables its lost predecessor left in memory"), std::string::npos)
        << out;
    EXPECT_NE(out.find("its replacement answers at"), std::string::npos) << out;
    std::printf("%s\n",
                test::line_with(out, "shard " + std::to_string(rank - 2) + ": restored").c_str());
    EXPECT_EQ(final_line(out), want);
    // The checkpoints written across the loss hold every row: resumed for 200 more steps, the
    // run trains what 1700 uninterrupted steps train.
    std::vector<std::string> more = elastic_job(false, 1700);
    more.insert(more.end(), {"--checkpoint-dir", dir.file("ck"), "--resume"});
    const auto resumed = test::run_cann(more, 300);
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_EQ(final_line(resumed.output, 1700), want_1700);
  }
}

TEST(MultiProcRecsysElastic, AKilledWorkerIsNotReplacedAndEndsTheJobInOneLine) {
  test::TempDir dir;
  test::Job job(dir.path(), elastic_job(true));
  ASSERT_TRUE(job.wait_for_output("step 100/", 120)) << job.output();
  ASSERT_GT(job.signal_rank(1, SIGKILL), 0);
  const int code = job.wait(60);
  EXPECT_EQ(code, 1) << job.output();
  EXPECT_NE(job.output().find("not restarted: rank 1 is a worker"), std::string::npos)
      << job.output();
}

// Two nodes (network namespaces, redis rendezvous), a worker and a shard on each: the shard of
// node 1 is killed mid-run; that node's agent replaces it, the worker of node 0 reaches the
// replacement across the link, and the run ends as the run left alone does.
class MultiProcRecsysElasticNodes : public test::NetnsNodes {
 protected:
  // The pid of `rank` among the processes of namespace `ns` (0 when absent).
  pid_t rank_in(const std::string& ns, int rank) {
    const auto pids = test::run_command({"/usr/sbin/ip", "netns", "pids", ns}, 10);
    std::istringstream in(pids.output);
    for (pid_t p = 0; in >> p;) {
      std::istringstream env(test::read_text("/proc/" + std::to_string(p) + "/environ"));
      for (std::string kv; std::getline(env, kv, '\0');)
        if (kv == "RANK=" + std::to_string(rank)) return p;
    }
    return 0;
  }
};

TEST_F(MultiProcRecsysElasticNodes,
       AShardKilledOnTheSecondNodeIsReplacedThereAndTheRunEndsAsIfLeftAlone) {
  const std::string rdzv = start_redis(240);
  auto job = [&](bool kill_shard) {
    std::vector<std::future<test::CommandResult>> nodes;
    const std::string id = std::string(kill_shard ? "killed-" : "alone-") + suffix_;
    for (const std::string& ns : {ns1_, ns2_}) {
      // A worker and a shard per node.
      std::vector<std::string> argv = {"/usr/sbin/ip", "netns", "exec", ns, CANN_TRAIN_BINARY};
      const std::vector<std::string> args = elastic_job(true, 1500, 1);
      argv.insert(argv.end(), args.begin(), args.end());
      argv.insert(argv.end(),
                  {"--nnodes", "2", "--rdzv", rdzv, "--rdzv-id", id, "--rdzv-timeout", "60"});
      nodes.push_back(
          std::async(std::launch::async, [argv] { return test::run_command(argv, 200); }));
    }
    if (kill_shard) {
      // Rank 3: the shard of node 1 (shard 1; the nodes are numbered in the order their agents
      // arrive), once the run is under way.
      pid_t p = 0;
      for (int i = 0; i < 600 && p == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        p = rank_in(ns1_, 3);
        if (p == 0) p = rank_in(ns2_, 3);
      }
      EXPECT_GT(p, 0) << "shard 1 never started";
      std::this_thread::sleep_for(std::chrono::seconds(3));
      if (p > 0) kill(p, SIGKILL);
    }
    const auto a = nodes[0].get();
    const auto b = nodes[1].get();
    EXPECT_EQ(a.exit_code, 0) << a.output;
    EXPECT_EQ(b.exit_code, 0) << b.output;
    return a.output + b.output;
  };
  const std::string alone = job(false);
  const std::string killed = job(true);
  std::system(("ip netns pids " + ns1_ + " | xargs -r kill 2>/dev/null").c_str());
  redis_.get();
  EXPECT_NE(killed.find("rank 3 (pid"), std::string::npos) << killed;
  EXPECT_NE(killed.find("shard 1: restored after step"), std::string::npos) << killed;
  std::printf("%s\n", test::line_with(killed, "shard 1: restored").c_str());
  EXPECT_EQ(final_line(killed), final_line(alone));
}

TEST(RecsysElasticFlags, ElasticWithoutShardsIsOneLine) {
  test::expect_one_line_error(test::run_cann({"run", "--model", "dlrm_tiny", "--elastic"}), 2,
                              {"--elastic replaces lost parameter-server shards", "hint:"});
  test::expect_one_line_error(test::run_cann({"run", "--model", "dlrm_tiny", "--elastic",
                                              "--ps-shards", "1", "--snapshot-every", "5"}),
                              2, {"--snapshot-every does not apply to a recommendation model"});
}

}  // namespace
}  // namespace cann::recsys
