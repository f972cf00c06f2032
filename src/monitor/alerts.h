// AlertEngine: runs the detectors on what the Hub receives and raises alerts.
//
//   - loss, gradient norm and step time of rank 0: rolling z-score and EWMA (SeriesMonitor),
//     increases only; a series that alarmed stays quiet for the next 50 steps, so a level shift
//     is one alert, not fifty;
//   - stragglers: every `straggler_interval_s`, each rank's median forward, backward and exposed
//     communication time over its last 20 steps go to find_stragglers (isolation forest plus the
//     1.3x-the-median rule): "rank 3 on host h2: backward 1.8x the median"; a rank is named
//     again only after it was not a straggler for one round;
//   - slow links: on the same interval, the link bandwidths the ranks' last probes measured
//     (RankSnapshot::link_gbps, from run --link-probe-every) go to find_slow_links: "pair 2-3
//     at 0.3x the median bandwidth", or the rank when all its links are slow; a link or rank is
//     named again only after one round without it.
// An alert is a warning line on stderr ("alert: ..."), an "alert" event in the Hub (the
// dashboard's timeline, /api/events, cann_train_events_total), and, on the routes the config
// names, a webhook POST (http or https, generic or Slack JSON) and an email through sendmail
// (alert_routes.h), delivered from threads of their own (alert_delivery.h) so a slow or
// unreachable receiver never delays training.
//
// Fault injection for tests (as CANN_TRAIN_FAULT_GRAD injects a NaN gradient): the environment
// variable CANN_TRAIN_FAULT_ALERT=STEP raises one alert ("injected alert at step N") when rank
// 0 first reports a step >= STEP, so a whole run's delivery can be checked without waiting for
// a detector's warm-up.
//
// Thread safety: observe() may be called from any thread; mutex_ guards the detector state.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "monitor/alert_routes.h"
#include "monitor/detectors.h"
#include "monitor/hub.h"

namespace cann::monitor {

class AlertDelivery;

struct AlertConfig {
  double sensitivity = 0.5;  // 0..1 (see sensitivity_factor)
  AlertRoutesConfig routes;  // webhook, email; none by default
  double straggler_interval_s = 10.0;
};

class AlertEngine {
 public:
  AlertEngine(Hub& hub, std::string job, AlertConfig config);
  ~AlertEngine();

  void observe(const RankSnapshot& s);
  // Runs the straggler check now (observe() runs it on its interval).
  void check_stragglers();
  // Runs the slow-link check now (observe() runs it with the straggler check).
  void check_links();

 private:
  void raise(const std::string& message, int rank);

  Hub& hub_;
  const std::string job_;
  const AlertConfig config_;
  std::mutex mutex_;
  SeriesMonitor series_;
  std::map<std::string, int64_t> quiet_until_;  // per series: no alarm before this step
  int64_t last_rank0_step_ = -1;
  double last_straggler_check_ = 0.0;
  std::set<int> flagged_;  // ranks named in the last straggler round
  std::set<std::string> flagged_links_;  // links ("2-3") and ranks ("rank 2") named last round
  int64_t injected_step_ = -1;           // CANN_TRAIN_FAULT_ALERT; -1: none
  std::unique_ptr<AlertDelivery> delivery_;  // null when no route is configured
};

}  // namespace cann::monitor
