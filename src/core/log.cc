// Logging: one mutex so lines from different threads never interleave.
#include "core/log.h"

#include <atomic>
#include <mutex>

namespace cann {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_log_mutex;
}  // namespace

void set_log_level(LogLevel level) {
  g_level = static_cast<int>(level);
}
LogLevel log_level() {
  return static_cast<LogLevel>(g_level.load());
}

void log_message(LogLevel level, const std::string& message) {
  if (static_cast<int>(level) < g_level.load()) return;
  static const char* kPrefix[] = {"debug: ", "", "warning: ", "error: "};
  std::lock_guard<std::mutex> lock(g_log_mutex);
  std::fprintf(stderr, "%s%s\n", kPrefix[static_cast<int>(level)], message.c_str());
  std::fflush(stderr);
}

}  // namespace cann
