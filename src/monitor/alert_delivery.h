// AlertDelivery: takes alerts from the engine and brings them to every route (alert_routes.h)
// without ever making training wait.
//
// Each route has a thread and a bounded queue of its own, so a slow mail server does not hold
// back the webhook. send() only queues (a full queue drops the new alert and counts it). A
// failed attempt is retried after 0.5 s, then 1 s, 2 s, 4 s (four retries; the alert is then
// dropped). The first failure of a route prints one warning line; later ones are counted and
// summarised in at most one line a minute, so an unreachable receiver costs a line, not a line
// per alert. When the owner goes, what is queued gets one more attempt each, within
// `drain_s`; what is left then is dropped, with one line.
//
// Thread safety: send() from any thread; the queues are guarded by mutex_. A route is touched
// by its own thread only. A receiver that hangs up is an error of the attempt, not the end of
// the process: each route blocks SIGPIPE around its own writes (alert_routes.cc).
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "monitor/alert_routes.h"

namespace cann::monitor {

struct DeliveryOptions {
  size_t queue_limit = 100;
  int retries = 4;
  double first_backoff_s = 0.5;  // doubles each retry
  double warning_interval_s = 60.0;
  double drain_s = 5.0;
};

class AlertDelivery {
 public:
  AlertDelivery(std::vector<std::unique_ptr<AlertRoute>> routes, DeliveryOptions options = {});
  ~AlertDelivery();

  void send(const AlertMessage& m);

  struct Counts {
    int delivered = 0;
    int failed_attempts = 0;
    int dropped = 0;
  };
  // Per route, in the order given.
  std::vector<Counts> counts() const;

 private:
  struct Lane {
    std::unique_ptr<AlertRoute> route;
    std::deque<AlertMessage> queue;
    Counts counts;
    std::thread thread;
  };
  void lane_main(Lane* lane);
  // One attempt; on failure, the warning line when one is due. Unlocked.
  bool attempt(Lane* lane, const AlertMessage& m, double* last_warning, int* unreported);

  const DeliveryOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
  double stop_time_ = 0.0;
  std::vector<std::unique_ptr<Lane>> lanes_;
};

}  // namespace cann::monitor
