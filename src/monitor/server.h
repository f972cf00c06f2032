// The monitoring HTTP server (cpp-httplib) at the rank-0 agent, bound to 127.0.0.1 by default:
//
//   GET  /                the dashboard (web/, compiled into the binary)
//   GET  /metrics         Prometheus text format 0.0.4
//   GET  /api/status      the latest snapshot of every rank, world size, restarts
//   GET  /api/series      ?rank=R&since=STEP: per-rank history for the charts
//   GET  /api/events      ?last=N: failures, restarts, scaling, alerts
//   POST /api/stop        asks the job to checkpoint and stop; needs "Authorization: Bearer
//                         TOKEN" (every endpoint that changes anything needs the token)
//
// Thread safety: handlers run on the server's threads and only read the Hub (thread-safe);
// the stop request sets an atomic flag the agent polls.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "core/status.h"
#include "monitor/hub.h"

namespace httplib {
class Server;
}

namespace cann::monitor {

struct ServerConfig {
  std::string bind = "127.0.0.1";
  int port = 9999;  // 0 picks a free port
  // When `port` is taken, try the next ones (up to 100): two jobs on one machine both get a
  // dashboard. An explicitly chosen port should fail instead.
  bool try_next_ports = false;
  bool dashboard = true;   // serve / and the JSON API
  bool prometheus = true;  // serve /metrics
  std::string token;       // for endpoints that change anything; empty: a random one
};

class MonitorServer {
 public:
  MonitorServer(Hub& hub, ServerConfig config);
  ~MonitorServer();

  // Binds and starts serving on a thread of its own.
  Status start();
  void stop();
  int port() const { return port_; }
  const std::string& token() const { return config_.token; }
  std::string url() const;
  // Set once POST /api/stop was accepted.
  bool stop_requested() const { return stop_requested_.load(); }

 private:
  Hub& hub_;
  ServerConfig config_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<bool> stop_requested_{false};
};

}  // namespace cann::monitor
