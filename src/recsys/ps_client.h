// A worker's view of the parameter-server shards: an EmbeddingStore whose rows live on S shard
// processes (row r on shard r % S, ps_shard.h). A pull sends each shard the rows it holds, all
// shards at once, and scatters the answers back; a push sends each shard its rows' gradients
// and returns when every shard has applied them.
//
// Under --elastic a lost shard is replaced by a new process over the same tables (ps_shard.h):
// a request whose connection fails (the shard died, or was stopped and killed) is sent again to
// the replacement, found through `relocate`. Every request may be repeated: a pull counts its
// sightings once per step, a push of an applied step is acknowledged without a second apply, a
// checkpoint or finish already done is done. An answer that is an error is never repeated.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "recsys/embedding_store.h"
#include "recsys/ps_wire.h"

namespace cann::recsys {

class PsClient : public EmbeddingStore {
 public:
  // addresses[s] is shard s's "host:port" (anything after a '#' is not part of it).
  // `pulls_wait`: the shards hold pulls back (bounded staleness) rather than pushes
  // (synchronous); the request that may wait on other workers gets twice the timeout for its
  // answer, the other one timeout, so a stopped shard is named by the workers that wait on it.
  static StatusOr<std::unique_ptr<PsClient>> connect(const RecSpec& spec, int worker,
                                                     const std::vector<std::string>& addresses,
                                                     std::chrono::milliseconds timeout,
                                                     bool pulls_wait);
  void set_step(int step) override { step_ = step; }
  Status pull(PulledRows* pulled) override { return fetch(PsOp::kPull, pulled); }
  Status read(PulledRows* pulled) override { return fetch(PsOp::kRead, pulled); }
  Status push(const PulledRows& pulled, const RowGrads& grads) override;
  Status checkpoint(const std::string& dir, int step, bool full) override;
  // Tells every shard this worker is done.
  Status finish();
  // Where shard s listens once `failed` (its address as this client had it) no longer answers:
  // waits for a replacement, or returns the error that ends the worker. Unset: a lost shard is
  // an error at once.
  using Relocate = std::function<StatusOr<std::string>(int shard, const std::string& failed)>;
  void set_relocate(Relocate relocate) { relocate_ = std::move(relocate); }
  int reconnects() const { return reconnects_; }

  int64_t bytes_sent() const { return bytes_sent_; }
  int64_t bytes_received() const { return bytes_received_; }

 private:
  PsClient(const RecSpec& spec, int worker, std::chrono::milliseconds timeout)
      : spec_(spec), worker_(worker), timeout_(timeout) {}
  Status fetch(PsOp op, PulledRows* pulled);
  // Per shard, per table: the positions in pulled[t].row_ids of the rows on that shard.
  void split(const PulledRows& pulled);
  // Connects to shard s at `address` and introduces this worker.
  Status connect_shard(int s, const std::string& address);
  // Sends one request per shard (parts per shard) and reads every answer into answers[s].
  Status round_trip(PsOp op, const std::vector<std::vector<std::pair<const void*, size_t>>>& parts,
                    std::vector<std::vector<char>>* answers);

  RecSpec spec_;
  int worker_ = 0;
  std::chrono::milliseconds timeout_;
  bool pulls_wait_ = false;
  int step_ = 0;
  std::vector<PsSocket> shards_;
  std::vector<std::string> addresses_;
  std::vector<std::vector<std::vector<int32_t>>> positions_;  // [shard][table] -> positions
  std::vector<std::vector<std::vector<int64_t>>> rows_;       // [shard][table] -> rows
  std::vector<std::vector<uint64_t>> counts_;                 // [shard][table]
  std::vector<std::vector<std::vector<float>>> grads_;        // [shard][table] push staging
  int64_t bytes_sent_ = 0, bytes_received_ = 0;
  Relocate relocate_;
  int reconnects_ = 0;
};

}  // namespace cann::recsys
