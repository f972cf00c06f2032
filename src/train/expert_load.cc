// Expert load figures for the step log.
#include "train/expert_load.h"

#include <algorithm>
#include <cstdio>

namespace cann::train {

std::string expert_load_json(const std::vector<double>& load) {
  std::string out = "[";
  for (size_t e = 0; e < load.size(); ++e) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), e == 0 ? "%.0f" : ",%.0f", load[e]);
    out += buf;
  }
  return out + "]";
}

double expert_balance(const std::vector<double>& load) {
  if (load.empty()) return 1.0;
  double sum = 0, max = 0;
  for (double c : load) {
    sum += c;
    max = std::max(max, c);
  }
  return max > 0 ? sum / static_cast<double>(load.size()) / max : 1.0;
}

double expert_imbalance(const std::vector<double>& rank_rows) {
  const double b = expert_balance(rank_rows);
  return b > 0 ? 1.0 / b : 1.0;
}

}  // namespace cann::train
