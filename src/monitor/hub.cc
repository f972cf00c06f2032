// Hub bookkeeping and rendering.
#include "monitor/hub.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/json_line.h"
#include "core/timer.h"

namespace cann::monitor {
namespace {

// One sample line: name{labels} value
void sample(std::string& out, const char* name, const std::string& labels, double value) {
  char buf[64];
  // The exposition format spells non-finite values NaN, +Inf and -Inf.
  if (std::isnan(value))
    std::snprintf(buf, sizeof(buf), "NaN");
  else if (std::isinf(value))
    std::snprintf(buf, sizeof(buf), "%sInf", value > 0 ? "+" : "-");
  else
    std::snprintf(buf, sizeof(buf), "%.15g", value);
  out += name;
  if (!labels.empty()) out += "{" + labels + "}";
  out += " ";
  out += buf;
  out += "\n";
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += " ";
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += " ";
  out += type;
  out += "\n";
}

// Label values escape backslash, double quote and newline (exposition format 0.0.4).
std::string label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

Hub::Hub(std::string job, int world_size, size_t history)
    : job_(std::move(job)),
      history_limit_(history),
      started_(unix_seconds()),
      world_size_(world_size) {}

void Hub::update(const RankSnapshot& s) {
  std::function<void(const RankSnapshot&)> observer;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = latest_.find(s.rank);
    if (it != latest_.end() && it->second.step == s.step && it->second.time == s.time) return;
    latest_[s.rank] = s;
    auto& h = history_[s.rank];
    if (!h.empty() && s.step < h.back().step) h.clear();  // restarted from a checkpoint
    h.push_back(s);
    while (h.size() > history_limit_) h.pop_front();
    observer = observer_;
  }
  if (observer) observer(s);
}

void Hub::set_observer(std::function<void(const RankSnapshot&)> observer) {
  std::lock_guard<std::mutex> lock(mutex_);
  observer_ = std::move(observer);
}

void Hub::add_event(Event e) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back(std::move(e));
  while (events_.size() > 1000) events_.pop_front();
}

void Hub::set_world_size(int n) {
  std::lock_guard<std::mutex> lock(mutex_);
  world_size_ = n;
}

void Hub::count_restart() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++restarts_;
}

