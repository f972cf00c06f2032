// End-to-end training in-process: the loss falls on real text, the step log has its fields,
// and checkpoint + resume is exact (N steps, stop, resume, N more steps gives bit-identical
// parameters and optimizer state to 2N uninterrupted steps), for a dense GPT and an MoE BERT.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <string>

#include "ckpt/checkpoint.h"
#include "test_util.h"
#include "train/trainer.h"

namespace cann::train {
namespace {

const char kSmallGpt[] =
    "architecture: gpt\nhidden_size: 64\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
    "vocab_size: 256\nseq_length: 64\n";
const char kSmallMoeBert[] =
    "architecture: bert\nhidden_size: 64\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
    "vocab_size: 257\nseq_length: 64\nnum_local_experts: 4\nnum_experts_per_tok: 2\n"
    "capacity_factor: 1.0\n";

TrainConfig small_config(const std::string& model_path) {
  TrainConfig c;
  c.model = model_path;
  c.data = "fortunes";
  c.batch_size = 8;
  c.seq_len = 64;
  c.threads = 2;
  c.quiet = true;
  c.eval_every = 0;
  c.eval_batches = 2;
  c.sample_tokens = 0;
  c.monitor = false;
  return c;
}

RunSummary train(const TrainConfig& c) {
  auto t = Trainer::create(c);
  EXPECT_TRUE(t.ok()) << t.status().message();
  if (!t.ok()) return {};
  RunSummary s;
  Status st = (*t)->run(&s);
  EXPECT_TRUE(st.ok()) << st.message();
  return s;
}

TEST(TrainingTest, GptLossFallsOnFortunes) {
  test::TempDir dir;
  test::write_text(dir.file("gpt.yaml"), kSmallGpt);
  TrainConfig c = small_config(dir.file("gpt.yaml"));
  c.steps = 250;
  c.lr = 3e-3f;
  c.log_json = dir.file("log.jsonl");
  const RunSummary s = train(c);
  // Uniform over 256 bytes is ln 256 = 5.55 nats. Single-character statistics of English give
  // about 4.1 bits = 2.85 nats per character (Shannon 1951), so a loss clearly below that means
  // the model uses context. The validation loss (fixed windows) is the steady measure; the last
  // training batch's loss is noisier.
  EXPECT_NEAR(s.first_loss, 5.55, 0.3);
  EXPECT_LT(s.last_loss, 3.2);
  EXPECT_GT(s.last_val_loss, 0.0);
  EXPECT_LT(s.last_val_loss, 2.8);

  std::ifstream log(c.log_json);
  std::string line;
  int lines = 0;
  nlohmann::json last;
  while (std::getline(log, line)) {
    last = nlohmann::json::parse(line);
    for (const char* key : {"step", "loss", "lr", "grad_norm", "step_time_s", "tokens_per_s"})
      EXPECT_TRUE(last.contains(key)) << key << " missing in " << line;
    ++lines;
  }
  EXPECT_EQ(lines, 250);
  EXPECT_EQ(last["step"], 250);
  EXPECT_TRUE(last.contains("val_loss"));
}

TEST(TrainingTest, MoeBertLossFalls) {
  test::TempDir dir;
  test::write_text(dir.file("moe.yaml"), kSmallMoeBert);
  TrainConfig c = small_config(dir.file("moe.yaml"));
  c.steps = 60;
  c.lr = 3e-3f;
  const RunSummary s = train(c);
  EXPECT_LT(s.last_loss, s.first_loss - 1.5);
}

std::vector<char> section(const std::string& step_dir, const std::string& name) {
  auto ck = ckpt::read_checkpoint(step_dir);
  EXPECT_TRUE(ck.ok()) << ck.status().message();
  if (!ck.ok() || ck->find(name) == nullptr) return {};
  return ck->find(name)->data;
}

void check_exact_resume(const char* spec_yaml,
                        kernels::GemmPrecision precision = kernels::GemmPrecision::kFp32) {
  test::TempDir dir;
  test::write_text(dir.file("m.yaml"), spec_yaml);
  TrainConfig c = small_config(dir.file("m.yaml"));
  c.precision = precision;
  c.steps = 12;
  c.checkpoint_dir = dir.file("straight");
  train(c);

  c.checkpoint_dir = dir.file("resumed");
  c.exit_interval = 6;
  const RunSummary first = train(c);
  EXPECT_EQ(first.last_step, 6);
  c.resume = true;
  const RunSummary second = train(c);
  EXPECT_EQ(second.first_step, 6);
  EXPECT_EQ(second.last_step, 12);

  const std::string a = dir.file("straight/step-00000012");
  const std::string b = dir.file("resumed/step-00000012");
  for (const char* name : {"params", "adam_m", "adam_v"}) {
    const auto sa = section(a, name), sb = section(b, name);
    ASSERT_FALSE(sa.empty()) << name;
    ASSERT_EQ(sa.size(), sb.size()) << name;
    EXPECT_EQ(std::memcmp(sa.data(), sb.data(), sa.size()), 0) << name << " differs after resume";
  }
}

TEST(TrainingTest, ExactResumeGpt) {
  check_exact_resume(kSmallGpt);
}
TEST(TrainingTest, ExactResumeMoeBert) {
  check_exact_resume(kSmallMoeBert);
}

// --precision bf16 rounds the GEMMs' inputs only: the loss follows fp32's closely, and the
// state kept between steps is fp32, so a resume is as exact as in fp32.
TEST(TrainingTest, Bf16TracksFp32AndResumesExactly) {
  if (!kernels::cpu_has_bf16()) GTEST_SKIP() << "this processor has no AVX-512 BF16";
  test::TempDir dir;
  test::write_text(dir.file("gpt.yaml"), kSmallGpt);
  TrainConfig c = small_config(dir.file("gpt.yaml"));
  c.steps = 150;
  c.lr = 3e-3f;
  const RunSummary fp32 = train(c);
  c.precision = kernels::GemmPrecision::kBf16;
  const RunSummary bf16 = train(c);
  EXPECT_NEAR(bf16.first_loss, fp32.first_loss, 0.01 * fp32.first_loss);
  EXPECT_NE(bf16.last_loss, fp32.last_loss);  // the GEMMs did round
  EXPECT_NEAR(bf16.last_val_loss, fp32.last_val_loss, 0.02 * fp32.last_val_loss);
  check_exact_resume(kSmallGpt, kernels::GemmPrecision::kBf16);
  check_exact_resume(kSmallMoeBert, kernels::GemmPrecision::kBf16);
}

TEST(TrainingTest, ResumeRefusesADifferentModel) {
  test::TempDir dir;
  test::write_text(dir.file("a.yaml"), kSmallGpt);
  test::write_text(dir.file("b.yaml"), kSmallMoeBert);
  TrainConfig c = small_config(dir.file("a.yaml"));
  c.steps = 2;
  c.checkpoint_dir = dir.file("ck");
  train(c);
  TrainConfig d = small_config(dir.file("b.yaml"));
  d.steps = 4;
  d.checkpoint_dir = dir.file("ck");
  d.resume = true;
  auto t = Trainer::create(d);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("parameter layout differs"), std::string::npos)
      << t.status().message();
}

}  // namespace
}  // namespace cann::train
