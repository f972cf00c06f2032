// Evaluation metrics for click models: exact ROC AUC and log loss.
//
// AUC is the probability that a random positive scores above a random negative, ties counting
// one half (the Mann-Whitney U statistic over P*N): it depends only on the order of the scores,
// so logits and probabilities give the same value. It is computed exactly by one sort with tied
// scores given their average rank, never by binning, so two models' AUCs compare to the last
// digit. Labels are 0 or 1 (a label above 0.5 counts as a click).
#pragma once

#include <cstdint>
#include <vector>

namespace cann::recsys {

// Exact ROC AUC of `scores` against `labels` (n each). NaN when only one class is present or
// when any score is NaN (a diverged model must not report a number).
double auc(const float* scores, const float* labels, int64_t n);

// Mean binary cross-entropy of probabilities, each clamped to [1e-7, 1 - 1e-7] so one
// confident mistake costs at most -log(1e-7) ~ 16.1. NaN for n = 0.
double log_loss(const float* probs, const float* labels, int64_t n);

// Collects an evaluation set's logits and labels batch by batch, then scores them. It keeps
// every score (8 bytes per impression): evaluation sets are modest, and exact AUC needs them.
class AucAccumulator {
 public:
  // `scores` are logits.
  void add(const float* scores, const float* labels, int n);
  double auc() const;
  // Mean cross-entropy of sigmoid(logit), computed as max(z, 0) - z*y + log(1 + exp(-|z|)),
  // which neither overflows nor loses the tail for large |z|.
  double log_loss_from_logits() const;
  int64_t count() const { return static_cast<int64_t>(scores_.size()); }
  void clear();

 private:
  std::vector<float> scores_;
  std::vector<float> labels_;
};

}  // namespace cann::recsys
