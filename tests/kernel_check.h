// What the kernel tests share: random inputs in double and their float copies, the central
// finite-difference check, and the relative difference of an fp32 result against a double
// reference.
//
// Every kernel is checked twice:
//  1. the naive reference's backward against central finite differences of its own forward,
//     all in double precision;
//  2. the optimized fp32 kernel's forward and backward against the double reference.
// Check 1 proves the math; check 2 proves the fast code computes that math.
//
// Tolerances. In double, a central difference with step h has truncation error ~h^2 f''' and
// rounding error ~1e-16 |f| / h; with h = 1e-5 both are below 1e-9, so 1e-6 relative error
// (against max(1, |g|)) leaves three orders of margin. For fp32 against double, each output is a
// sum of at most a few hundred products with unit rounding 6e-8, so 2e-4 of the output's scale
// bounds accumulated rounding with room to spare.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <vector>

#include "core/rng.h"
#include "test_util.h"

namespace cann::test {

using D = std::vector<double>;
using Fv = std::vector<float>;

constexpr double kFdTol = 1e-6;
constexpr double kFp32Tol = 2e-4;

inline D randn(size_t n, Rng& rng, double scale = 1.0) {
  D v(n);
  fill_normal(v, rng, scale);
  return v;
}
inline Fv to_float(const D& v) {
  return Fv(v.begin(), v.end());
}

// d(loss)/d(x[i]) by a central difference with step 1e-5.
inline double central_difference(D& x, size_t i, const std::function<double()>& loss) {
  const double h = 1e-5, keep = x[i];
  x[i] = keep + h;
  const double lp = loss();
  x[i] = keep - h;
  const double lm = loss();
  x[i] = keep;
  return (lp - lm) / (2 * h);
}

// Checks analytic gradient `grad` of scalar function `loss` at `x` by central differences on
// every element (or every `stride`-th). Returns the max relative error.
inline double fd_check(D& x, const D& grad, const std::function<double()>& loss,
                       size_t stride = 1) {
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); i += stride) {
    const double fd = central_difference(x, i, loss);
    worst = std::max(worst, std::abs(fd - grad[i]) / std::max(1.0, std::abs(grad[i])));
  }
  return worst;
}

// The central-difference gradient of `loss` w.r.t. every element of x, for checking an fp32
// backward directly against the double reference's function.
inline D fd_gradient(D& x, const std::function<double()>& loss) {
  D g(x.size());
  for (size_t i = 0; i < x.size(); ++i) g[i] = central_difference(x, i, loss);
  return g;
}

// Max |a - b| / scale, where scale = max(1e-3, max |b|).
inline double max_rel_diff(const Fv& a, const D& b) {
  double scale = 1e-3, worst = 0.0;
  for (double v : b) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst / scale;
}

inline double dot(const D& a, const D& b) {
  return std::inner_product(a.begin(), a.end(), b.begin(), 0.0);
}

}  // namespace cann::test
