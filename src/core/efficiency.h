// The efficiency figures the planner predicts and a run measures, by one definition each
// (docs/planner.md, "Goodput and TEI"; docs/monitoring.md, "Efficiency"), so a prediction and
// a measurement of the same figure can be set side by side.
#pragma once

namespace cann {

// The training efficiency index: the share of wall time spent on the model's own compute that
// survives failures.
//   scaling_efficiency: the model's compute over the step time less exposed communication;
//   comm_ratio: exposed communication over the step time;
//   fault_tolerance: goodput, the share of wall time spent on training that is kept.
inline double training_efficiency_index(double scaling_efficiency, double comm_ratio,
                                        double fault_tolerance) {
  return scaling_efficiency * (1.0 - comm_ratio) * fault_tolerance;
}

// Energy of one step of `devices` devices drawing `watts` each, in kWh.
inline double energy_kwh_per_step(int devices, double watts, double step_time_s) {
  return devices * watts * step_time_s / 3.6e6;
}

}  // namespace cann
