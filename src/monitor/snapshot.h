// RankSnapshot: what one worker reports after a step. Workers publish it (as JSON) under
// "cann/<job>/monitor/rank<r>" in the job's store at most a few times a second; the hub at the
// rank-0 agent reads every rank's key. Going through the store means one mechanism for ranks on
// this machine and on others, with no connection from workers to the agent.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "monitor/nic_counters.h"

namespace cann::monitor {

struct RankSnapshot {
  int rank = 0;
  std::string host;
  double time = 0.0;  // Unix seconds when the step finished
  int64_t step = 0;
  int64_t total_steps = 0;
  int64_t samples = 0;  // global samples consumed
  double loss = 0.0;
  double val_loss = -1.0;  // last validation loss, -1 when none yet
  double lr = 0.0;
  double grad_norm = 0.0;
  double step_time_s = 0.0;
  double forward_backward_s = 0.0;  // compute part of the step
  double forward_s = 0.0;           // forward passes of the step (all micro-steps)
  double backward_s = 0.0;          // backward passes, without waiting for communication
  double tokens_per_s = 0.0;
  double tflops_per_device = 0.0;
  double comm_time_s = 0.0;
  double comm_exposed_s = 0.0;
  int64_t comm_bytes_total = 0;  // since the start of the run
  int64_t memory_bytes = 0;      // live bytes the engine accounts (params, grads, state, arena)
  int64_t resident_bytes = 0;    // the process's VmRSS when the step was recorded; 0: unknown
  // CPU time the compute threads ran over the step, over threads x step time (core/threads.h
  // ComputeClock); 0..1, -1 when not measured.
  double compute_utilization = -1.0;
  std::vector<NicCounter> nic_errors;  // this host's NIC error counters (nic_counters.h)
  std::vector<int64_t> expert_tokens;  // tokens routed per expert (summed over MoE layers)
  // Expert parallelism: routed rows this rank's experts computed (summed over MoE layers);
  // -1 without ep.
  int64_t expert_rows = -1;
  // The last link probe (run --link-probe-every): GB/s this rank measured receiving from each
  // peer, indexed by peer rank; <= 0 where not measured (itself). Empty when no probe ran.
  std::vector<double> link_gbps;
  // Training efficiency measured at this step (docs/monitoring.md, "Efficiency"); a figure
  // below 0 is unknown (no device figures: neither a plan nor a calibrated spec).
  struct Efficiency {
    double scaling_efficiency = -1, comm_ratio = -1, goodput = -1, tei = -1;
    double mfu = -1, cost_usd_per_hour = -1, energy_kwh_per_step = -1;
  } efficiency;
  // The plan's predictions of the same figures by name (run --plan; empty otherwise).
  std::map<std::string, double> predicted;

  std::string to_json() const;
  static StatusOr<RankSnapshot> from_json(const std::string& text);
};

}  // namespace cann::monitor
