// How busy this machine is, for measurements that must not be taken under load (`bench
// calibrate`): a figure measured while another build runs describes that build's leftovers,
// and a cached one misleads every later plan.
//
// Three signs, any one enough:
//  - other runnable tasks: the kernel's count of runnable threads now (/proc/loadavg, fourth
//    field, the figure the load average is an average of), less the measurement's own, above
//    the cores the measurement leaves free. The 1-minute load average itself lags a minute
//    behind (a busy loop started 5 s ago adds under 0.1), so it is reported, not judged;
//  - spread: (largest - smallest) / median of a measurement repeated, above kMaxSpread;
//  - CPU share: a measuring process's CPU time / wall time, below kMinCpuShare (another task
//    took turns on its core; a steady contender slows every repeat alike, which the spread
//    does not see).
#pragma once

#include <string>
#include <vector>

namespace cann {

// 10%: repeats of one GEMM or copy on an idle core agree within a few percent.
inline constexpr double kMaxSpread = 0.10;
// A process alone on its core gets nearly all of it; one sharing it with a busy loop, half.
inline constexpr double kMinCpuShare = 0.85;

struct LoadReading {
  double load1 = 0;  // 1-minute load average
  int runnable = 0;  // runnable threads now, the reader included
  bool ok = false;   // /proc/loadavg was read
};
// One read of /proc/loadavg.
LoadReading read_load();
// `samples` reads `interval_s` apart; the smallest runnable count, the last load average. A
// task that keeps a core busy is runnable in every read; a short-lived one (a worker of the
// measurement still exiting, a cron job) is not, and one read would count it.
LoadReading sample_load(int samples = 5, double interval_s = 0.1);

// (largest - smallest) / median; 0 for fewer than two values.
double spread(std::vector<double> values);
double median(std::vector<double> values);

struct MeasurementNoise {
  double max_spread = 0;
  std::string max_spread_of;  // which measurement, e.g. "GEMM 1024x1024x1024"
  double min_cpu_share = 1;
  LoadReading before, after;
  int own_before = 1, own_after = 1;  // of the runnable counts, the measurement's own threads
};

// Empty when the machine was quiet; else what was seen, as one phrase ("3 other runnable tasks
// before measuring on 2 cores, 1 left free; GEMM spread 23% (limit 10%)").
std::string busy_reasons(const MeasurementNoise& n, int cores, int used);

}  // namespace cann
