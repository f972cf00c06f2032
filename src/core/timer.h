// Monotonic wall-clock helpers for step timing.
#pragma once

#include <chrono>
#include <cstdint>
#include <ctime>
#include <string>

namespace cann {

inline double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// Unix time in seconds (for event timestamps that must line up across machines).
inline double unix_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// "2026-12-04T19:30:00Z": a Unix time in UTC, ISO 8601, for files people keep.
inline std::string utc_timestamp(int64_t unix_time) {
  const std::time_t t = static_cast<std::time_t>(unix_time);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char out[32];
  std::strftime(out, sizeof(out), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return out;
}

class Stopwatch {
 public:
  Stopwatch() : start_(now_seconds()) {}
  double elapsed() const { return now_seconds() - start_; }
  void reset() { start_ = now_seconds(); }

 private:
  double start_;
};

}  // namespace cann
