// One job's metrics service (see job_monitor.h).
#include "monitor/job_monitor.h"

namespace cann::monitor {

StatusOr<std::unique_ptr<JobMonitor>> JobMonitor::start(JobMonitorConfig config) {
  std::unique_ptr<JobMonitor> m(new JobMonitor());
  m->hub_ = std::make_unique<Hub>(config.job, config.world_size);
  m->alerts_ = std::make_unique<AlertEngine>(*m->hub_, config.job, config.alerts);
  AlertEngine* alerts = m->alerts_.get();
  m->hub_->set_observer([alerts](const RankSnapshot& s) { alerts->observe(s); });
  if (config.get)
    m->collector_ = std::make_unique<SnapshotCollector>(*m->hub_, std::move(config.get),
                                                        config.snapshot_prefix, config.world_size);
  m->server_ = std::make_unique<MonitorServer>(*m->hub_, config.server);
  CANN_RETURN_IF_ERROR(m->server_->start());
  if (m->collector_) m->collector_->start();
  return m;
}

JobMonitor::~JobMonitor() = default;

void JobMonitor::finish() {
  if (collector_) {
    collector_->poll_once();
    collector_->stop();
  }
  server_->stop();
}

void JobMonitor::update(const RankSnapshot& s) {
  if (!collector_) hub_->update(s);
}

}  // namespace cann::monitor
