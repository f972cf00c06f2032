// In-process embedding rows; see local_store.h.
#include "recsys/local_store.h"

namespace cann::recsys {

ShardConfig LocalEmbeddingStore::one_shard(ShardConfig config) {
  config.shard = 0;
  config.shards = 1;
  config.workers = 1;
  config.staleness = -1;
  return config;
}

LocalEmbeddingStore::LocalEmbeddingStore(const RecSpec& spec, const ShardConfig& config)
    : spec_(spec), tables_(spec, one_shard(config)) {}

Status LocalEmbeddingStore::pull(PulledRows* pulled) {
  const int C = spec_.embedding_dim;
  for (int t = 0; t < spec_.sparse_features; ++t) {
    PulledFeature& p = (*pulled)[t];
    p.rows.resize(p.row_ids.size() * C);
    CANN_RETURN_IF_ERROR(
        tables_.pull(0, step_, t, p.row_ids.data(), p.row_ids.size(), p.rows.data()));
  }
  return OkStatus();
}

Status LocalEmbeddingStore::read(PulledRows* pulled) {
  const int C = spec_.embedding_dim;
  for (int t = 0; t < spec_.sparse_features; ++t) {
    PulledFeature& p = (*pulled)[t];
    p.rows.resize(p.row_ids.size() * C);
    CANN_RETURN_IF_ERROR(tables_.read(t, p.row_ids.data(), p.row_ids.size(), p.rows.data()));
  }
  return OkStatus();
}

Status LocalEmbeddingStore::push(const PulledRows& pulled, const RowGrads& grads) {
  std::vector<std::vector<int64_t>> rows(spec_.sparse_features);
  for (int t = 0; t < spec_.sparse_features; ++t) rows[t] = pulled[t].row_ids;
  return tables_.push(0, step_, rows, grads);
}

}  // namespace cann::recsys
