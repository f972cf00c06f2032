// Bad input through the real binary, as a user meets it: every case prints one line saying
// what is wrong, where and what to do, and exits with the documented status (2 for usage and
// configuration errors, 1 for corrupt data), never a crash (status >= 128) or a hang. The CI
// runs this suite a second time under AddressSanitizer and UndefinedBehaviorSanitizer.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "test_util.h"

namespace cann {
namespace {

using test::run_cann;

// Runs cann-train and checks exit status, that the message mentions every fragment, and that
// the error is one line (the last line of output starts with "cann-train").
void expect_failure(const std::vector<std::string>& args, int exit_code,
                    const std::vector<std::string>& fragments) {
  const test::CommandResult r = run_cann(args, 120);
  ASSERT_FALSE(r.timed_out) << "hung";
  EXPECT_EQ(r.exit_code, exit_code) << r.output;
  for (const auto& f : fragments)
    EXPECT_NE(r.output.find(f), std::string::npos) << f << "\n" << r.output;
  std::string out = r.output;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  const std::string last =
      out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1);
  EXPECT_EQ(last.rfind("cann-train", 0), 0u) << "error is not one 'cann-train ...' line:\n"
                                             << r.output;
}

const char kTinyModel[] =
    "architecture: gpt\nhidden_size: 32\nnum_hidden_layers: 1\nnum_attention_heads: 2\n"
    "vocab_size: 256\nseq_length: 32\n";

// A short run; `extra` flags are added, and --steps 2 unless extra sets --steps.
std::vector<std::string> quick(std::vector<std::string> extra) {
  std::vector<std::string> a = {
      "run",     "--batch-size",    "2", "--seq-len", "16", "--threads", "1",
      "--quiet", "--sample-tokens", "0"};
  if (std::find(extra.begin(), extra.end(), "--steps") == extra.end()) {
    a.push_back("--steps");
    a.push_back("2");
  }
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(BadInputTest, UsageErrors) {
  expect_failure({}, 2, {"subcommand is required"});
  expect_failure({"launch"}, 2, {"launch"});
  expect_failure({"run", "--no-such-flag"}, 2, {"--no-such-flag", "--help"});
  expect_failure({"run", "--steps", "-3"}, 2, {"--steps", "positive"});
  expect_failure({"run", "--steps", "many"}, 2, {"--steps", "many"});
  expect_failure({"run", "--steps", "1", "--steps", "2"}, 2, {"--steps"});
  expect_failure({"run", "--lr", "0"}, 2, {"--lr", "positive"});
  expect_failure({"run", "--threads", "-1"}, 2, {"--threads"});
  expect_failure({"run", "--resume"}, 2, {"--checkpoint-dir"});
  const test::CommandResult help = run_cann({"run", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("--batch-size"), std::string::npos);
}

TEST(BadInputTest, ModelSpecErrors) {
  test::TempDir dir;
  test::write_text(dir.file("malformed.yaml"), "architecture: gpt\nhidden_size: [32\n");
  expect_failure(quick({"--model", dir.file("malformed.yaml")}), 2,
                 {dir.file("malformed.yaml"), "malformed"});
  test::write_text(dir.file("unknown.yaml"), std::string(kTinyModel) + "n_experts: 4\n");
  expect_failure(quick({"--model", dir.file("unknown.yaml")}), 2, {"n_experts", "unknown key"});
  test::write_text(dir.file("heads.yaml"),
                   "architecture: gpt\nhidden_size: 30\nnum_hidden_layers: 1\n"
                   "num_attention_heads: 4\nvocab_size: 256\nseq_length: 32\n");
  expect_failure(quick({"--model", dir.file("heads.yaml")}), 2, {"num_attention_heads"});
  test::write_text(dir.file("zero.yaml"),
                   "architecture: gpt\nhidden_size: 32\nnum_hidden_layers: 0\n"
                   "num_attention_heads: 2\nvocab_size: 256\nseq_length: 32\n");
  expect_failure(quick({"--model", dir.file("zero.yaml")}), 2, {"num_hidden_layers", "positive"});
  test::write_text(dir.file("topk.yaml"),
                   std::string(kTinyModel) + "num_local_experts: 2\nnum_experts_per_tok: 3\n");
  expect_failure(quick({"--model", dir.file("topk.yaml")}), 2, {"num_experts_per_tok"});
  expect_failure(quick({"--model", "gpt_enormous"}), 2, {"gpt_enormous", "gpt_tiny"});
  expect_failure(quick({"--model", "vit_g"}), 2, {"vit", "cann-train search"});
  // A model far larger than this machine is refused before anything is allocated.
  expect_failure({"run", "--model", "gpt_175b", "--steps", "1", "--quiet"}, 2,
                 {"gpt_175b", "GB available", "--batch-size"});
  expect_failure(quick({"--model", dir.file("absent.yaml")}), 2, {"absent.yaml"});
  test::write_text(dir.file("long.yaml"), kTinyModel);
  expect_failure(quick({"--model", dir.file("long.yaml"), "--seq-len", "64"}), 2, {"--seq-len"});
}

TEST(BadInputTest, DataErrors) {
  test::TempDir dir;
  test::write_text(dir.file("m.yaml"), kTinyModel);
  const std::string model = dir.file("m.yaml");
  expect_failure(quick({"--model", model, "--data", dir.file("missing.txt")}), 2, {"missing.txt"});
  // A shard whose header promises more tokens than the file holds.
  std::vector<int> tokens(5000, 7);
  ASSERT_TRUE(data::write_llmc_shard(dir.file("train.bin"), tokens).ok());
  std::filesystem::resize_file(dir.file("train.bin"), 1024 + 2 * 4000);
  expect_failure(quick({"--model", model, "--data", dir.file("train.bin")}), 1, {"train.bin"});
  // A shard with tokens beyond the model's vocabulary.
  std::vector<int> big(5000, 1000);
  ASSERT_TRUE(data::write_llmc_shard(dir.file("big.bin"), big).ok());
  expect_failure(quick({"--model", model, "--data", dir.file("big.bin")}), 2, {"1000", "vocab"});
  test::write_text(dir.file("bad_magic.bin"), std::string(2048, 'x'));
  expect_failure(quick({"--model", model, "--data", dir.file("bad_magic.bin")}), 1,
                 {"bad_magic.bin"});
}

TEST(BadInputTest, CheckpointErrors) {
  test::TempDir dir;
  test::write_text(dir.file("m.yaml"), kTinyModel);
  const std::string model = dir.file("m.yaml");
  const std::string ck = dir.file("ck");
  const test::CommandResult ok = run_cann(quick({"--model", model, "--checkpoint-dir", ck}));
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  const std::string data = ck + "/step-00000002/data.bin";
  ASSERT_TRUE(std::filesystem::exists(data));

  // Corrupt a byte: resuming names the checkpoint and refuses to start over silently.
  {
    std::fstream f(data, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x5a');
  }
  expect_failure(quick({"--model", model, "--checkpoint-dir", ck, "--resume", "--steps", "4"}), 1,
                 {"step-00000002", "no valid checkpoint"});
  // Truncated.
  std::filesystem::resize_file(data, 100);
  expect_failure(quick({"--model", model, "--checkpoint-dir", ck, "--resume", "--steps", "4"}), 1,
                 {"step-00000002"});
  // A checkpoint of another model.
  const std::string ck2 = dir.file("ck2");
  ASSERT_EQ(run_cann(quick({"--checkpoint-dir", ck2, "--model", model})).exit_code, 0);
  test::write_text(dir.file("other.yaml"), std::string(kTinyModel) + "intermediate_size: 64\n");
  expect_failure(quick({"--model", dir.file("other.yaml"), "--checkpoint-dir", ck2, "--resume",
                        "--steps", "4"}),
                 1, {"parameter layout differs"});
}

}  // namespace
}  // namespace cann
