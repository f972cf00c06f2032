// The step log across a restart: a step the other ranks finished and committed while the
// leader died before writing its line gets that line back from the snapshot that carries it.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "model/model.h"
#include "model/spec.h"
#include "test_util.h"
#include "train/step_reporter.h"
#include "train/train_state.h"

namespace cann {
namespace {

using test::TempDir;

train::TrainConfig log_config(const std::string& path) {
  train::TrainConfig c;
  c.log_json = path;
  c.monitor = false;
  c.quiet = true;
  c.steps = 10;
  return c;
}

std::vector<nlohmann::json> lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);) out.push_back(nlohmann::json::parse(l));
  return out;
}

train::StepRecord record(int step) {
  train::StepRecord r;
  r.step = step;
  r.loss = 5.0 - 0.1 * step;
  r.lr = 1e-3f;
  r.step_time_s = 0.01;
  return r;
}

TEST(StepLogTest, TheLineOfACommittedStepComesBackFromItsSnapshot) {
  TempDir dir("cann-step-log");
  const std::string path = dir.file("log.jsonl");
  std::string line_of_3;
  {
    // The leader logs steps 1 and 2; a second rank forms the line of step 3 as well.
    auto leader = train::StepReporter::open(log_config(path), {0, 2, "", nullptr}, 64, 1e6);
    ASSERT_TRUE(leader.ok()) << leader.status().message();
    auto other = train::StepReporter::open(log_config(path), {1, 2, "", nullptr}, 64, 1e6);
    ASSERT_TRUE(other.ok()) << other.status().message();
    for (int s = 1; s <= 3; ++s) {
      if (s < 3) {
        ASSERT_TRUE((*leader)->report(record(s)).ok());
      }
      ASSERT_TRUE((*other)->report(record(s)).ok());
    }
    line_of_3 = (*other)->last_log_line();
    EXPECT_EQ(nlohmann::json::parse(line_of_3)["step"], 3);
  }
  ASSERT_EQ(lines(path).size(), 2u);  // rank 1 writes no log
  // The snapshot of step 3 carries the line through its metadata.
  train::ResumeState st;
  st.step = 3;
  st.step_log = line_of_3;
  auto spec = model::parse_model_spec(
      "architecture: gpt\nhidden_size: 32\nnum_hidden_layers: 1\nnum_attention_heads: 2\n"
      "vocab_size: 64\nseq_length: 16\n",
      "t.yaml");
  ASSERT_TRUE(spec.ok());
  auto m = model::Model::create(*spec, 1, 16);
  ASSERT_TRUE(m.ok());
  const size_t n = (*m)->table().total_floats();
  std::vector<float> moments(2 * n, 0.0f);
  train::OptimizerSnapshot snap;
  snap.params = (*m)->params();
  snap.m = moments.data();
  snap.v = moments.data() + n;
  ASSERT_TRUE(
      train::save_training_checkpoint(dir.file("ck"), 2, **m, snap, st, log_config(path)).ok());
  auto ck = ckpt::read_latest_checkpoint(dir.file("ck"));
  ASSERT_TRUE(ck.ok());
  train::ResumeState back;
  int opt_step = 0;
  ASSERT_TRUE(train::restore_training_checkpoint(*ck, **m, moments.data(), moments.data() + n,
                                                 &opt_step, &back, nullptr, true)
                  .ok());
  EXPECT_EQ(back.step, 3);
  EXPECT_EQ(back.step_log, line_of_3);

  // A new leader resumes after step 3: the line is written once, marked, in order.
  auto leader = train::StepReporter::open(log_config(path), {0, 2, "", nullptr}, 64, 1e6);
  ASSERT_TRUE(leader.ok());
  ASSERT_TRUE((*leader)->recover_step_line(3, back.step_log).ok());
  ASSERT_TRUE((*leader)->recover_step_line(3, back.step_log).ok());
  // A resume at a step the log already has, or a line of another step, adds nothing.
  ASSERT_TRUE((*leader)->recover_step_line(2, line_of_3).ok());
  ASSERT_TRUE((*leader)->recover_step_line(4, line_of_3).ok());
  (*leader)->finish();
  const auto got = lines(path);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[2]["step"], 3);
  EXPECT_EQ(got[2]["recovered"], true);
  EXPECT_DOUBLE_EQ(got[2]["loss"].get<double>(), 4.7);
  EXPECT_FALSE(got[1].contains("recovered"));
}

}  // namespace
}  // namespace cann
