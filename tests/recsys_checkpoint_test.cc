// Checkpoints of recommendation runs: a shard's base and deltas restore exactly the state of
// the step they were saved at (and a later, uncommitted file is ignored and removed); damaged
// files are refused in one line; a run cut short and resumed from its committed step trains
// exactly what the uninterrupted run trains, in one process and over killed shard processes.
#include <gtest/gtest.h>

#include <signal.h>

#include <string>
#include <vector>

#include "core/fs.h"
#include "fault_job.h"
#include "recsys/ps_shard.h"
#include "recsys/rec_checkpoint.h"
#include "recsys/rec_spec.h"
#include "recsys_shard_spec.h"
#include "test_util.h"

namespace cann::recsys {
namespace {

ShardConfig one_of_two() {
  ShardConfig c;
  c.shard = 1;
  c.shards = 2;
  c.optimizer.lr = 0.5f;
  c.admit_after = 2;
  return c;
}

// A step of one worker: pull rows (counting sightings) and push a gradient for each.
void step(ShardTables& t, int s, const std::vector<int64_t>& rows0, float g) {
  std::vector<float> out(rows0.size() * 3);
  ASSERT_TRUE(t.pull(0, s, 0, rows0.data(), rows0.size(), out.data()).ok());
  std::vector<float> grads(rows0.size() * 3, g);
  ASSERT_TRUE(t.push(0, s, {rows0, {}}, {grads, {}}).ok());
}

std::vector<std::vector<float>> rows_of(const ShardTables& t) {
  std::vector<std::vector<float>> all;
  for (int64_t r = 1; r < 10; r += 2) all.push_back(t.row(0, r));
  return all;
}

TEST(ShardCheckpoint, BaseAndDeltasRestoreTheSavedStepExactly) {
  test::TempDir dir;
  ShardTables t(tiny_shard_spec(), one_of_two());
  step(t, 1, {1, 3}, 0.1f);
  step(t, 2, {1, 3, 5}, 0.2f);  // rows 1 and 3 admitted at their second sighting
  ASSERT_TRUE(t.save(dir.path(), 2, true).ok());
  step(t, 3, {5, 7}, -0.3f);  // row 5 admitted now; 7 seen once
  ASSERT_TRUE(t.save(dir.path(), 3, false).ok());
  const auto at3 = rows_of(t);
  const int64_t admitted3 = t.admitted_rows();
  step(t, 4, {1, 7, 9}, 0.4f);
  ASSERT_TRUE(t.save(dir.path(), 4, false).ok());  // saved, never committed

  ShardTables back(tiny_shard_spec(), one_of_two());
  ASSERT_TRUE(back.load(dir.path(), 3).ok());
  EXPECT_EQ(rows_of(back), at3);
  EXPECT_EQ(back.admitted_rows(), admitted3);
  // Row 7 was seen once before step 3's save: one more sighting admits it, as in the original.
  step(back, 4, {1, 7, 9}, 0.4f);
  EXPECT_EQ(rows_of(back), rows_of(t));
  const auto names = list_dir(shard_checkpoint_dir(dir.path(), 1, 2));
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, (std::vector<std::string>{"base-00000002.bin", "delta-00000003.bin"}))
      << "step 4's file is dropped: it was never committed";
}

TEST(ShardCheckpoint, DamagedOrForeignFilesAreRefusedInOneLine) {
  test::TempDir dir;
  ShardTables t(tiny_shard_spec(), one_of_two());
  step(t, 1, {1, 3}, 0.1f);
  ASSERT_TRUE(t.save(dir.path(), 1, true).ok());
  const std::string file = shard_checkpoint_dir(dir.path(), 1, 2) + "/base-00000001.bin";
  std::string bytes = test::read_text(file);
  bytes[bytes.size() / 2] ^= 0x20;
  test::write_text(file, bytes);
  ShardTables back(tiny_shard_spec(), one_of_two());
  Status s = back.load(dir.path(), 1);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos);
  s = back.load(dir.path(), 0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no base checkpoint at or before step 0"), std::string::npos);
}

TEST(DenseCheckpoint, CommitNamesTheStepAndKeepsOnlyItsDenseState) {
  test::TempDir dir;
  const std::vector<float> p = {1, 2, 3}, m = {4, 5, 6}, v = {7, 8, 9};
  auto c = committed_step(dir.path());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, 0);
  ASSERT_TRUE(save_dense(dir.path(), 5, p.data(), m.data(), v.data(), 3).ok());
  ASSERT_TRUE(commit_step(dir.path(), 5).ok());
  ASSERT_TRUE(save_dense(dir.path(), 9, v.data(), v.data(), v.data(), 3).ok());
  ASSERT_TRUE(commit_step(dir.path(), 9).ok());
  EXPECT_EQ(*committed_step(dir.path()), 9);
  EXPECT_FALSE(path_exists(dir.file("dense-00000005.bin")));
  std::vector<float> a(3), b(3), d(3);
  ASSERT_TRUE(load_dense(dir.path(), 9, a.data(), b.data(), d.data(), 3).ok());
  EXPECT_EQ(a, v);
  const Status wrong = load_dense(dir.path(), 9, a.data(), b.data(), d.data(), 4);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.message().find("not the dense state of step 9 with 4 parameters"),
            std::string::npos);
}

