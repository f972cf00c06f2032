// A worker's step reports: progress line, step log, TensorBoard, monitoring (see
// step_reporter.h).
#include "train/step_reporter.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/host.h"
#include "core/json_line.h"
#include "core/timer.h"
#include "train/efficiency_meter.h"
#include "train/expert_load.h"

namespace cann::train {

StatusOr<std::unique_ptr<StepReporter>> StepReporter::open(const TrainConfig& config,
                                                           const ReporterPlace& place,
                                                           double tokens_per_step,
                                                           double flops_per_token) {
  std::unique_ptr<StepReporter> r(new StepReporter(config, place));
  r->tokens_per_step_ = tokens_per_step;
  r->flops_per_token_ = flops_per_token;
  r->meter_ = std::make_unique<EfficiencyMeter>(config, place.world_size);
  CANN_RETURN_IF_ERROR(r->start_monitoring());
  if (!config.tensorboard_dir.empty() && r->leader()) {
    CANN_ASSIGN_OR_RETURN(r->tensorboard_,
                          monitor::TensorBoardWriter::open(config.tensorboard_dir));
  }
  if (!config.log_json.empty() && r->leader()) {
    // Appending: the agent's events share the file (StateKeeper emptied it for a fresh run).
    r->log_.reset(std::fopen(config.log_json.c_str(), "a"));
    if (!r->log_)
      return IoError(config.log_json +
                     ": cannot open the step log for writing: " + std::strerror(errno));
  }
  return r;
}

StepReporter::~StepReporter() = default;

// Who serves the dashboard: a single process itself; under cann-train's agent the agent (it
// sets CANN_TRAIN_MONITOR=1 and the workers publish their snapshots through the store); under
// another launcher (torchrun, Slurm, MPI) rank 0, which then also collects from the store.
Status StepReporter::start_monitoring() {
  if (!config_.monitor) return OkStatus();
  const char* flag = std::getenv("CANN_TRAIN_MONITOR");
  const std::string agent_monitors = flag != nullptr ? flag : "";
  monitor::JobMonitorConfig mc;
  mc.server = config_.monitor_server;
  mc.alerts = config_.alerts;
  if (place_.job_id.empty()) {
    mc.job = "local";
  } else {
    // "rank0": the multi-node agent serves no dashboard, but `scale --auto` reads the job's
    // throughput from rank 0's snapshot.
    if (agent_monitors == "0" || !place_.store || (agent_monitors == "rank0" && place_.rank != 0))
      return OkStatus();
    std::shared_ptr<comm::Store> store = place_.store;
    const std::string prefix = "cann/" + place_.job_id + "/monitor";
    publisher_ = std::make_unique<monitor::SnapshotPublisher>(
        [store](const std::string& k, const std::string& v) { return store->set(k, v); }, prefix);
    if (!agent_monitors.empty() || place_.rank != 0) return OkStatus();
    mc.job = place_.job_id;
    mc.world_size = place_.world_size;
    mc.get = monitor::store_get([store](const std::string& key) { return store->try_get(key); });
    mc.snapshot_prefix = prefix;
  }
  CANN_ASSIGN_OR_RETURN(monitor_, monitor::JobMonitor::start(std::move(mc)));
  if (!config_.quiet) progress_.line("dashboard: " + monitor_->url());
  return OkStatus();
}

void StepReporter::start_timing() {
  time_sum_ = 0;
  timed_steps_ = -1;
}

void StepReporter::count_expert_tokens(const std::vector<double>& local_load) {
  if (expert_tokens_total_.empty()) expert_tokens_total_.assign(local_load.size(), 0);
  for (size_t e = 0; e < local_load.size(); ++e)
    expert_tokens_total_[e] += static_cast<int64_t>(local_load[e]);
}

void StepReporter::count_expert_rows(const std::vector<double>& rank_rows) {
  if (expert_rows_total_ < 0) expert_rows_total_ = 0;
  for (double rows : rank_rows) expert_rows_total_ += static_cast<int64_t>(rows);
}

Status StepReporter::report(const StepRecord& r) {
  const double dt = r.step_time_s;
  // The first step pays for page faults and BLAS warm-up: keep it out of the ETA.
  if (timed_steps_ >= 0) {
    time_sum_ += dt;
    ++timed_steps_;
  } else {
    timed_steps_ = 0;
  }
  const double avg = timed_steps_ > 0 ? time_sum_ / timed_steps_ : dt;
  const bool multi = place_.world_size > 1;
  StepReport p;
  p.step = r.step;
  p.total = config_.steps;
  p.loss = r.loss;
  p.lr = r.lr;
  p.grad_norm = r.grad_norm;
  p.step_time_s = dt;
  p.tokens_per_s = tokens_per_step_ / dt;
  p.gflops = flops_per_token_ * tokens_per_step_ / dt / 1e9;
  p.eta_s = avg * (config_.steps - r.step);
  p.samples = r.samples;
  p.tflops_per_device = p.gflops / 1e3 / place_.world_size;
  efficiency_ = meter_->step(dt, r.compute_s, r.comm.comm_exposed_s, p.tflops_per_device);
  if (show()) progress_.step(p);

  JsonLine line;
  line.add("step", r.step)
      .add("time", unix_seconds())
      .add("loss", r.loss)
      .add("lr", static_cast<double>(r.lr))
      .add("grad_norm", r.grad_norm)
      .add("step_time_s", dt)
      .add("tokens_per_s", p.tokens_per_s)
      .add("tokens", static_cast<int64_t>(tokens_per_step_))
      .add("gflops", p.gflops);
  if (multi) {
    line.add("comm_time_s", r.comm.comm_time_s)
        .add("comm_exposed_s", r.comm.comm_exposed_s)
        .add("comm_bytes", static_cast<int64_t>(r.comm.comm_bytes));
  }
  if (!r.expert_load.empty()) {
    line.add("lm_loss", r.lm_loss).add("aux_loss", r.aux_loss);
    line.add("dropped_assignments", static_cast<int64_t>(r.dropped));
    line.add_raw("expert_load", expert_load_json(r.expert_load));
    line.add("expert_balance", expert_balance(r.expert_load));
  }
  if (!r.expert_rank_load.empty()) {
    line.add_raw("expert_rank_load", expert_load_json(r.expert_rank_load));
    line.add("expert_rank_imbalance", expert_imbalance(r.expert_rank_load));
  }
  if (r.val_loss) {
    last_val_loss_ = *r.val_loss;
    line.add("val_loss", *r.val_loss);
    char buf[96];
    std::snprintf(buf, sizeof(buf), "step %d: val loss %.4f (train loss %.4f)", r.step, *r.val_loss,
                  r.loss);
    if (show()) progress_.line(buf);
  }
  if (!r.grad_norms_json.empty()) line.add_raw("grad_norms", r.grad_norms_json);
  const monitor::RankSnapshot::Efficiency& e = efficiency_;
  line.add("scaling_efficiency", e.scaling_efficiency)
      .add("comm_ratio", e.comm_ratio)
      .add("goodput", e.goodput)
      .add("tei", e.tei);
  if (e.mfu >= 0) line.add("mfu", e.mfu);
  if (e.cost_usd_per_hour >= 0) line.add("cost_usd_per_hour", e.cost_usd_per_hour);
  if (e.energy_kwh_per_step >= 0) line.add("energy_kwh_per_step", e.energy_kwh_per_step);
  last_line_ = line.str();
  return write_log_line(last_line_);
}

Status StepReporter::recover_step_line(int step, const std::string& line) {
  if (!log_ || line.empty() || step <= 0) return OkStatus();
  // The log's last step record: a step is at most one ahead of the leader's line, so the
  // tail of the file holds it.
  const std::string path = config_.log_json;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const std::streamoff size = in ? static_cast<std::streamoff>(in.tellg()) : 0;
  const std::streamoff from = std::max<std::streamoff>(0, size - (1 << 20));
  in.seekg(from);
  int logged = 0;
  std::string text;
  if (from > 0) std::getline(in, text);  // a partial first line
  while (std::getline(in, text)) {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_object() && j.contains("step") && !j.contains("event") && j["step"].is_number())
      logged = std::max(logged, j["step"].get<int>());
  }
  if (logged >= step) return OkStatus();
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(line, nullptr, false);
  if (!j.is_object() || j.value("step", -1) != step) return OkStatus();
  j["recovered"] = true;
  return write_log_line(j.dump());
}

