// Isolation forest (Liu, Ting & Zhou, "Isolation Forest", ICDM 2008): anomalies are few and
// different, so random axis-aligned cuts isolate them in fewer steps than normal points. Used
// over per-rank timing features to find stragglers without assuming a distribution, a scale
// per feature, or which feature will be the slow one.
//
// Fit: each of `trees` trees is grown on a sub-sample of psi = min(sample_size, n) rows drawn
// without replacement; a node picks a feature at random and a cut uniformly between that
// feature's min and max in the node, until one row is left, the rows are identical, or the
// depth reaches ceil(log2 psi). Score of a row x:
//   h(x)  = edges from the root to x's leaf + c(rows in that leaf)
//   s(x)  = 2^(-E[h(x)] / c(psi)),   c(n) = 2 H(n-1) - 2 (n-1) / n,   H(i) ~ ln(i) + 0.5772
// c(n) is the average path length of an unsuccessful search in a binary search tree of n keys,
// the expected h of a point that is not special. s near 1 is an anomaly, s well under 0.5 a
// normal point; the paper's sample psi = 256 and 100 trees are the defaults.
//
// One deviation from the paper: a node picks among the features that still vary inside it, so
// a constant column (a feature every rank reports as 0) never wastes a level.
//
// Deterministic: the same seed and data give the same trees and scores (core/rng.h).
// Thread safety: const methods may run concurrently once fit() returned.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace cann {
class Rng;
}  // namespace cann

namespace cann::monitor {

class IsolationForest {
 public:
  struct Options {
    int trees = 100;
    int sample_size = 256;
    uint64_t seed = 0x15f0;
  };

  explicit IsolationForest(Options options) : options_(options) {}
  IsolationForest() : IsolationForest(Options{}) {}

  // x is (n, d), row-major; n >= 2, d >= 1, all values finite.
  void fit(std::span<const double> x, int n, int d);

  // Anomaly score in (0, 1] of one row of d values.
  double score(std::span<const double> row) const;
  // E[h(x)] over the trees.
  double average_path_length(std::span<const double> row) const;

  int sample_size() const { return psi_; }

  // c(n) above: the expected path length of an ordinary point among n.
  static double expected_path_length(int n);

 private:
  struct Node {
    int feature = -1;  // -1 for a leaf
    double cut = 0.0;  // feature value < cut goes left
    int left = -1;     // child indices into nodes_
    int right = -1;
    int size = 0;  // rows that reached a leaf
  };

  // Grows the subtree over rows[begin, end) and returns its root's index in nodes_.
  int grow(std::vector<int>& rows, int begin, int end, int depth, int max_depth,
           std::span<const double> x, Rng& rng);

  Options options_;
  int d_ = 0;
  int psi_ = 0;
  std::vector<Node> nodes_;  // every tree's nodes, one allocation
  std::vector<int> roots_;   // index of each tree's root in nodes_
};

}  // namespace cann::monitor