// ------------------------------------------------------------------------------- whole runs

std::vector<std::string> run_args(const std::string& dir, int steps) {
  return {"run",
          "--model",
          "dlrm_tiny",
          "--steps",
          std::to_string(steps),
          "--batch-size",
          "256",
          "--eval-every",
          "0",
          "--eval-rows",
          "6000",
          "--threads",
          "1",
          "--checkpoint-dir",
          dir,
          "--checkpoint-every",
          "10",
          "--ps-admit-after",
          "2"};
}

TEST(RecsysResume, ARunCutShortAndResumedTrainsWhatTheWholeRunTrains) {
  test::TempDir a, b;
  const auto whole = test::run_cann(run_args(a.path(), 45), 120);
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const auto first = test::run_cann(run_args(b.path(), 25), 120);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto args = run_args(b.path(), 45);
  args.push_back("--resume");
  const auto rest = test::run_cann(args, 120);
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  EXPECT_NE(rest.output.find("resumed from the checkpoint of step 25"), std::string::npos)
      << rest.output;
  EXPECT_EQ(test::line_with(rest.output, "eval step 45:"),
            test::line_with(whole.output, "eval step 45:"));
  EXPECT_FALSE(test::line_with(whole.output, "eval step 45:").empty()) << whole.output;
  const auto again = test::run_cann(args, 60);
  EXPECT_NE(again.output.find("done: nothing to train, already at step 45"), std::string::npos)
      << again.output;
}

TEST(MultiProcRecsysResume, AJobWhoseShardWasKilledResumesAndTrainsWhatTheWholeRunTrains) {
  test::TempDir a, b;
  auto procs = [](std::vector<std::string> args) {
    args.insert(args.end(), {"--nproc-per-node", "2", "--ps-shards", "2"});
    return args;
  };
  const auto whole = test::run_cann(procs(run_args(a.path(), 2000)), 120);
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  // The same job, its shard of rank 3 killed once a few checkpoints are committed.
  {
    test::Job job(b.path(), procs(run_args(b.path(), 2000)));
    const double end = test::now_s() + 60;
    while (test::now_s() < end) {
      auto c = committed_step(b.path());
      if (c.ok() && *c >= 30) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_GT(job.signal_rank(3, SIGKILL), 0);
    EXPECT_NE(job.wait(60), 0) << job.output();
  }
  const int committed = *committed_step(b.path());
  std::printf("killed after step %d was committed\n", committed);
  ASSERT_LT(committed, 2000) << "the job finished before the kill";
  auto args = procs(run_args(b.path(), 2000));
  args.push_back("--resume");
  const auto rest = test::run_cann(args, 120);
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  EXPECT_EQ(test::line_with(rest.output, "eval step 2000:"),
            test::line_with(whole.output, "eval step 2000:"));
  EXPECT_FALSE(test::line_with(whole.output, "eval step 2000:").empty()) << whole.output;
}

TEST(RecsysResume, CheckpointFlagsThatCannotHoldAreOneLine) {
  test::expect_one_line_error(test::run_cann({"run", "--model", "dlrm_tiny", "--resume"}), 2,
                              {"--resume needs --checkpoint-dir"});
  test::expect_one_line_error(
      test::run_cann({"run", "--model", "dlrm_tiny", "--nproc-per-node", "2", "--ps-shards", "1",
                      "--ps-staleness", "1", "--checkpoint-dir", "/tmp/x"}),
      2, {"only synchronous shards have"});
}

}  // namespace
}  // namespace cann::recsys