std::string Hub::prometheus_text() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  const std::string job = "job=\"" + label_value(job_) + "\"";
  header(out, "cann_train_up", "gauge", "1 while the job's agent serves metrics.");
  sample(out, "cann_train_up", job, 1);
  header(out, "cann_train_world_size", "gauge", "Ranks in the job.");
  sample(out, "cann_train_world_size", job, world_size_);
  header(out, "cann_train_restarts_total", "counter", "Worker restarts since the job started.");
  sample(out, "cann_train_restarts_total", job, restarts_);
  header(out, "cann_train_start_time_seconds", "gauge", "Unix time the job started.");
  sample(out, "cann_train_start_time_seconds", job, started_);

  struct Gauge {
    const char* name;
    const char* type;
    const char* help;
    double (*get)(const RankSnapshot&);
    bool (*reported)(const RankSnapshot&) = nullptr;  // null: every rank reports it
  };
  static const Gauge kGauges[] = {
      {"cann_train_step", "gauge", "Optimizer steps completed.",
       [](const RankSnapshot& s) { return static_cast<double>(s.step); }},
      {"cann_train_samples_total", "counter", "Global samples consumed.",
       [](const RankSnapshot& s) { return static_cast<double>(s.samples); }},
      {"cann_train_loss", "gauge", "Training loss of the last step.",
       [](const RankSnapshot& s) { return s.loss; }},
      {"cann_train_learning_rate", "gauge", "Learning rate of the last step.",
       [](const RankSnapshot& s) { return s.lr; }},
      {"cann_train_grad_norm", "gauge", "Global gradient norm of the last step.",
       [](const RankSnapshot& s) { return s.grad_norm; }},
      {"cann_train_step_seconds", "gauge", "Wall time of the last step.",
       [](const RankSnapshot& s) { return s.step_time_s; }},
      {"cann_train_compute_seconds", "gauge", "Forward and backward time of the last step.",
       [](const RankSnapshot& s) { return s.forward_backward_s; }},
      {"cann_train_tokens_per_second", "gauge", "Tokens per second of the last step (job-wide).",
       [](const RankSnapshot& s) { return s.tokens_per_s; }},
      {"cann_train_flops_per_second_per_device", "gauge",
       "Achieved model FLOP/s per device (PaLM convention).",
       [](const RankSnapshot& s) { return s.tflops_per_device * 1e12; }},
      {"cann_train_comm_seconds", "gauge", "Gradient communication time of the last step.",
       [](const RankSnapshot& s) { return s.comm_time_s; }},
      {"cann_train_comm_exposed_seconds", "gauge",
       "Communication the last step waited for (not hidden behind compute).",
       [](const RankSnapshot& s) { return s.comm_exposed_s; }},
      {"cann_train_comm_exposed_ratio", "gauge", "Exposed communication over step time.",
       [](const RankSnapshot& s) {
         return s.step_time_s > 0 ? s.comm_exposed_s / s.step_time_s : 0;
       }},
      {"cann_train_comm_sent_bytes_total", "counter", "Payload bytes sent for gradients.",
       [](const RankSnapshot& s) { return static_cast<double>(s.comm_bytes_total); }},
      {"cann_train_memory_bytes", "gauge",
       "Training memory per rank (parameters, gradients, "
       "optimizer state, activations).",
       [](const RankSnapshot& s) { return static_cast<double>(s.memory_bytes); }},
      {"cann_train_last_step_timestamp_seconds", "gauge", "Unix time the last step finished.",
       [](const RankSnapshot& s) { return s.time; }},
  };
  // Measured only where the rank reports them (older workers, other launchers may not).
  static const Gauge kMeasured[] = {
      {"cann_train_compute_utilization", "gauge",
       "Fraction of the last step the compute threads ran kernels (their CPU time over threads "
       "x step time).",
       [](const RankSnapshot& s) { return s.compute_utilization; },
       [](const RankSnapshot& s) { return s.compute_utilization >= 0; }},
      {"cann_train_resident_memory_bytes", "gauge", "Resident set (VmRSS) of the rank's process.",
       [](const RankSnapshot& s) { return static_cast<double>(s.resident_bytes); },
       [](const RankSnapshot& s) { return s.resident_bytes > 0; }},
      {"cann_train_memory_fragmentation_bytes", "gauge",
       "Resident set minus the live bytes the engine accounts (cann_train_memory_bytes): "
       "allocator slack, freed pages not returned, libraries and buffers outside the engine.",
       [](const RankSnapshot& s) { return static_cast<double>(s.resident_bytes - s.memory_bytes); },
       [](const RankSnapshot& s) { return s.resident_bytes > 0; }},
  };
  const auto rank_labels = [&](int rank, const RankSnapshot& s) {
    return job + ",rank=\"" + std::to_string(rank) + "\",host=\"" + label_value(s.host) + "\"";
  };
  for (const Gauge& g : kGauges) {
    header(out, g.name, g.type, g.help);
    for (const auto& [rank, s] : latest_) sample(out, g.name, rank_labels(rank, s), g.get(s));
  }
  for (const Gauge& g : kMeasured) {
    bool any = false;
    for (const auto& [rank, s] : latest_) {
      if (!g.reported(s)) continue;
      if (!any) header(out, g.name, g.type, g.help);
      any = true;
      sample(out, g.name, rank_labels(rank, s), g.get(s));
    }
  }
  // NIC counters belong to a host: once per host, from its lowest rank that reports them.
  std::map<std::string, const RankSnapshot*> per_host;
  for (const auto& [rank, s] : latest_)
    if (!s.nic_errors.empty()) per_host.emplace(s.host, &s);
  if (!per_host.empty())
    header(out, "cann_train_nic_errors_total", "counter",
           "NIC error counters of the host (/sys/class/net statistics, InfiniBand port counters).");
  for (const auto& [host, s] : per_host)
    for (const NicCounter& c : s->nic_errors)
      sample(out, "cann_train_nic_errors_total",
             job + ",host=\"" + label_value(host) + "\",device=\"" + label_value(c.device) +
                 "\",counter=\"" + label_value(c.counter) + "\"",
             static_cast<double>(c.value));
  // Efficiency, measured per rank where known, and the plan's predictions (rank 0's).
  using Eff = RankSnapshot::Efficiency;
  static const struct {
    const char* name;
    const char* help;
    double Eff::*field;
  } kEfficiency[] = {
      {"cann_train_tei", "Training efficiency index: scaling x (1 - comm) x goodput.",
       &Eff::tei},
      {"cann_train_scaling_efficiency",
       "Model compute over the step time less exposed communication.", &Eff::scaling_efficiency},
      {"cann_train_comm_ratio", "Exposed communication over the step time.",
       &Eff::comm_ratio},
      {"cann_train_goodput", "Kept training time over this process's wall time.",
       &Eff::goodput},
      {"cann_train_mfu", "Model FLOPs utilization of the last step.", &Eff::mfu},
      {"cann_train_cost_usd_per_hour", "The job's devices' cost per hour.",
       &Eff::cost_usd_per_hour},
      {"cann_train_energy_kwh_per_step",
       "Energy of the last step over the job's devices (their rated power).",
       &Eff::energy_kwh_per_step},
  };
  for (const auto& f : kEfficiency) {
    bool any = false;
    for (const auto& [rank, s] : latest_) any |= s.efficiency.*f.field >= 0;
    if (!any) continue;
    header(out, f.name, "gauge", f.help);
    for (const auto& [rank, s] : latest_)
      if (s.efficiency.*f.field >= 0)
        sample(out, f.name, rank_labels(rank, s), s.efficiency.*f.field);
  }
  if (const auto r0 = latest_.find(0); r0 != latest_.end() && !r0->second.predicted.empty()) {
    header(out, "cann_train_predicted", "gauge",
           "The plan's prediction of a figure (run --plan), beside the measured gauge of its "
           "name.");
    for (const auto& [k, v] : r0->second.predicted)
      sample(out, "cann_train_predicted", job + ",figure=\"" + label_value(k) + "\"", v);
  }
  bool experts = false;
  for (const auto& [rank, s] : latest_) experts |= !s.expert_tokens.empty();
  if (experts) {
    header(out, "cann_train_expert_tokens_total", "counter",
           "Tokens routed to each expert (summed over MoE layers) in the last step.");
    for (const auto& [rank, s] : latest_)
      for (size_t e = 0; e < s.expert_tokens.size(); ++e)
        sample(out, "cann_train_expert_tokens_total",
               job + ",rank=\"" + std::to_string(rank) + "\",expert=\"" + std::to_string(e) + "\"",
               static_cast<double>(s.expert_tokens[e]));
  }
  bool rows = false;
  for (const auto& [rank, s] : latest_) rows |= s.expert_rows >= 0;
  if (rows) {
    header(out, "cann_train_expert_rows_total", "counter",
           "Routed rows this rank's experts computed (expert parallelism, summed over MoE "
           "layers): the busiest rank sets the pace of the all-to-alls.");
    for (const auto& [rank, s] : latest_)
      if (s.expert_rows >= 0)
        sample(out, "cann_train_expert_rows_total", job + ",rank=\"" + std::to_string(rank) + "\"",
               static_cast<double>(s.expert_rows));
  }
  header(out, "cann_train_events_total", "counter", "Events (failures, alerts, scaling) seen.");
  std::map<std::string, int> kinds;
  for (const Event& e : events_) kinds[e.kind]++;
  for (const auto& [kind, n] : kinds)
    sample(out, "cann_train_events_total", job + ",kind=\"" + label_value(kind) + "\"", n);
  return out;
}

