// A parameter-server shard's process side: listens for the workers (ps_wire.h), serves their
// pulls and pushes from ShardTables, and returns once every worker has finished, or with the
// first worker's failure (a connection closed before its kFinish, a protocol error), so a dead
// worker ends the shard in one line instead of a hang.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "core/status.h"
#include "recsys/ps_shard.h"
#include "recsys/ps_wire.h"

namespace cann::recsys {

class PsServer {
 public:
  // Listens on host (an IPv4 address) at a free port.
  static StatusOr<std::unique_ptr<PsServer>> start(ShardTables* tables, const ShardConfig& config,
                                                   const std::string& host);
  int port() const { return port_; }
  // Accepts config.workers connections (each within accept_timeout of the previous) and serves
  // them until every worker finished. Returns the first failure.
  Status serve(std::chrono::milliseconds accept_timeout);
  int64_t bytes_received() const { return bytes_received_; }

 private:
  PsServer(ShardTables* tables, const ShardConfig& config, PsSocket listener, int port)
      : tables_(tables), config_(config), listener_(std::move(listener)), port_(port) {}
  Status serve_worker(int fd, int* worker_out);

  ShardTables* tables_;
  ShardConfig config_;
  PsSocket listener_;
  int port_ = 0;
  std::atomic<int64_t> bytes_received_{0};
};

}  // namespace cann::recsys
