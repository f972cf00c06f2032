// Balanced contiguous partition (see partition.h).
#include "plan/partition.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "core/check.h"

namespace cann::plan {

double bottleneck(const std::vector<double>& costs, const std::vector<int>& bounds) {
  double worst = 0;
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    double sum = 0;
    for (int l = bounds[i]; l < bounds[i + 1]; ++l) sum += costs[l];
    worst = std::max(worst, sum);
  }
  return worst;
}

std::vector<int> partition_dp(const std::vector<double>& costs, int parts) {
  const int n = static_cast<int>(costs.size());
  CANN_CHECK(parts >= 1 && parts <= n) << "partition of " << n << " layers into " << parts;
  std::vector<double> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  const double inf = std::numeric_limits<double>::infinity();
  // best[j][i]: smallest bottleneck of the first i layers in j parts; cut[j][i] where part j
  // starts.
  std::vector<std::vector<double>> best(parts + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> cut(parts + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int j = 1; j <= parts; ++j) {
    // Part j needs j layers before its end and leaves parts-j layers after it.
    for (int i = j; i <= n - (parts - j); ++i) {
      for (int k = j - 1; k < i; ++k) {
        if (best[j - 1][k] == inf) continue;
        const double v = std::max(best[j - 1][k], prefix[i] - prefix[k]);
        // Ties go to the later cut, which keeps earlier stages (that hold more in-flight
        // micro-batches under 1F1B) lighter.
        if (v <= best[j][i]) {
          best[j][i] = v;
          cut[j][i] = k;
        }
      }
    }
  }
  std::vector<int> bounds(parts + 1);
  bounds[parts] = n;
  for (int j = parts, i = n; j >= 1; --j) {
    bounds[j - 1] = cut[j][i];
    i = cut[j][i];
  }
  return bounds;
}

namespace {

// Greedy: pack layers left to right under `cap`, leaving at least one layer for each later
// part. Returns the boundaries, or an empty vector when `parts` parts cannot hold the layers.
std::vector<int> greedy(const std::vector<double>& costs, int parts, double cap) {
  const int n = static_cast<int>(costs.size());
  std::vector<int> bounds{0};
  int i = 0;
  for (int j = 0; j < parts; ++j) {
    const int must_leave = parts - j - 1;
    double sum = 0;
    int start = i;
    while (i < n - must_leave && (i == start || sum + costs[i] <= cap)) sum += costs[i++];
    if (sum > cap) return {};
    bounds.push_back(i);
  }
  if (i != n) return {};
  return bounds;
}

}  // namespace

std::vector<int> partition_bisect(const std::vector<double>& costs, int parts) {
  const int n = static_cast<int>(costs.size());
  CANN_CHECK(parts >= 1 && parts <= n) << "partition of " << n << " layers into " << parts;
  const double total = std::accumulate(costs.begin(), costs.end(), 0.0);
  const double biggest = *std::max_element(costs.begin(), costs.end());
  // The optimum lies in [max(total/parts, biggest), total/parts + biggest]: greedy packing at
  // that upper cap never needs more than `parts` parts.
  double lo = std::max(total / parts, biggest), hi = total / parts + biggest;
  std::vector<int> best = greedy(costs, parts, hi);
  if (best.empty()) return partition_dp(costs, parts);  // unreachable in exact arithmetic
  if (!greedy(costs, parts, lo).empty()) return greedy(costs, parts, lo);
  while (hi - lo > 1e-9 * hi) {
    const double mid = 0.5 * (lo + hi);
    std::vector<int> b = greedy(costs, parts, mid);
    if (b.empty()) {
      lo = mid;
    } else {
      hi = mid;
      best = std::move(b);
    }
  }
  return best;
}

}  // namespace cann::plan
