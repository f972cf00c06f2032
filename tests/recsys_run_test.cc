// `cann-train run` with a recommendation model, through the binary: the shipped tiny models
// train and report AUC and log loss; a Criteo-format file trains, with a malformed line fatal by
// default (naming the file and line) and counted under --bad-lines skip; every flag a
// recommendation run does not honour, a recommendation flag on a transformer run, and a
// recommendation model given to the planner: one line and exit 2.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/rng.h"
#include "test_util.h"

namespace cann {
namespace {

using test::expect_one_line_error;
using test::run_cann;

TEST(RecsysRun, ShippedTinyModelsTrainAndReportAuc) {
  for (const char* model : {"dlrm_tiny", "two_tower_tiny"}) {
    const auto r = run_cann({"run", "--model", model, "--steps", "60", "--eval-every", "30",
                             "--eval-rows", "4000", "--threads", "2"});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("eval step 30: auc 0."), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("(planted ceiling: auc 0."), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("done: steps 1..60"), std::string::npos) << r.output;
  }
}

// A Criteo-format file whose label follows the first categorical feature (clicks 80% of the
// time after "0000aaaa", 20% after "0000bbbb") and whose other features are noise, so a model
// that learns anything reaches an AUC near 0.8 (0.5 would mean it learned nothing).
std::string criteo_lines(int n, uint64_t seed) {
  Rng rng(seed);
  std::string text;
  char buf[32];
  for (int i = 0; i < n; ++i) {
    const bool a = rng.uniform() < 0.5f;
    const bool click = rng.uniform() < (a ? 0.8f : 0.2f);
    text += click ? "1" : "0";
    for (int d = 0; d < 13; ++d) {
      text += '\t';
      if (d % 4 != 3) text += std::to_string(rng.below(50));  // every fourth one missing
    }
    text += a ? "\t0000aaaa" : "\t0000bbbb";
    for (int c = 1; c < 26; ++c) {
      std::snprintf(buf, sizeof(buf), "\t%08llx", static_cast<unsigned long long>(rng.below(300)));
      text += c % 7 == 6 ? "\t" : buf;
    }
    text += "\n";
  }
  return text;
}

const char* kCriteoSpec = R"(architecture: dlrm
dense_features: 13
sparse_features: 26
table_rows: 512
hash_ids: true
embedding_dim: 8
bottom_mlp: [16, 8]
top_mlp: [32, 1]
)";

