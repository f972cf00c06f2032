// Every table in this process: one parameter-server shard's tables (ps_shard.h) as shard 0 of
// 1 with one worker, used in place. So a single-process run has the shards' rows and
// optimizers, admission and eviction, and checkpoints, and trains exactly what a run over
// shard processes trains.
#pragma once

#include "recsys/embedding_store.h"
#include "recsys/ps_shard.h"

namespace cann::recsys {

class LocalEmbeddingStore : public EmbeddingStore {
 public:
  explicit LocalEmbeddingStore(const RecSpec& spec, const ShardConfig& config = {});
  void set_step(int step) override { step_ = step; }
  Status pull(PulledRows* pulled) override;
  Status read(PulledRows* pulled) override;
  Status push(const PulledRows& pulled, const RowGrads& grads) override;
  Status checkpoint(const std::string& dir, int step, bool full) override {
    return tables_.save(dir, step, full);
  }
  ShardTables& tables() { return tables_; }

 private:
  static ShardConfig one_shard(ShardConfig config);
  RecSpec spec_;
  ShardTables tables_;
  int step_ = 1;
};

}  // namespace cann::recsys
