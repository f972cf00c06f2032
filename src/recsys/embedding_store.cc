// Row deduplication, the sparse optimizers and the in-process store; see embedding_store.h.
#include "recsys/embedding_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/rng.h"

namespace cann::recsys {

Status index_batch(const RecSpec& spec, const ClickBatch& batch, PulledRows* pulled) {
  pulled->resize(spec.sparse_features);
  const int B = batch.batch;
  std::vector<std::pair<int64_t, int32_t>> keyed;
  for (int f = 0; f < spec.sparse_features; ++f) {
    PulledFeature& p = (*pulled)[f];
    const int64_t begin = batch.offsets[static_cast<int64_t>(f) * B];
    const int64_t end = batch.offsets[static_cast<int64_t>(f + 1) * B];
    const int64_t rows = spec.table_rows[f];
    keyed.resize(end - begin);
    for (int64_t k = begin; k < end; ++k) {
      const int64_t id = batch.ids[k];
      if (!spec.hash_ids && (id < 0 || id >= rows))
        return InvalidArgument("sparse feature " + std::to_string(f) + ": id " +
                               std::to_string(id) + " is outside its table's " +
                               std::to_string(rows) + " rows and " + spec.source +
                               " sets hash_ids: false; hint: set hash_ids: true, or give the "
                               "table at least as many rows as the id space");
      keyed[k - begin] = {table_row(id, rows, spec.hash_ids), static_cast<int32_t>(k - begin)};
    }
    std::sort(keyed.begin(), keyed.end());
    p.row_ids.clear();
    p.row_index.resize(keyed.size());
    for (const auto& [row, pos] : keyed) {
      if (p.row_ids.empty() || p.row_ids.back() != row) p.row_ids.push_back(row);
      p.row_index[pos] = static_cast<int32_t>(p.row_ids.size() - 1);
    }
  }
  return OkStatus();
}

int sparse_state_width(SparseOptimizer kind, int C) {
  return kind == SparseOptimizer::kRowwiseAdagrad ? 1 : 2 * C + 1;
}

void sparse_update_row(float* w, float* state, const float* g, int C,
                       const SparseOptimizerConfig& config) {
  if (config.kind == SparseOptimizer::kRowwiseAdagrad) {
    float sq = 0.0f;
    for (int c = 0; c < C; ++c) sq += g[c] * g[c];
    state[0] += sq / static_cast<float>(C);
    const float step = config.lr / (std::sqrt(state[0]) + config.eps);
    for (int c = 0; c < C; ++c) w[c] -= step * g[c];
    return;
  }
  float* m = state;
  float* v = state + C;
  const float t = state[2 * C] += 1.0f;
  const float c1 = 1.0f - std::pow(config.beta1, t), c2 = 1.0f - std::pow(config.beta2, t);
  for (int c = 0; c < C; ++c) {
    m[c] = config.beta1 * m[c] + (1.0f - config.beta1) * g[c];
    v[c] = config.beta2 * v[c] + (1.0f - config.beta2) * g[c] * g[c];
    w[c] -= config.lr * (m[c] / c1) / (std::sqrt(v[c] / c2) + config.eps);
  }
}

void init_row(float* w, int C, int64_t rows, uint64_t seed, int table, int64_t row) {
  Rng rng(seed ^ (static_cast<uint64_t>(table) << 48) ^
          (static_cast<uint64_t>(row) * 0x9e3779b97f4a7c15ULL));
  const float bound = static_cast<float>(std::sqrt(1.0 / static_cast<double>(rows)));
  for (int c = 0; c < C; ++c) w[c] = (2.0f * rng.uniform() - 1.0f) * bound;
}

}  // namespace cann::recsys
