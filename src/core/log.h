// Minimal leveled logging to stderr. Progress lines and user-facing errors are printed by the
// CLI directly; this is for diagnostics ("loaded 2.1 MB of text from 63 files").
#pragma once

#include <cstdio>
#include <string>

namespace cann {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_message(LogLevel level, const std::string& message);

inline void log_info(const std::string& m) {
  log_message(LogLevel::kInfo, m);
}
inline void log_warning(const std::string& m) {
  log_message(LogLevel::kWarning, m);
}
inline void log_debug(const std::string& m) {
  log_message(LogLevel::kDebug, m);
}

}  // namespace cann
