// `cann-train run`: flags to TrainConfig, then the trainer.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/commands.h"
#include "cli/validators.h"
#include "core/threads.h"
#include "train/trainer.h"

namespace cann::cli {

CommandMain add_run_command(CLI::App& app) {
  auto config = std::make_shared<train::TrainConfig>();
  CLI::App* run = app.add_subcommand(
      "run", "Train a model. With no flags: gpt_tiny on the fortunes corpus for a few minutes.");
  run->add_option("--model", config->model,
                  "Model: a shipped name (gpt_tiny, moe_bert_tiny, gpt2_124m, bert_base, "
                  "bert_large) or a YAML/config.json path")
      ->capture_default_str();
  run->add_option("--data", config->data,
                  "Training data: 'fortunes', a text file, a directory of text files, or llm.c "
                  "token shards (.bin file or directory)")
      ->capture_default_str();
  run->add_option("--steps", config->steps, "Optimizer steps")
      ->check(kPositive)
      ->capture_default_str();
  run->add_option("--batch-size", config->batch_size, "Global batch: sequences per optimizer step")
      ->check(kPositive)
      ->capture_default_str();
  run->add_option("--seq-len", config->seq_len,
                  "Tokens per sequence (default: the model's seq_length)")
      ->check(kPositive);
  run->add_option("--lr", config->lr, "Peak learning rate")
      ->check(kPositive)
      ->capture_default_str();
  run->add_option("--warmup", config->warmup,
                  "Linear warmup steps before cosine decay (default: 5% of --steps, at most 200)")
      ->check(kNonNegative);
  run->add_option("--weight-decay", config->weight_decay, "AdamW decoupled weight decay")
      ->check(kNonNegative)
      ->capture_default_str();
  run->add_option("--grad-clip", config->grad_clip, "Max global gradient norm (0: no clipping)")
      ->check(kNonNegative)
      ->capture_default_str();
  run->add_option("--seed", config->seed, "Seed for initialization, sampling and masking")
      ->capture_default_str();
  run->add_option("--threads", config->threads,
                  "Threads for BLAS and kernels together (default: every core)")
      ->check(kNonNegative);
  run->add_option("--eval-every", config->eval_every,
                  "Validation loss every K steps (0: only at the end)")
      ->check(kNonNegative)
      ->capture_default_str();
  run->add_option("--eval-batches", config->eval_batches, "Batches per validation")
      ->check(kPositive)
      ->capture_default_str();
  run->add_option("--log-json", config->log_json,
                  "Write one JSON object per step to FILE (step, loss, lr, grad_norm, "
                  "step_time_s, tokens_per_s; val_loss on evaluation steps)");
  run->add_option("--checkpoint-dir", config->checkpoint_dir,
                  "Directory for checkpoints (written at the end, and every K steps with "
                  "--checkpoint-every)");
  run->add_option("--checkpoint-every", config->checkpoint_every, "Checkpoint every K steps")
      ->check(kNonNegative);
  run->add_option("--keep-checkpoints", config->keep_checkpoints, "Checkpoints to keep")
      ->check(kPositive)
      ->capture_default_str();
  run->add_flag("--resume", config->resume,
                "Continue from the newest valid checkpoint in --checkpoint-dir");
  run->add_option("--exit-interval", config->exit_interval,
                  "Checkpoint and exit at the first step that is a multiple of K (for jobs "
                  "with a time limit)")
      ->check(kNonNegative);
  run->add_option("--sample-tokens", config->sample_tokens,
                  "gpt: bytes of text to generate after training (0: none)")
      ->check(kNonNegative)
      ->capture_default_str();
  run->add_flag("--quiet", config->quiet, "Print no progress lines");

  return [config]() -> int {
    auto trainer = train::Trainer::create(*config);
    if (!trainer.ok()) {
      std::fprintf(stderr, "cann-train run: error: %s\n", trainer.status().message().c_str());
      return trainer.status().exit_code();
    }
    train::RunSummary summary;
    Status s = (*trainer)->run(&summary);
    if (!s.ok()) {
      std::fprintf(stderr, "cann-train run: error: %s\n", s.message().c_str());
      return s.exit_code();
    }
    std::printf("done: steps %d..%d, loss %.4f -> %.4f", summary.first_step + 1, summary.last_step,
                summary.first_loss, summary.last_loss);
    if (summary.last_val_loss >= 0) std::printf(", val loss %.4f", summary.last_val_loss);
    std::printf("\n");
    return summary.interrupted ? 130 : 0;
  };
}

}  // namespace cann::cli
