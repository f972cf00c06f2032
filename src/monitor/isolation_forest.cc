// Isolation forest fit and scoring; the algorithm and its one deviation are in
// isolation_forest.h. Trees live in one flat node array; growing is recursive with depth at
// most ceil(log2 psi) = 8 for psi = 256.
#include "monitor/isolation_forest.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"
#include "core/rng.h"

namespace cann::monitor {
namespace {

// Uniform in (0, 1) with 53 bits: the cut falls strictly between a node's min and max, up to
// rounding (handled where the cut is used).
double open_uniform(Rng& rng) {
  return (static_cast<double>(rng.next_u64() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

}  // namespace

double IsolationForest::expected_path_length(int n) {
  if (n <= 1) return 0.0;
  // H(n-1) exactly for small n, where ln(i) + 0.5772 is poor (at n = 2 it gives c = 0.15 for
  // the true 1), and the asymptotic series beyond, accurate to 1e-8 there.
  const int i = n - 1;
  double harmonic = 0.0;
  if (i < 50) {
    for (int k = 1; k <= i; ++k) harmonic += 1.0 / k;
  } else {
    const double di = i;
    harmonic = std::log(di) + 0.5772156649015329 + 1.0 / (2.0 * di) - 1.0 / (12.0 * di * di);
  }
  return 2.0 * harmonic - 2.0 * static_cast<double>(n - 1) / n;
}

void IsolationForest::fit(std::span<const double> x, int n, int d) {
  CANN_CHECK(n >= 2 && d >= 1) << "n " << n << " d " << d;
  CANN_CHECK(x.size() == static_cast<size_t>(n) * static_cast<size_t>(d))
      << x.size() << " values for " << n << " x " << d;
  CANN_CHECK(options_.trees >= 1 && options_.sample_size >= 2)
      << "trees " << options_.trees << " sample_size " << options_.sample_size;
  d_ = d;
  psi_ = std::min(options_.sample_size, n);
  nodes_.clear();
  roots_.clear();
  const int max_depth = static_cast<int>(std::ceil(std::log2(static_cast<double>(psi_))));

  Rng rng(options_.seed);
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::vector<int> sample(psi_);
  for (int t = 0; t < options_.trees; ++t) {
    // Partial Fisher-Yates: the first psi entries become a uniform sample without replacement
    // (from any starting order, so `order` need not be reset between trees).
    for (int i = 0; i < psi_; ++i) {
      const int j = i + static_cast<int>(rng.below(static_cast<uint64_t>(n - i)));
      std::swap(order[i], order[j]);
    }
    std::copy(order.begin(), order.begin() + psi_, sample.begin());
    roots_.push_back(grow(sample, 0, psi_, 0, max_depth, x, rng));
  }
}

int IsolationForest::grow(std::vector<int>& rows, int begin, int end, int depth, int max_depth,
                          std::span<const double> x, Rng& rng) {
  const int index = static_cast<int>(nodes_.size());
  nodes_.push_back(Node{});
  nodes_[index].size = end - begin;
  if (end - begin <= 1 || depth >= max_depth) return index;

  struct Range {
    int feature;
    double lo, hi;
  };
  std::vector<Range> varying;
  for (int f = 0; f < d_; ++f) {
    double lo = x[static_cast<size_t>(rows[begin]) * d_ + f];
    double hi = lo;
    for (int r = begin + 1; r < end; ++r) {
      const double v = x[static_cast<size_t>(rows[r]) * d_ + f];
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    if (hi > lo) varying.push_back({f, lo, hi});
  }
  if (varying.empty()) return index;  // identical rows: nothing can separate them

  const Range& range = varying[rng.below(varying.size())];
  const double cut = range.lo + open_uniform(rng) * (range.hi - range.lo);
  const int f = range.feature;
  const auto mid_it = std::partition(rows.begin() + begin, rows.begin() + end, [&](int r) {
    return x[static_cast<size_t>(r) * d_ + f] < cut;
  });
  const int mid = static_cast<int>(mid_it - rows.begin());
  // A cut rounded onto the min or max separates nothing; the node stays a leaf.
  if (mid == begin || mid == end) return index;

  const int left = grow(rows, begin, mid, depth + 1, max_depth, x, rng);
  const int right = grow(rows, mid, end, depth + 1, max_depth, x, rng);
  Node& node = nodes_[index];  // taken after the recursion: nodes_ may have reallocated
  node.feature = f;
  node.cut = cut;
  node.left = left;
  node.right = right;
  return index;
}

double IsolationForest::average_path_length(std::span<const double> row) const {
  CANN_CHECK(!roots_.empty()) << "score before fit";
  CANN_CHECK(row.size() == static_cast<size_t>(d_)) << row.size() << " values, want " << d_;
  double total = 0.0;
  for (int root : roots_) {
    int i = root;
    int depth = 0;
    while (nodes_[i].feature >= 0) {
      const Node& node = nodes_[i];
      i = row[node.feature] < node.cut ? node.left : node.right;
      ++depth;
    }
    total += depth + expected_path_length(nodes_[i].size);
  }
  return total / static_cast<double>(roots_.size());
}

double IsolationForest::score(std::span<const double> row) const {
  return std::exp2(-average_path_length(row) / expected_path_length(psi_));
}

}  // namespace cann::monitor