Status StepReporter::publish(const StepRecord& r) {
  if (tensorboard_) CANN_RETURN_IF_ERROR(write_tensorboard(r));
  publish_snapshot(r);
  return OkStatus();
}

Status StepReporter::write_tensorboard(const StepRecord& r) {
  const double tokens_per_s = tokens_per_step_ / r.step_time_s;
  const double wall = unix_seconds();
  const int step = r.step;
  Status tb = tensorboard_->add_scalar("train/loss", r.loss, step, wall);
  if (tb.ok()) tb = tensorboard_->add_scalar("train/learning_rate", r.lr, step, wall);
  if (tb.ok()) tb = tensorboard_->add_scalar("train/grad_norm", r.grad_norm, step, wall);
  if (tb.ok()) tb = tensorboard_->add_scalar("perf/step_seconds", r.step_time_s, step, wall);
  if (tb.ok()) tb = tensorboard_->add_scalar("perf/tokens_per_second", tokens_per_s, step, wall);
  if (tb.ok() && r.compute_utilization >= 0)
    tb = tensorboard_->add_scalar("perf/compute_utilization", r.compute_utilization, step, wall);
  if (tb.ok() && r.resident_bytes > 0)
    tb = tensorboard_->add_scalar("memory/fragmentation_bytes",
                                  static_cast<double>(r.resident_bytes - r.memory_bytes), step,
                                  wall);
  if (tb.ok() && place_.world_size > 1)
    tb = tensorboard_->add_scalar("perf/comm_exposed_ratio", r.comm.comm_exposed_s / r.step_time_s,
                                  step, wall);
  if (tb.ok() && r.val_loss) tb = tensorboard_->add_scalar("eval/loss", *r.val_loss, step, wall);
  const monitor::RankSnapshot::Efficiency& e = efficiency_;
  for (const auto& [tag, v] : {std::pair{"efficiency/tei", e.tei},
                               std::pair{"efficiency/scaling", e.scaling_efficiency},
                               std::pair{"efficiency/comm_ratio", e.comm_ratio},
                               std::pair{"efficiency/goodput", e.goodput},
                               std::pair{"efficiency/mfu", e.mfu},
                               std::pair{"efficiency/energy_kwh_per_step", e.energy_kwh_per_step}})
    if (tb.ok() && v >= 0) tb = tensorboard_->add_scalar(tag, v, step, wall);
  if (tb.ok() && r.last) tb = tensorboard_->flush();
  return tb;
}

