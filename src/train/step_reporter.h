// StepReporter: everything a worker says about its steps. It owns the progress line, the JSONL
// step log, the TensorBoard event file, and the monitoring path: a single process (or rank 0
// under another launcher: torchrun, Slurm, MPI) serves the dashboard itself through a
// monitor::JobMonitor, the one the agent also uses; a worker under cann-train's agent
// publishes its snapshots into the store, where the agent's JobMonitor collects them.
//
// Rank 0 alone prints, writes the step log and TensorBoard; every rank feeds the monitor. The
// run totals the dashboard shows (communication bytes, tokens per expert, the last link probe
// and validation loss) are kept here.
//
// Thread safety: one thread (the training loop).
#pragma once

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/store.h"
#include "core/status.h"
#include "monitor/collector.h"
#include "monitor/job_monitor.h"
#include "monitor/nic_counters.h"
#include "monitor/tensorboard.h"
#include "parallel/reducer.h"
#include "train/config.h"
#include "train/efficiency_meter.h"
#include "train/progress.h"

namespace cann::train {

// Where this worker stands in its job.
struct ReporterPlace {
  int rank = 0;
  int world_size = 1;
  std::string job_id;                  // empty: a plain single process
  std::shared_ptr<comm::Store> store;  // the job's store (multi-process)
};

// One completed step, as the ranks agreed on it.
struct StepRecord {
  int step = 0;  // completed, 1-based
  double loss = 0, lm_loss = 0, aux_loss = 0;
  float lr = 0;
  double grad_norm = 0;
  double step_time_s = 0;
  double forward_s = 0, backward_s = 0, compute_s = 0;  // this rank's
  parallel::StepComm comm;                              // this rank's
  std::vector<double> expert_load;  // global counts per expert (MoE models); empty otherwise
  double dropped = 0;
  // Expert parallelism: rows computed at each place of the expert groups (expert_load.h).
  std::vector<double> expert_rank_load;
  std::optional<double> val_loss;  // evaluated after this step
  std::string grad_norms_json;     // --grad-norms: the per-layer norms
  int64_t samples = 0;             // global samples consumed
  int64_t memory_bytes = 0;        // this rank's engine accounting
  int64_t resident_bytes = 0;      // the process's VmRSS, read with memory_bytes
  double compute_utilization = -1;  // the compute threads' CPU time / (threads x step time)
  bool last = false;
};

class StepReporter {
 public:
  // Opens the step log (appending: StateKeeper empties it for a fresh run and the agent's
  // events share it) and TensorBoard on rank 0, and starts or joins the monitor.
  static StatusOr<std::unique_ptr<StepReporter>> open(const TrainConfig& config,
                                                      const ReporterPlace& place,
                                                      double tokens_per_step,
                                                      double flops_per_token);
  ~StepReporter();

  bool leader() const { return place_.rank == 0; }
  // Rank 0, not --quiet: the progress line and the run's notes are shown.
  bool show() const { return leader() && !config_.quiet; }
  // A line that stays on screen (printed as given: the caller decides who prints).
  void line(const std::string& text) { progress_.line(text); }

  // Training (re)starts: the next step pays for page faults and BLAS warm-up, so it is kept
  // out of the ETA.
  void start_timing();
  // The step's progress line and step log line (with the validation loss when evaluated).
  Status report(const StepRecord& r);
  // The line of the step log the last report() formed (on every rank: a snapshot carries it).
  const std::string& last_log_line() const { return last_line_; }
  // Training resumes after `step`, restored from a snapshot that carried `line`, its step-log
  // line. Only the leader writes the step log, and a leader that dies after a step's last
  // collective but before its line leaves a step the other ranks finished and committed without
  // a line: that line is written from the snapshot, marked "recovered". Nothing happens when
  // the log already has the step, or `line` is empty.
  Status recover_step_line(int step, const std::string& line);
  // Then its TensorBoard scalars and monitoring snapshot.
  Status publish(const StepRecord& r);
  // This rank's routing of a step before the ranks agree on it: the dashboard's run totals.
  void count_expert_tokens(const std::vector<double>& local_load);
  // Expert parallelism: the rows this rank's experts computed this step (StepCompute::rank_rows
  // before the sum over the world: its own place set, the others zero).
  void count_expert_rows(const std::vector<double>& rank_rows);
  void set_link_gbps(std::vector<double> gbps) { link_gbps_ = std::move(gbps); }
  // A line of JSON for the step log (an event; rank 0 only).
  Status write_log_line(const std::string& line);
  // An event on the dashboard of a process that serves it.
  void dashboard_event(const std::string& name, int rank, const std::string& text);
  // POST /api/stop reached this process's dashboard.
  bool stop_requested() const { return monitor_ && monitor_->stop_requested(); }
  // Closes the step log and ends the progress line.
  void finish();

 private:
  StepReporter(TrainConfig config, ReporterPlace place)
      : config_(std::move(config)), place_(std::move(place)) {}
  Status start_monitoring();
  Status write_tensorboard(const StepRecord& r);
  void publish_snapshot(const StepRecord& r);

  TrainConfig config_;
  ReporterPlace place_;
  double tokens_per_step_ = 0, flops_per_token_ = 0;
  Progress progress_;
  struct CloseFile {
    void operator()(FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<FILE, CloseFile> log_;
  std::string last_line_;
  std::unique_ptr<monitor::TensorBoardWriter> tensorboard_;
  std::unique_ptr<monitor::JobMonitor> monitor_;           // this process serves
  std::unique_ptr<monitor::SnapshotPublisher> publisher_;  // the agent serves
  double time_sum_ = 0;
  int timed_steps_ = -1;  // -1: the next step is the first since start_timing()
  int64_t comm_bytes_total_ = 0;
  std::vector<int64_t> expert_tokens_total_;
  int64_t expert_rows_total_ = -1;  // -1: no ep; counting starts from 0
  std::vector<double> link_gbps_;  // the last --link-probe-every measurement
  std::vector<monitor::NicCounter> nic_errors_;  // read at most once a second
  double nic_read_time_ = -1.0;
  double last_val_loss_ = -1.0;
  std::unique_ptr<EfficiencyMeter> meter_;

 public:
  // The run's efficiency figures so far (EfficiencyMeter::summary).
  std::map<std::string, double> efficiency_summary() const { return meter_->summary(); }

 private:
  monitor::RankSnapshot::Efficiency efficiency_;  // of the last reported step
};

}  // namespace cann::train
