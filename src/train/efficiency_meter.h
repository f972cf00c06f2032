// EfficiencyMeter: the efficiency figures of a run, measured step by step by the planner's
// definitions (core/efficiency.h; docs/monitoring.md, "Efficiency"):
//   scaling_efficiency = this rank's forward and backward compute / (step - exposed comm)
//   comm_ratio         = exposed communication / step
//   goodput            = step time of the steps this process trained / its wall time so far
//                        (start-up, evaluation, checkpoints and waits count against it)
//   tei                = scaling_efficiency x (1 - comm_ratio) x goodput
//   mfu                = with a plan: the planned MFU x planned step / measured step (the
//                        planner's model FLOPs and peak, the measured time); else achieved
//                        model FLOP/s per device / the calibrated peak
//   cost_usd_per_hour  = devices x their hourly price
//   energy_kwh_per_step = devices x rated power x step time
// The last three need the device figures of TrainConfig::devices and are unknown (-1) without.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "monitor/snapshot.h"
#include "train/config.h"

namespace cann::train {

class EfficiencyMeter {
 public:
  EfficiencyMeter(const TrainConfig& config, int devices);

  // One completed step of this rank.
  monitor::RankSnapshot::Efficiency step(double step_time_s, double compute_s,
                                         double comm_exposed_s, double tflops_per_device);
  // The run's figures by name, for the plan's `measured:`: the medians over its steps (the
  // first two left out when there are more) of scaling efficiency, comm ratio and MFU, the
  // goodput at the end, and the TEI of those; empty before any step.
  std::map<std::string, double> summary() const;

 private:
  std::vector<double> scaling_, comm_, mfu_;
  double goodput_ = -1;
  TrainConfig::DeviceFigures devices_;
  std::map<std::string, double> predicted_;
  int world_ = 1;
  double started_ = 0;  // this process's start, steady-clock seconds
  double trained_s_ = 0;
};

}  // namespace cann::train
