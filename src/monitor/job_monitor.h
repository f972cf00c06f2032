// JobMonitor: what serves one job's metrics, wired once for every process that serves them
// (the rank-0 agent, a single-process run, rank 0 under another launcher): the hub that keeps
// the ranks' snapshots, the alert engine observing it, the HTTP server (dashboard, JSON API,
// Prometheus), and, when the snapshots come through the store, the collector that polls them.
//
// Members are declared so that destruction stops the collector (which calls the alerts through
// the hub) and the server before the alerts and the hub go.
//
// Thread safety: update() and the accessors may be called from any thread (the hub locks);
// start and destruction from the owner's thread.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "monitor/alerts.h"
#include "monitor/collector.h"
#include "monitor/hub.h"
#include "monitor/server.h"

namespace cann::monitor {

struct JobMonitorConfig {
  std::string job;  // shown on the dashboard and in alerts
  int world_size = 1;
  ServerConfig server;
  AlertConfig alerts;
  // The ranks publish through the store: read "<snapshot_prefix>/rank<r>" with `get`. Empty
  // `get`: the owner feeds the hub itself (update()).
  StoreGet get;
  std::string snapshot_prefix;
};

class JobMonitor {
 public:
  // Builds the parts and starts the server (and the collector): fails when the port is taken.
  static StatusOr<std::unique_ptr<JobMonitor>> start(JobMonitorConfig config);
  ~JobMonitor();

  Hub& hub() { return *hub_; }
  std::string url() const { return server_->url(); }
  bool stop_requested() const { return server_->stop_requested(); }
  // A snapshot of the owner's own rank, when no collector reads the store.
  void update(const RankSnapshot& s);
  // The job is over: one last pass over the store (the final steps, for a last scrape), then
  // the collector and the server stop.
  void finish();

 private:
  JobMonitor() = default;

  std::unique_ptr<Hub> hub_;
  std::unique_ptr<AlertEngine> alerts_;
  std::unique_ptr<SnapshotCollector> collector_;
  std::unique_ptr<MonitorServer> server_;
};

}  // namespace cann::monitor
