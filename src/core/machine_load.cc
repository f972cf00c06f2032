// /proc/loadavg readings and the busy verdict (see machine_load.h).
#include "core/machine_load.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <tuple>

namespace cann {

LoadReading read_load() {
  LoadReading r;
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  if (!f) return r;
  double l5 = 0, l15 = 0;
  int total = 0;
  r.ok = std::fscanf(f, "%lf %lf %lf %d/%d", &r.load1, &l5, &l15, &r.runnable, &total) == 5;
  std::fclose(f);
  return r;
}

LoadReading sample_load(int samples, double interval_s) {
  LoadReading last;
  int fewest = 0;
  for (int i = 0; i < samples; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
    last = read_load();
    if (!last.ok) return last;
    fewest = i == 0 ? last.runnable : std::min(fewest, last.runnable);
  }
  last.runnable = fewest;
  return last;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double spread(std::vector<double> v) {
  if (v.size() < 2) return 0;
  const double m = median(v);
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return m > 0 ? (*hi - *lo) / m : 0;
}

std::string busy_reasons(const MeasurementNoise& n, int cores, int used) {
  const int free_cores = std::max(0, cores - used);
  std::string out;
  char buf[384];
  auto add = [&](const char* text) { out += (out.empty() ? "" : "; ") + std::string(text); };
  for (const auto& [r, own, when] : {std::tuple{n.before, n.own_before, "before measuring"},
                                     std::tuple{n.after, n.own_after, "after measuring"}}) {
    if (!r.ok) continue;
    const int others = std::max(0, r.runnable - own);
    if (others <= free_cores) continue;
    std::snprintf(buf, sizeof(buf),
                  "%d other runnable task%s %s (load average %.2f) on %d cores, %d left free",
                  others, others == 1 ? "" : "s", when, r.load1, cores, free_cores);
    add(buf);
  }
  if (n.max_spread > kMaxSpread) {
    std::snprintf(buf, sizeof(buf), "%s spread %.0f%% between repeats (limit %.0f%%)",
                  n.max_spread_of.c_str(), 100 * n.max_spread, 100 * kMaxSpread);
    // Nothing else ran here and every measuring process had its core: the processor's own
    // speed varied (other tenants of a shared host, or throttling), which waiting for local
    // work to end will not change.
    if (out.empty() && n.min_cpu_share >= kMinCpuShare)
      std::snprintf(buf + std::strlen(buf), sizeof(buf) - std::strlen(buf),
                    " with no other task running here and each measuring process on its own "
                    "core: the processor's speed itself varied (a shared or throttled host)");
    add(buf);
  }
  if (n.min_cpu_share < kMinCpuShare) {
    std::snprintf(
        buf, sizeof(buf),
        "a measuring process got %.0f%% of its core (limit %.0f%%): another task shared it",
        100 * n.min_cpu_share, 100 * kMinCpuShare);
    add(buf);
  }
  return out;
}

}  // namespace cann
