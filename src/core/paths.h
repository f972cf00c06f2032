// Where cann-train keeps per-user state: $CANN_TRAIN_HOME, by default ~/.cann-train.
// clusters/ holds calibrated cluster specs; jobs/ the registry of running jobs.
#pragma once

#include <cstdlib>
#include <string>

namespace cann {

inline std::string cann_home() {
  if (const char* h = std::getenv("CANN_TRAIN_HOME"); h && *h) return h;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.cann-train";
}

}  // namespace cann