TEST(RecsysRun, CriteoFileTrainsAndItsBadLinesAreNamedOrCounted) {
  test::TempDir dir;
  test::write_text(dir.file("dlrm_small.yaml"), kCriteoSpec);
  std::string text = criteo_lines(6000, 1);
  // Line 4001 (in the training part, after 2000 held-out rows): a label of 2.
  const size_t at = [&] {
    size_t pos = 0;
    for (int i = 0; i < 4000; ++i) pos = text.find('\n', pos) + 1;
    return pos;
  }();
  text[at] = '2';
  test::write_text(dir.file("clicks.tsv"), text);
  const std::vector<std::string> base = {"run",
                                         "--model",
                                         dir.file("dlrm_small.yaml"),
                                         "--data",
                                         dir.file("clicks.tsv"),
                                         "--steps",
                                         "150",
                                         "--batch-size",
                                         "64",
                                         "--eval-rows",
                                         "2000",
                                         "--eval-every",
                                         "0",
                                         "--threads",
                                         "2",
                                         "--sparse-lr",
                                         "0.1"};
  auto quiet = base;
  quiet.push_back("--quiet");
  const auto fatal = run_cann(quiet);
  expect_one_line_error(fatal, 2, {dir.file("clicks.tsv") + ":4001", "label", "--bad-lines skip"});

  auto args = base;
  args.insert(args.end(), {"--bad-lines", "skip"});
  const auto r = run_cann(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("1 of "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(first at line 4,001"), std::string::npos) << r.output;
  const size_t auc_at = r.output.find("eval step 150: auc ");
  ASSERT_NE(auc_at, std::string::npos) << r.output;
  const double auc = std::stod(r.output.substr(auc_at + 19, 6));
  std::printf("AUC on the held-out rows: %.4f (0.8 is the best any model can do)\n", auc);
  EXPECT_GT(auc, 0.72);
}

// The step log: one line per step from worker 0 alone, the evaluation's AUC and log loss (and
// the planted ceiling) on evaluation steps, appended to by a resumed run.
TEST(RecsysRun, TheStepLogHasALinePerStepFromOneWriter) {
  test::TempDir dir;
  for (const bool procs : {false, true}) {
    SCOPED_TRACE(procs ? "2 workers, 1 shard" : "one process");
    const std::string log = dir.file(procs ? "ps.jsonl" : "one.jsonl");
    std::vector<std::string> args = {
        "run",  "--model",   "dlrm_tiny", "--steps",    "30", "--eval-every", "10", "--eval-rows",
        "2000", "--threads", "1",         "--log-json", log};
    if (procs) args.insert(args.end(), {"--nproc-per-node", "2", "--ps-shards", "1"});
    const auto r = run_cann(args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string text = test::read_text(log);
    int lines = 0, evals = 0;
    size_t at = 0;
    while ((at = text.find('\n', at)) != std::string::npos) ++lines, ++at;
    for (size_t p = text.find("\"auc\":"); p != std::string::npos; p = text.find("\"auc\":", p + 1))
      ++evals;
    EXPECT_EQ(lines, 30) << text.substr(0, 400);
    EXPECT_EQ(evals, 3);
    EXPECT_EQ(text.rfind("{\"step\":1,", 0), 0u) << text.substr(0, 200);
    EXPECT_NE(text.find("{\"step\":30,"), std::string::npos);
    EXPECT_NE(text.find("\"ceiling_auc\":0."), std::string::npos);
    EXPECT_NE(text.find("\"samples\":512,"), std::string::npos);
  }
}

TEST(RecsysRun, FlagsThatDoNotApplyAreOneLineErrors) {
  expect_one_line_error(run_cann({"run", "--model", "dlrm_tiny", "--compress", "topk:0.01",
                                  "--checkpoint-dir", "/tmp/never-written"}),
                        2, {"--compress topk:0.01 with --checkpoint-dir", "hint"});
  expect_one_line_error(run_cann({"run", "--model", "dlrm_tiny", "--pipeline-schedule", "1f1b"}), 2,
                        {"--pipeline-schedule does not apply to a recommendation model"});
  expect_one_line_error(run_cann({"run", "--model", "two_tower_tiny", "--strategy", "dp=2"}), 2,
                        {"--strategy does not apply"});
  expect_one_line_error(run_cann({"run", "--model", "gpt_tiny", "--sparse-lr", "0.1"}), 2,
                        {"--sparse-lr applies to recommendation models", "hint"});
  expect_one_line_error(run_cann({"run", "--model", "dlrm_tiny", "--sparse-optimizer", "sgd"}), 2,
                        {"--sparse-optimizer"});
  expect_one_line_error(run_cann({"run", "--model", "dlrm_tiny", "--data", "/nonexistent.tsv"}), 2,
                        {"/nonexistent.tsv"});
  expect_one_line_error(run_cann({"run", "--model", "dlrm_criteo_kaggle", "--steps", "1"}), 2,
                        {"no --data, so synthetic clicks", "pass a Criteo TSV file with --data"},
                        "cann-train run: error: ");
}

TEST(RecsysRun, ThePlannerSaysItTakesTransformersOnly) {
  expect_one_line_error(
      run_cann({"simulate", "--model", "dlrm_tiny", "--cluster", "8x_a100", "--strategy", "dp=8"}),
      2, {"'dlrm_tiny' is a recommendation model", "hint: use `cann-train run`"});
}

}  // namespace
}  // namespace cann
