// comm.yaml (train/comm_config.h) read strictly and applied to a run, and `cann-train bench
// tune` writing one that `run --comm-config` then trains with.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "test_util.h"
#include "train/comm_config.h"

namespace cann {
namespace {

using comm::AllreduceAlgorithm;

train::CommTuning sample() {
  train::CommTuning t;
  t.nnodes = 2;
  t.nproc_per_node = 4;
  t.model = "gpt_tiny";
  t.measured_at = "2026-12-04T19:30:00Z";
  t.backend = "hierarchical";
  t.channels = 3;
  t.split_bytes = 1 << 20;
  t.allreduce = {{65536, AllreduceAlgorithm::kDirect}, {SIZE_MAX, AllreduceAlgorithm::kRing}};
  t.bucket_size_mb = 4;
  t.intra_node = train::LinkFigures{8.1, 6.5};
  t.inter_node = train::LinkFigures{0.11, 80};
  return t;
}

TEST(CommConfigTest, WrittenFileReadsBackTheSame) {
  test::TempDir dir;
  const std::string path = dir.file("comm.yaml");
  ASSERT_TRUE(train::write_comm_tuning(path, sample()).ok());
  auto t = train::read_comm_tuning(path);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->nnodes, 2);
  EXPECT_EQ(t->nproc_per_node, 4);
  EXPECT_EQ(t->model, "gpt_tiny");
  EXPECT_EQ(t->backend, "hierarchical");
  EXPECT_EQ(t->channels, 3);
  EXPECT_EQ(t->split_bytes, size_t{1} << 20);
  ASSERT_EQ(t->allreduce.size(), 2u);
  EXPECT_EQ(t->allreduce[0].below_bytes, 65536u);
  EXPECT_EQ(t->allreduce[0].algorithm, AllreduceAlgorithm::kDirect);
  EXPECT_EQ(t->allreduce[1].below_bytes, SIZE_MAX);
  EXPECT_EQ(t->allreduce[1].algorithm, AllreduceAlgorithm::kRing);
  EXPECT_DOUBLE_EQ(t->bucket_size_mb, 4);
  ASSERT_TRUE(t->inter_node.has_value());
  EXPECT_DOUBLE_EQ(t->inter_node->bandwidth_GBps, 0.11);
  EXPECT_DOUBLE_EQ(t->intra_node->latency_us, 6.5);
  EXPECT_EQ(train::comm_tuning_summary(*t),
            "backend hierarchical, gloo 3 channels split from 1 MiB, all-reduce direct below "
            "64 KiB then ring, buckets 4 MiB");
}

// Each bad file is one line naming the file and what is wrong in it.
TEST(CommConfigTest, BadFilesAreOneLineNamingTheKey) {
  test::TempDir dir;
  const std::string good = train::comm_tuning_text(sample());
  auto expect_bad = [&](const std::string& from, const std::string& to, const std::string& part) {
    const size_t at = good.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    std::string text = good;
    text.replace(at, from.size(), to);
    const std::string path = dir.file("bad.yaml");
    test::write_text(path, text);
    auto t = train::read_comm_tuning(path);
    ASSERT_FALSE(t.ok()) << text;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find(part), std::string::npos) << t.status().message();
    EXPECT_NE(t.status().message().find(path), std::string::npos);
    EXPECT_EQ(t.status().message().find('\n'), std::string::npos);
  };
  expect_bad("algorithm: direct", "algorithm: tree", "'tree' is not an all-reduce of the gloo");
  expect_bad("below: 65536", "below: 0", "sizes out of order");
  expect_bad("- {algorithm: ring}", "- {below: 4096, algorithm: ring}",
             "the last row takes every size left");
  expect_bad("backend: hierarchical", "backend: nccl", "backend 'nccl'");
  expect_bad("channels: 3", "channels: 0", "gloo.channels 0");
  expect_bad("channels: 3", "channelz: 3", "unknown key 'gloo.channelz'");
  expect_bad("format: 1", "format: 9", "format 9");
  expect_bad("bucket_size_mb: 4", "bucket_size_mb: -4", "bucket_size_mb must be positive");
  expect_bad("transport: tcp", "transport: ibverbs", "runs the direct all-reduce only");
  expect_bad("format: 1", "format: [", "not YAML");
  // Two rows without a bound: the first is not last.
  expect_bad("- {below: 65536, algorithm: direct}", "- {algorithm: direct}",
             "no 'below' but is not the last row");
}

