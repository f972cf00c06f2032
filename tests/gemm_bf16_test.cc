// --precision bf16's GEMM: the rounding to bfloat16 (nearest, ties to even), the product of the
// rounded inputs accumulated in fp32 for every transpose, stride and beta, and the linear layer
// on it against the double reference, within what bf16 inputs allow.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

#include "core/rng.h"
#include "core/threads.h"
#include "kernel_check.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/linear.h"
#include "kernels/reference/linear.h"
#include "test_util.h"

namespace cann {
namespace {

using kernels::GemmPrecision;
using test::D;
using test::Fv;
using test::max_rel_diff;
using test::randn;

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
double bf16_value(uint16_t h) {
  return from_bits(static_cast<uint32_t>(h) << 16);
}

// The nearest bf16 by distance, ties to the even one: how rounding is defined, not how the
// kernel does it.
uint16_t nearest_bf16(float x) {
  const uint16_t down = static_cast<uint16_t>(bits(x) >> 16);
  const uint16_t up = static_cast<uint16_t>(down + 1);
  const double dd = std::abs(static_cast<double>(x) - bf16_value(down));
  const double du = std::abs(static_cast<double>(x) - bf16_value(up));
  if (dd != du) return dd < du ? down : up;
  return (down & 1) == 0 ? down : up;
}

// Sets the process-wide precision for one test and puts fp32 back.
struct PrecisionScope {
  explicit PrecisionScope(GemmPrecision p) { kernels::set_gemm_precision(p); }
  ~PrecisionScope() { kernels::set_gemm_precision(GemmPrecision::kFp32); }
};

class Bf16Test : public ::testing::Test {
 protected:
  void SetUp() override {
    set_num_threads(2);
    if (!kernels::cpu_has_bf16()) GTEST_SKIP() << "this processor has no AVX-512 BF16";
  }
  Rng rng_{99};
};

TEST(Bf16RoundingTest, NearestEvenAndSpecialValues) {
  uint16_t h[8];
  const float one_half_ulp = 1.0f + std::ldexp(1.0f, -8);        // halfway: to even (1.0)
  const float three_half_ulp = 1.0f + 3 * std::ldexp(1.0f, -8);  // halfway: to even (up)
  const float x[8] = {1.0f,
                      one_half_ulp,
                      three_half_ulp,
                      -2.5f,
                      std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::quiet_NaN(),
                      std::numeric_limits<float>::max(),
                      1e-40f};
  kernels::to_bf16(h, x, 8);
  EXPECT_EQ(h[0], 0x3f80);
  EXPECT_EQ(h[1], 0x3f80);
  EXPECT_EQ(h[2], 0x3f82);
  EXPECT_EQ(h[3], 0xc020);
  EXPECT_EQ(h[4], 0x7f80);
  EXPECT_TRUE(std::isnan(bf16_value(h[5])));
  EXPECT_TRUE(std::isinf(bf16_value(h[6])));  // above the largest bf16: rounds to infinity
  EXPECT_EQ(h[7], nearest_bf16(1e-40f));

  // Long arrays take the vector path: every element as the definition says.
  Rng rng(7);
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(rng.normal() * std::pow(10.0, static_cast<int>(i % 9) - 4));
  std::vector<uint16_t> out(v.size());
  kernels::to_bf16(out.data(), v.data(), v.size());
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(out[i], nearest_bf16(v[i])) << v[i];
}

TEST_F(Bf16Test, GemmIsTheProductOfTheRoundedInputs) {
  // Extents the primitives are padded to (37 rows, 131 deep) and ones they take as they are.
  for (auto [M, N, K] : {std::tuple{37, 29, 131}, std::tuple{64, 29, 128}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 1.0f, 0.5f}) {
          // Stored shapes with padded rows: A is (M,K) or (K,M), B is (K,N) or (N,K).
          const int a_rows = ta ? K : M, a_cols = ta ? M : K, lda = a_cols + 3;
          const int b_rows = tb ? N : K, b_cols = tb ? K : N, ldb = b_cols + 5;
          const int ldc = N + 2;
          Fv A(static_cast<size_t>(a_rows) * lda), B(static_cast<size_t>(b_rows) * ldb),
              C(static_cast<size_t>(M) * ldc);
          for (float& v : A) v = static_cast<float>(rng_.normal());
          for (float& v : B) v = static_cast<float>(rng_.normal());
          for (float& v : C) v = static_cast<float>(rng_.normal());
          const Fv C0 = C;
          auto a = [&](int m, int k) {
            return bf16_value(nearest_bf16(ta ? A[k * lda + m] : A[m * lda + k]));
          };
          auto b = [&](int k, int n) {
            return bf16_value(nearest_bf16(tb ? B[n * ldb + k] : B[k * ldb + n]));
          };
          {
            PrecisionScope bf16(GemmPrecision::kBf16);
            kernels::gemm(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
          }
          double worst = 0;
          for (int m = 0; m < M; ++m)
            for (int n = 0; n < N; ++n) {
              double ref = beta * C0[m * ldc + n], scale = std::abs(ref);
              for (int k = 0; k < K; ++k) {
                ref += a(m, k) * b(k, n);
                scale += std::abs(a(m, k) * b(k, n));
              }
              // fp32 accumulation of exact products: K roundings of at most 2^-24 of the sum.
              worst = std::max(worst, std::abs(C[m * ldc + n] - ref) / (scale * K * 6e-8));
            }
          EXPECT_LE(worst, 1.0) << "M " << M << " K " << K << " ta " << ta << " tb " << tb
                                << " beta " << beta;
          // The padding between rows is left alone.
          for (int m = 0; m < M; ++m)
            for (int n = N; n < ldc; ++n) ASSERT_EQ(C[m * ldc + n], C0[m * ldc + n]);
        }
}

// An MoE expert's row count changes every step: the shapes share primitives by padded extent
// instead of compiling one per count.
TEST_F(Bf16Test, VaryingRowCountsShareAFewPrimitives) {
  const int N = 32, K = 40;
  Fv A(static_cast<size_t>(200) * K, 0.5f), B(static_cast<size_t>(N) * K, 0.25f),
      C(static_cast<size_t>(200) * N);
  PrecisionScope bf16(GemmPrecision::kBf16);
  const size_t before = kernels::bf16_primitives();
  for (int M = 1; M <= 200; ++M) {
    kernels::gemm(false, true, M, N, K, A.data(), K, B.data(), K, 0.0f, C.data(), N);
    ASSERT_EQ(C[static_cast<size_t>(M - 1) * N + N - 1], K * 0.125f) << M;
  }
  // Rows padded to 64, 128, 192 and 256; depth 40 to 64.
  EXPECT_LE(kernels::bf16_primitives() - before, 4u);
}

// Releasing the bf16 state (what bench calibrate does before it reads a worker's resident
// floor) drops every primitive, and the next bf16 GEMM makes its own again with the same result.
TEST_F(Bf16Test, ReleasedStateIsRebuiltWithTheSameResult) {
  const int M = 48, N = 40, K = 72;
  Fv A(static_cast<size_t>(M) * K), B(static_cast<size_t>(K) * N), first(M * N), again(M * N);
  for (float& v : A) v = static_cast<float>(rng_.normal());
  for (float& v : B) v = static_cast<float>(rng_.normal());
  PrecisionScope bf16(GemmPrecision::kBf16);
  kernels::gemm(false, false, M, N, K, A.data(), K, B.data(), N, 0.0f, first.data(), N);
  EXPECT_GE(kernels::bf16_primitives(), 1u);
  kernels::release_bf16_gemm_state();
  EXPECT_EQ(kernels::bf16_primitives(), 0u);
  kernels::gemm(false, false, M, N, K, A.data(), K, B.data(), N, 0.0f, again.data(), N);
  EXPECT_EQ(kernels::bf16_primitives(), 1u);
  EXPECT_EQ(first, again);
}

TEST_F(Bf16Test, GemmRoundsWhereFp32DoesNot) {
  const int M = 16, N = 16, K = 64;
  Fv A(M * K), B(K * N), c32(M * N), c16(M * N);
  for (float& v : A) v = static_cast<float>(rng_.normal());
  for (float& v : B) v = static_cast<float>(rng_.normal());
  kernels::gemm(false, false, M, N, K, A.data(), K, B.data(), N, 0.0f, c32.data(), N);
  {
    PrecisionScope bf16(GemmPrecision::kBf16);
    kernels::gemm(false, false, M, N, K, A.data(), K, B.data(), N, 0.0f, c16.data(), N);
  }
  double diff = 0;
  for (int i = 0; i < M * N; ++i) diff = std::max(diff, std::abs(double(c32[i]) - c16[i]));
  // bf16 keeps 8 significant bits: sums of 64 unit products move by about 1e-2.
  EXPECT_GT(diff, 1e-3);
  EXPECT_LT(diff, 0.5);
}

// The linear layer under bf16 against the double reference: each product carries two
// roundings of at most 2^-9 relative, so outputs are within about 1% of their scale.
TEST_F(Bf16Test, LinearTracksTheReference) {
  const int N = 64, C = 96, OC = 48;
  D x = randn(N * C, rng_), w = randn(OC * C, rng_, 0.2), b = randn(OC, rng_),
    dy = randn(N * OC, rng_);
  D y(N * OC), dx(N * C), dw(OC * C, 0.0), db(OC, 0.0);
  ref::linear_forward(y.data(), x.data(), w.data(), b.data(), N, C, OC);
  ref::linear_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, C, OC);
  Fv xf = test::to_float(x), wf = test::to_float(w), bf = test::to_float(b),
     dyf = test::to_float(dy);
  Fv yf(N * OC), dxf(N * C), dwf(OC * C, 0.0f), dbf(OC, 0.0f);
  PrecisionScope bf16(GemmPrecision::kBf16);
  kernels::linear_forward(yf.data(), xf.data(), wf.data(), bf.data(), N, C, OC);
  kernels::linear_backward(dxf.data(), dwf.data(), dbf.data(), dyf.data(), xf.data(), wf.data(), N,
                           C, OC);
  EXPECT_LT(max_rel_diff(yf, y), 1e-2);
  EXPECT_LT(max_rel_diff(dxf, dx), 1e-2);
  EXPECT_LT(max_rel_diff(dwf, dw), 1e-2);
  EXPECT_LT(max_rel_diff(dbf, db), 1e-5);  // a column sum in fp32: no bf16 input
  EXPECT_GT(max_rel_diff(yf, y), 1e-5);    // and the GEMMs did round
}

TEST(PrecisionTest, UnknownValuesAndMissingInstructionsAreOneLine) {
  auto bad = kernels::parse_gemm_precision("fp16");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "--precision: unknown precision 'fp16'; hint: use fp32 or bf16");
  EXPECT_EQ(*kernels::parse_gemm_precision("fp32"), GemmPrecision::kFp32);
  auto bf16 = kernels::parse_gemm_precision("bf16");
  if (kernels::cpu_has_bf16()) {
    EXPECT_EQ(*bf16, GemmPrecision::kBf16);
  } else {
    ASSERT_FALSE(bf16.ok());
    EXPECT_NE(bf16.status().message().find("no AVX-512 BF16"), std::string::npos);
  }
}

}  // namespace
}  // namespace cann
