// Goodput under failures: the share of wall-clock time a job spends on training that is kept,
// given that devices fail, a failure loses the work since the last checkpoint, and writing a
// checkpoint and restarting both take time.
//
//   M    job MTBF = device MTBF / devices (independent exponential failures)
//   delta  checkpoint write time = state bytes the busiest node's ranks write / the node's
//        storage bandwidth (all ranks of a node share its link to storage)
//   R    recovery = restart overhead + reading the checkpoint back
//   tau  checkpoint interval, Young (1974) / Daly (2006) first order: sqrt(2*delta*M) - delta,
//        rounded up to whole steps
//   goodput = tau / (M * exp(R/M) * (exp((tau + delta)/M) - 1))    (Daly 2006)
//
// Worked example: 1024 devices at 50,677 device-hours give M = 49.5 h = 178,161 s; a 60 s
// checkpoint gives tau = sqrt(2 * 60 * 178161) - 60 = 4,564 s (76 minutes); with R = 660 s
// the goodput is 0.971: 1.3% lost to writing checkpoints, 1.3% to recomputing lost work, 0.4%
// to restarts.
#pragma once

namespace cann::plan {

struct GoodputInput {
  int devices = 1;
  double device_mtbf_hours = 0;
  double checkpoint_bytes_per_node = 0;  // what the busiest node's ranks write together
  double storage_GBps_per_node = 0;
  double restart_s = 0;
  double step_time_s = 0;
};

struct Goodput {
  double job_mtbf_s = 0;
  double checkpoint_s = 0;
  double recovery_s = 0;
  double interval_s = 0;  // between checkpoints, a whole number of steps
  double ratio = 0;       // effective training time / wall time
};

Goodput goodput(const GoodputInput& in);

}  // namespace cann::plan
