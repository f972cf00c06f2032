// Training a recommendation model: batches from the synthetic click generator or a Criteo TSV
// file, rows pulled from the embedding store, the model's pass, row gradients pushed back to
// the sparse optimizer, the dense parameters updated by Adam, and at every evaluation the AUC
// and log loss on held-out impressions (beside the planted ceiling on synthetic data).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

#include "core/status.h"
#include "recsys/click_batch.h"
#include "recsys/criteo.h"
#include "recsys/embedding_store.h"
#include "recsys/rec_spec.h"
#include "recsys/synthetic_clicks.h"

namespace cann::comm {
class Group;
}

namespace cann::recsys {

struct RecTrainConfig {
  int steps = 2000;
  int batch_size = 512;
  float lr = 1e-3f;  // dense Adam
  SparseOptimizerConfig sparse;
  int eval_interval = 500;    // 0: evaluate at the end only
  int64_t eval_rows = 65536;  // held-out impressions per evaluation
  int log_interval = 100;
  uint64_t seed = 1;
  std::string data_path;  // Criteo TSV; empty: the synthetic generator
  BadLinePolicy bad_lines = BadLinePolicy::kFatal;
  bool quiet = false;
  int admit_after = 1, evict_after = 0;  // the in-process tables' (ps_shard.h)
  // Checkpoints (rec_checkpoint.h): every checkpoint_every steps and at the last, under
  // checkpoint_dir; resume: start after the directory's committed step.
  std::string checkpoint_dir;
  int checkpoint_every = 0;
  bool resume = false;
  // Worker 0 appends one JSON line per step (docs/step-log.md, "Recommendation models").
  std::string log_json;
};

struct RecRunSummary {
  int steps = 0;
  int first_step = 1;  // after a resume, the committed step + 1
  double first_loss = 0, last_loss = 0;
  double auc = NAN, log_loss = NAN;                  // the last evaluation
  double ceiling_auc = NAN, ceiling_log_loss = NAN;  // planted (synthetic data only)
  double samples_per_s = 0;                          // training samples over the loop's time
  int64_t samples = 0;                               // global: every worker's
  double train_seconds = 0;                          // the training loop, evaluations excluded
};

// Where one worker of a multi-process run stands. Every worker takes its 1/W slice of each
// global batch; the dense gradients are averaged over `dense_group` (the workers only, through
// the data-parallel bucket reductions: fp32, bf16 or compressed momenta), the row gradients
// are scaled by 1/W and summed by the shards, and the embedding rows come from `store` (the
// parameter-server shards). Worker 0 evaluates and prints.
struct RecWorkerContext {
  int worker = 0, workers = 1;
  comm::Group* dense_group = nullptr;  // null: one worker
  // The dense gradients on the wire: fp32, bf16, or (after onebit_warmup fp32 steps; -1: 15% of
  // the run, at least Adam's variance window) 1-bit Adam's or top-k's compressed momenta
  // (parallel/onebit_adam.h) in place of Adam.
  enum class DenseCompression { kNone, kBf16, kOneBit, kTopK };
  DenseCompression compression = DenseCompression::kNone;
  double topk_ratio = 0.0;
  int onebit_warmup = -1;
  EmbeddingStore* store = nullptr;  // null: every table in this process
  // Called after every completed step with its number (an elastic job's heartbeat).
  std::function<void(int step)> on_step;
};

// Rows [begin, begin + n) of a batch, with their bags (the layout of click_batch.h).
void slice_rows(const ClickBatch& in, int begin, int n, ClickBatch* out);

// Where the held-out synthetic impressions start: far beyond any training run's positions, so
// the two never share an impression.
inline constexpr int64_t kSyntheticEvalPosition = int64_t{1} << 50;

// The synthetic generator shaped for a spec: users and items are the id spaces of the first
// table of each side (two-tower: user_features; DLRM: half the features each), groups the rows
// of each side's second table. Fails with one line when the spec cannot be fed synthetically.
StatusOr<SyntheticClickSpec> synthetic_spec_for(const RecSpec& spec, uint64_t seed);

// Trains in this process, printing progress lines to `out` unless quiet.
StatusOr<RecRunSummary> train_recsys(const RecSpec& spec, const RecTrainConfig& config,
                                     std::FILE* out, const RecWorkerContext& context = {});

}  // namespace cann::recsys
