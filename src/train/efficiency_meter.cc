// The measured efficiency figures (efficiency_meter.h).
#include "train/efficiency_meter.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/efficiency.h"
#include "core/fs.h"
#include "core/timer.h"

namespace cann::train {
namespace {

// Seconds this process has lived: its start in clock ticks after boot (/proc/self/stat, field
// 22) against the uptime. 0 when unreadable.
double process_age_s() {
  auto stat = read_file("/proc/self/stat");
  auto uptime = read_file("/proc/uptime");
  if (!stat.ok() || !uptime.ok()) return 0;
  const size_t close = stat->rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return 0;
  unsigned long long start_ticks = 0;
  // After ") " come fields 3..; starttime is field 22, the 20th of them.
  const char* p = stat->c_str() + close + 2;
  for (int field = 3; field < 22 && *p; ++field) {
    p = std::strchr(p, ' ');
    if (p == nullptr) return 0;
    ++p;
  }
  if (std::sscanf(p, "%llu", &start_ticks) != 1) return 0;
  double up = 0;
  if (std::sscanf(uptime->c_str(), "%lf", &up) != 1) return 0;
  const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
  return std::max(0.0, up - static_cast<double>(start_ticks) / hz);
}

}  // namespace

EfficiencyMeter::EfficiencyMeter(const TrainConfig& config, int devices)
    : devices_(config.devices), predicted_(config.predicted), world_(std::max(1, devices)) {
  started_ = now_seconds() - process_age_s();
}

monitor::RankSnapshot::Efficiency EfficiencyMeter::step(double step_time_s, double compute_s,
                                                        double comm_exposed_s,
                                                        double tflops_per_device) {
  monitor::RankSnapshot::Efficiency e;
  if (step_time_s <= 0) return e;
  trained_s_ += step_time_s;
  const double non_comm = step_time_s - comm_exposed_s;
  e.scaling_efficiency = non_comm > 0 ? std::clamp(compute_s / non_comm, 0.0, 1.0) : 0.0;
  e.comm_ratio = std::clamp(comm_exposed_s / step_time_s, 0.0, 1.0);
  const double wall = now_seconds() - started_;
  e.goodput = wall > 0 ? std::clamp(trained_s_ / wall, 0.0, 1.0) : 1.0;
  e.tei = training_efficiency_index(e.scaling_efficiency, e.comm_ratio, e.goodput);
  const auto mfu = predicted_.find("mfu");
  const auto step = predicted_.find("step_time_s");
  if (mfu != predicted_.end() && step != predicted_.end() && step->second > 0)
    e.mfu = mfu->second * step->second / step_time_s;
  else if (devices_.peak_tflops > 0)
    e.mfu = tflops_per_device / devices_.peak_tflops;
  scaling_.push_back(e.scaling_efficiency);
  comm_.push_back(e.comm_ratio);
  if (e.mfu >= 0) mfu_.push_back(e.mfu);
  goodput_ = e.goodput;
  if (devices_.hourly_usd > 0) e.cost_usd_per_hour = world_ * devices_.hourly_usd;
  if (devices_.watts > 0) e.energy_kwh_per_step = energy_kwh_per_step(world_, devices_.watts, step_time_s);
  return e;
}

std::map<std::string, double> EfficiencyMeter::summary() const {
  std::map<std::string, double> out;
  if (scaling_.empty()) return out;
  auto median = [](std::vector<double> v) {
    if (v.size() > 4) v.erase(v.begin(), v.begin() + 2);  // warm-up
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  out["scaling_efficiency"] = median(scaling_);
  out["comm_ratio"] = median(comm_);
  out["goodput"] = goodput_;
  out["tei"] = training_efficiency_index(out["scaling_efficiency"], out["comm_ratio"], goodput_);
  if (!mfu_.empty()) out["mfu"] = median(mfu_);
  return out;
}

}  // namespace cann::train
