// Where a recommendation model's embedding rows live, and the sparse optimizers that update
// them. A batch touches few rows of huge tables, so the trainer never hands a table to the
// model: it pulls the rows the batch touches (each distinct row once), the model computes with
// those and returns their gradients, and the store applies the gradients to those rows only.
// LocalEmbeddingStore keeps every table in this process; a parameter-server client is the same
// interface over the network.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "recsys/click_batch.h"
#include "recsys/rec_spec.h"

namespace cann::recsys {

// One sparse feature's rows for one batch: the distinct table rows its ids land on (row_ids, in
// ascending order), their values (U, C), and for every id of the feature (in the batch's CSR
// order) the index of its row in row_ids.
struct PulledFeature {
  std::vector<int64_t> row_ids;
  std::vector<float> rows;
  std::vector<int32_t> row_index;
};

// Per sparse feature, in feature order.
using PulledRows = std::vector<PulledFeature>;
// Per sparse feature, (U, C): the gradients of the pulled rows, same order.
using RowGrads = std::vector<std::vector<float>>;

// Maps the batch's ids of every feature to table rows and deduplicates them (no values).
// Fails with one line when an id is out of range of an unhashed table.
Status index_batch(const RecSpec& spec, const ClickBatch& batch, PulledRows* pulled);

enum class SparseOptimizer { kRowwiseAdagrad, kLazyAdam };

struct SparseOptimizerConfig {
  SparseOptimizer kind = SparseOptimizer::kRowwiseAdagrad;
  float lr = 0.05f;
  float eps = 1e-8f;
  float beta1 = 0.9f, beta2 = 0.999f;  // lazy Adam
};

// The optimizer's arithmetic on one row, shared by every store:
// Row-wise Adagrad (as DLRM and FBGEMM's EXACT_ROWWISE_ADAGRAD do): one accumulator per row,
// acc += mean_c g_c^2; w -= lr g / (sqrt(acc) + eps).
// Lazy Adam: Adam's moments updated only for rows a batch touches, each row bias-corrected by
// its own update count (kept in the row's state), so a rarely seen row is not damped by the
// global step.
// state holds sparse_state_width(kind, C) floats for the row.
int sparse_state_width(SparseOptimizer kind, int C);
void sparse_update_row(float* w, float* state, const float* g, int C,
                       const SparseOptimizerConfig& config);

// The initial value of a table's row: uniform in +-sqrt(1/rows) (DLRM's initialization), drawn
// from (seed, table, row) alone, so a row has the same start wherever it is placed.
void init_row(float* w, int C, int64_t rows, uint64_t seed, int table, int64_t row);

class EmbeddingStore {
 public:
  virtual ~EmbeddingStore() = default;
  // The step (1-based) the next pull and push belong to; a local store needs no step.
  virtual void set_step(int /*step*/) {}
  // Fills every feature's rows for the row_ids/row_index that index_batch set.
  virtual Status pull(PulledRows* pulled) = 0;
  // Fills the rows as pull does, for evaluation: nothing is counted (no admission, no eviction
  // clock) and nothing waits on other workers.
  virtual Status read(PulledRows* pulled) { return pull(pulled); }
  // Applies grads (one (U,C) block per feature, for pulled's row_ids) with the sparse optimizer.
  virtual Status push(const PulledRows& pulled, const RowGrads& grads) = 0;
  // Saves the rows' state after `step` under the checkpoint directory (the first worker's call
  // for a step writes, the others' return when it is on disk): a base of every row seen
  // (`full`) or the rows touched since the last save.
  virtual Status checkpoint(const std::string& dir, int step, bool full) = 0;
};

}  // namespace cann::recsys