std::string Hub::status_json() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string ranks = "[";
  for (const auto& [rank, s] : latest_) {
    if (ranks.size() > 1) ranks += ",";
    ranks += s.to_json();
  }
  ranks += "]";
  JsonLine j;
  j.add("job", job_)
      .add("world_size", world_size_)
      .add("started", started_)
      .add("now", unix_seconds())
      .add("restarts", restarts_)
      .add_raw("ranks", ranks);
  return j.str();
}

std::string Hub::series_json(int rank, int64_t since) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto points = [&](const std::deque<RankSnapshot>& h) {
    std::string p = "[";
    for (const RankSnapshot& s : h) {
      if (s.step <= since) continue;
      JsonLine j;
      j.add("step", s.step)
          .add("time", s.time)
          .add("loss", s.loss)
          .add("val_loss", s.val_loss)
          .add("grad_norm", s.grad_norm)
          .add("lr", s.lr)
          .add("step_time_s", s.step_time_s)
          .add("forward_backward_s", s.forward_backward_s)
          .add("tokens_per_s", s.tokens_per_s)
          .add("comm_time_s", s.comm_time_s)
          .add("comm_exposed_s", s.comm_exposed_s)
          .add("memory_bytes", s.memory_bytes)
          .add("expert_tokens", s.expert_tokens)
          .add("tei", s.efficiency.tei)
          .add("mfu", s.efficiency.mfu);
      if (p.size() > 1) p += ",";
      p += j.str();
    }
    return p + "]";
  };
  std::string out = "{\"ranks\":[";
  bool first = true;
  for (const auto& [r, h] : history_) {
    if (rank >= 0 && r != rank) continue;
    if (!first) out += ",";
    out += "{\"rank\":" + std::to_string(r) + ",\"points\":" + points(h) + "}";
    first = false;
  }
  return out + "]}";
}

std::string Hub::events_json(size_t last) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out = "[";
  const size_t start = events_.size() > last ? events_.size() - last : 0;
  for (size_t i = start; i < events_.size(); ++i) {
    const Event& e = events_[i];
    JsonLine j;
    j.add("time", e.time).add("event", e.kind).add("rank", e.rank).add("detail", e.detail);
    if (i > start) out += ",";
    out += j.str();
  }
  return out + "]";
}

std::vector<RankSnapshot> Hub::latest() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<RankSnapshot> out;
  for (const auto& [r, s] : latest_) out.push_back(s);
  return out;
}

std::vector<RankSnapshot> Hub::history(int rank) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = history_.find(rank);
  if (it == history_.end()) return {};
  return {it->second.begin(), it->second.end()};
}

}  // namespace cann::monitor
