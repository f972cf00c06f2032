// What the family kernel tests share on top of kernel_check.h: a printed max-difference check,
// inputs rounded to float, and a fixture with two threads and a fixed seed.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "core/threads.h"
#include "kernel_check.h"

namespace cann::test {

inline void expect_below(double value, double tol, const std::string& what) {
  std::printf("  max diff %-46s %.2e (tolerance %.0e)\n", what.c_str(), value, tol);
  EXPECT_LT(value, tol) << what;
}

// Rounds to float and back, so the double reference and the fp32 kernel see the same inputs.
inline D float_exact(D v) {
  for (auto& x : v) x = static_cast<float>(x);
  return v;
}

class FamilyKernelTest : public ::testing::Test {
 protected:
  void SetUp() override { set_num_threads(2); }
  Rng rng_{2024};
};

}  // namespace cann::test