TEST(CommConfigTest, AppliedUnlessTheCommandLineSaidOtherwise) {
  const train::CommTuning t = sample();
  train::CommConfig comm;
  double bucket = 25;
  auto line = train::apply_comm_tuning(t, "c.yaml", 2, 4, false, false, &comm, &bucket);
  ASSERT_TRUE(line.ok()) << line.status().message();
  EXPECT_EQ(comm.backend, "hierarchical");
  EXPECT_EQ(comm.channels, 3);
  EXPECT_EQ(comm.split_bytes, size_t{1} << 20);
  EXPECT_EQ(comm.allreduce_rules.size(), 2u);
  EXPECT_DOUBLE_EQ(bucket, 4);
  EXPECT_EQ(line->find("tune again"), std::string::npos) << *line;

  train::CommConfig kept;
  kept.backend = "gloo";
  bucket = 8;
  line = train::apply_comm_tuning(t, "c.yaml", 1, 2, true, true, &kept, &bucket);
  ASSERT_TRUE(line.ok());
  EXPECT_EQ(kept.backend, "gloo");
  EXPECT_DOUBLE_EQ(bucket, 8);
  EXPECT_NE(line->find("backend gloo kept from --backend"), std::string::npos) << *line;
  EXPECT_NE(line->find("buckets 8 MiB kept from --bucket-size-mb"), std::string::npos);
  EXPECT_NE(line->find("tuned on 2 node(s) x 4, running 1 x 2: tune again"), std::string::npos);

  train::CommTuning one_node = t;
  one_node.backend = "shm";
  train::CommConfig c;
  auto refused = train::apply_comm_tuning(one_node, "c.yaml", 2, 4, false, false, &c, &bucket);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("cannot span 2"), std::string::npos);
  c.transport = "ibverbs";
  refused = train::apply_comm_tuning(t, "c.yaml", 2, 4, false, false, &c, &bucket);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("tuned over tcp"), std::string::npos);
}

// The whole path on 3 processes (an awkward size for the ring): bench tune measures and writes
// comm.yaml; run trains with it and says so; a broken file stops run with exit 2.
TEST(MultiProcCommTuneTest, TuneWritesAFileRunTrainsWith) {
  test::TempDir dir;
  const std::string path = dir.file("comm.yaml");
  test::CommandResult r =
      test::run_cann({"bench", "tune", "--nproc-per-node", "3", "--sizes", "4K:1M",
                      "--seconds-per-size", "0.02", "--channels", "1,2", "--buckets", "1,25",
                      "--bucket-steps", "4", "--batch-size", "6", "--output", path},
                     240);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* part : {"3 ranks (1 node x 3)", "shm", "gloo 2ch direct", "<- chosen",
                           "# bucket sizes: gpt_tiny", "# allgather", "# alltoall", "wrote "})
    EXPECT_NE(r.output.find(part), std::string::npos) << part << "\n" << r.output;
  auto t = train::read_comm_tuning(path);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->nproc_per_node, 3);
  EXPECT_EQ(t->nnodes, 1);
  // The bucket rows: the engine's own rule first, then the sizes asked for; the file holds the
  // chosen one (no bucket_size_mb at all when the default stays).
  const size_t rows = r.output.find("# bucket sizes: gpt_tiny");
  ASSERT_NE(rows, std::string::npos);
  const size_t mark = r.output.find("<- chosen", rows);
  ASSERT_NE(mark, std::string::npos) << r.output;
  const size_t line_start = r.output.rfind('\n', mark) + 1;
  const std::string chosen_row = r.output.substr(line_start, mark - line_start);
  EXPECT_NE(r.output.find("#   default (", rows), std::string::npos) << r.output;
  // The chosen size and the engine's rule were timed in both rounds; a size the first round
  // put far behind says it was not repeated.
  EXPECT_EQ(chosen_row.find("not repeated"), std::string::npos) << chosen_row;
  const size_t rule = r.output.find("#   default (", rows);
  const std::string rule_row = r.output.substr(rule, r.output.find('\n', rule) - rule);
  EXPECT_EQ(rule_row.find("not repeated"), std::string::npos) << rule_row;
  if (chosen_row.find("default (") != std::string::npos)
    EXPECT_EQ(t->bucket_size_mb, 0) << chosen_row;
  else
    EXPECT_TRUE(t->bucket_size_mb == 1 || t->bucket_size_mb == 25) << t->bucket_size_mb;
  ASSERT_TRUE(t->intra_node.has_value());
  EXPECT_GT(t->intra_node->bandwidth_GBps, 0);
  EXPECT_FALSE(t->allreduce.empty());

  r = test::run_cann({"run", "--nproc-per-node", "3", "--batch-size", "6", "--steps", "2",
                      "--monitor", "off", "--backend", "gloo", "--comm-config", path},
                     240);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("comm config " + path + ": backend "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("kept from --backend"), std::string::npos) << r.output;

  test::write_text(path, "format: 1\n");
  r = test::run_command({CANN_TRAIN_BINARY, "run", "--nproc-per-node", "2", "--steps", "2"}, 60,
                        {"CANN_COMM_CONFIG=" + path});
  test::expect_one_line_error(r, 2, {"comm config " + path, "missing map 'tuned_for'"});
  test::expect_one_line_error(test::run_cann({"bench", "tune", "--nproc-per-node", "1"}, 60), 2,
                              {"one process has nothing to communicate"});
  test::expect_one_line_error(
      test::run_cann({"bench", "tune", "--nproc-per-node", "2", "--buckets", "4,2"}, 60), 2,
      {"--buckets '4,2'", "increasing"});
}

}  // namespace
}  // namespace cann