void StepReporter::publish_snapshot(const StepRecord& r) {
  if (!monitor_ && !publisher_) return;
  const double tokens_per_s = tokens_per_step_ / r.step_time_s;
  const double tflops_per_device =
      flops_per_token_ * tokens_per_step_ / r.step_time_s / 1e12 / place_.world_size;
  comm_bytes_total_ += static_cast<int64_t>(r.comm.comm_bytes);
  monitor::RankSnapshot snap;
  snap.rank = place_.rank;
  snap.host = host_name();
  snap.time = unix_seconds();
  snap.step = r.step;
  snap.total_steps = config_.steps;
  snap.samples = r.samples;
  snap.loss = r.loss;
  snap.val_loss = last_val_loss_;
  snap.lr = r.lr;
  snap.grad_norm = r.grad_norm;
  snap.step_time_s = r.step_time_s;
  snap.forward_backward_s = r.compute_s;
  snap.forward_s = r.forward_s;
  snap.backward_s = r.backward_s - r.comm.comm_exposed_s;
  snap.tokens_per_s = tokens_per_s;
  snap.tflops_per_device = tflops_per_device;
  snap.comm_time_s = r.comm.comm_time_s;
  snap.comm_exposed_s = r.comm.comm_exposed_s;
  snap.comm_bytes_total = comm_bytes_total_;
  snap.memory_bytes = r.memory_bytes;
  snap.resident_bytes = r.resident_bytes;
  snap.compute_utilization = r.compute_utilization;
  if (nic_read_time_ < 0 || now_seconds() - nic_read_time_ >= 1.0) {
    nic_errors_ = monitor::read_nic_counters();
    nic_read_time_ = now_seconds();
  }
  snap.nic_errors = nic_errors_;
  snap.expert_tokens = expert_tokens_total_;
  snap.expert_rows = expert_rows_total_;
  snap.link_gbps = link_gbps_;
  snap.efficiency = efficiency_;
  if (place_.rank == 0) snap.predicted = config_.predicted;
  if (monitor_) monitor_->update(snap);
  if (publisher_) publisher_->publish(snap, r.last);
}

Status StepReporter::write_log_line(const std::string& line) {
  if (!log_) return OkStatus();
  if (std::fprintf(log_.get(), "%s\n", line.c_str()) < 0 || std::fflush(log_.get()) != 0)
    return IoError(config_.log_json + ": cannot write the step log: " + std::strerror(errno) +
                   "; hint: check free disk space");
  return OkStatus();
}

void StepReporter::dashboard_event(const std::string& name, int rank, const std::string& text) {
  if (monitor_) monitor_->hub().add_event({unix_seconds(), name, rank, text});
}

void StepReporter::finish() {
  progress_.finish();
  log_.reset();
}

}  // namespace cann::train
