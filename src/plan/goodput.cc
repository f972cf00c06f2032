// Young/Daly checkpoint interval and Daly's expected-goodput formula (see goodput.h).
#include "plan/goodput.h"

#include <algorithm>
#include <cmath>

namespace cann::plan {

Goodput goodput(const GoodputInput& in) {
  Goodput g;
  g.job_mtbf_s = in.device_mtbf_hours * 3600.0 / std::max(1, in.devices);
  g.checkpoint_s = in.storage_GBps_per_node > 0
                       ? in.checkpoint_bytes_per_node / (in.storage_GBps_per_node * 1e9)
                       : 0;
  // Restoring reads the same bytes back at the same bandwidth.
  g.recovery_s = in.restart_s + g.checkpoint_s;
  const double M = g.job_mtbf_s, delta = g.checkpoint_s;
  if (M <= 0) return g;
  // Daly (2006): tau = sqrt(2 delta M) - delta while delta < M/2, else M.
  double tau = delta < M / 2 ? std::sqrt(2 * delta * M) - delta : M;
  if (in.step_time_s > 0) tau = std::max(1.0, std::ceil(tau / in.step_time_s)) * in.step_time_s;
  tau = std::max(tau, 1e-9);
  g.interval_s = tau;
  g.ratio = tau / (M * std::exp(g.recovery_s / M) * std::expm1((tau + delta) / M));
  g.ratio = std::clamp(g.ratio, 0.0, 1.0);
  return g;
}

}  // namespace cann::plan
