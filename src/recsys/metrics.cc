// AUC by average ranks: sort once, give each run of tied scores the mean of the ranks it spans,
// and U = (sum of the positives' ranks) - P(P+1)/2. Example: scores {0.1, 0.4, 0.4, 0.8} with
// labels {0, 1, 0, 1}: ranks 1, 2.5, 2.5, 4; positives' sum 6.5; U = 6.5 - 3 = 3.5 of P*N = 4
// pairs, AUC 0.875 (the tied pair counts one half).
#include "recsys/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace cann::recsys {

double auc(const float* scores, const float* labels, int64_t n) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  int64_t positives = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(scores[i])) return kNaN;
    positives += labels[i] > 0.5f;
  }
  const int64_t negatives = n - positives;
  if (positives == 0 || negatives == 0) return kNaN;

  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), int64_t{0});
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return scores[a] < scores[b]; });
  // Ranks are 1-based; the run [begin, end) of equal scores shares rank (begin + 1 + end) / 2.
  double positive_rank_sum = 0;
  for (int64_t begin = 0; begin < n;) {
    int64_t end = begin + 1;
    while (end < n && scores[order[end]] == scores[order[begin]]) ++end;
    const double rank = 0.5 * static_cast<double>(begin + 1 + end);
    for (int64_t k = begin; k < end; ++k) {
      if (labels[order[k]] > 0.5f) positive_rank_sum += rank;
    }
    begin = end;
  }
  const double p = static_cast<double>(positives);
  const double u = positive_rank_sum - p * (p + 1) / 2;
  return u / (p * static_cast<double>(negatives));
}

double log_loss(const float* probs, const float* labels, int64_t n) {
  if (n == 0) return std::numeric_limits<double>::quiet_NaN();
  constexpr double kEps = 1e-7;
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double p = std::clamp(static_cast<double>(probs[i]), kEps, 1 - kEps);
    total -= labels[i] > 0.5f ? std::log(p) : std::log1p(-p);
  }
  return total / static_cast<double>(n);
}

void AucAccumulator::add(const float* scores, const float* labels, int n) {
  scores_.insert(scores_.end(), scores, scores + n);
  labels_.insert(labels_.end(), labels, labels + n);
}

double AucAccumulator::auc() const {
  return recsys::auc(scores_.data(), labels_.data(), count());
}

double AucAccumulator::log_loss_from_logits() const {
  if (scores_.empty()) return std::numeric_limits<double>::quiet_NaN();
  double total = 0;
  for (size_t i = 0; i < scores_.size(); ++i) {
    const double z = scores_[i];
    const double y = labels_[i] > 0.5f ? 1.0 : 0.0;
    total += std::max(z, 0.0) - z * y + std::log1p(std::exp(-std::abs(z)));
  }
  return total / static_cast<double>(scores_.size());
}

void AucAccumulator::clear() {
  scores_.clear();
  labels_.clear();
}

}  // namespace cann::recsys
