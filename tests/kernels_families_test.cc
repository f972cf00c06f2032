// The kernels that the Llama, Qwen, Mixtral and DeepSeek families add to the engine. Each is
// checked as tests/kernel_check.h describes (the double reference's backward against finite
// differences, the fp32 kernel against the reference) at awkward sizes, and those with
// published constants (rope scaling, routing) also against small worked examples whose
// numbers were computed by hand from the published formulas (the values in the comments), not
// by running any implementation. Every check prints its max difference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <vector>

#include "family_kernel_check.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/rope_scaling.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/reference/rmsnorm.h"
#include "kernels/reference/rope.h"
#include "kernels/reference/swiglu.h"

namespace cann {
namespace {

using kernels::RopeLayout;
using kernels::RopeScaling;
using test::D;
using test::dot;
using test::expect_below;
using test::FamilyKernelTest;
using test::fd_check;
using test::float_exact;
using test::Fv;
using test::kFdTol;
using test::kFp32Tol;
using test::max_rel_diff;
using test::randn;
using test::to_float;


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

// -------------------------------------------------------------------------------- rope frequencies

kernels::RopeFrequencies frequencies(const kernels::RopeConfig& c) {
  auto f = kernels::rope_frequencies(c);
  EXPECT_TRUE(f.ok()) << f.status().message();
  return f.ok() ? *f : kernels::RopeFrequencies{};
}

struct FreqAt {
  int pair;
  double want;
};

void expect_freqs(const kernels::RopeFrequencies& f, std::initializer_list<FreqAt> points,
                  const char* what) {
  for (const FreqAt& p : points) {
    ASSERT_LT(p.pair, static_cast<int>(f.inv_freq.size()));
    // One float rounding of the exact value: 6e-8 relative; 2e-7 leaves room.
    EXPECT_NEAR(f.inv_freq[p.pair] / p.want, 1.0, 2e-7) << what << " pair " << p.pair;
  }
}

TEST(RopeFrequencies, DefaultAndLinear) {
  kernels::RopeConfig c;
  c.theta = 10000.0;
  c.rotary_dim = 8;  // theta^(-2i/8) = 10000^(-i/4) = 10^(-i)
  auto f = frequencies(c);
  expect_freqs(f, {{0, 1.0}, {1, 0.1}, {2, 0.01}, {3, 0.001}}, "default");
  EXPECT_EQ(f.attention_factor, 1.0f);
  EXPECT_EQ(f.softmax_scale_factor, 1.0f);
  c.scaling = RopeScaling::kLinear;
  c.factor = 4.0;
  f = frequencies(c);
  expect_freqs(f, {{0, 0.25}, {1, 0.025}, {2, 0.0025}, {3, 0.00025}}, "linear");
}

// Llama 3.1 (theta 500000, dim 128, factor 8, low 1, high 4, original 8192). Wavelengths
// 2 pi 500000^(i/64): pair 28 is at 1956 (< 8192/4 = 2048: kept); 29 at 2402 and 34 at 6695
// are blended with s = (8192/wavelength - 1)/3 = 0.803621 and 0.074527; 35 at 8219 (> 8192)
// and 63 are divided by 8.
TEST(RopeFrequencies, Llama3WorkedExample) {
  const auto f = frequencies({.theta = 500000.0,
                              .rotary_dim = 128,
                              .scaling = RopeScaling::kLlama3,
                              .factor = 8.0,
                              .low_freq_factor = 1.0,
                              .high_freq_factor = 4.0,
                              .original_max_position_embeddings = 8192});
  ASSERT_EQ(f.inv_freq.size(), 64u);
  // Pair 28 kept; 29, 32, 34 blended; 35 and 63 divided by 8.
  expect_freqs(f,
               {{0, 1.0},
                {28, 0.0032114459947525909},
                {29, 0.0021665707635033591},
                {32, 0.00052484616099295468},
                {34, 0.00017850781276799641},
                {35, 9.5562123539646833e-05},
                {63, 3.0689259889145111e-07}},
               "llama3");
  EXPECT_EQ(f.attention_factor, 1.0f);
}

// DeepSeek-V3: qk_rope_head_dim 64, theta 10000, yarn factor 40, mscale = mscale_all_dim = 1,
// beta 32/1, original 4096. Correction range [floor(10.47), ceil(22.51)] = [10, 23]: pairs up
// to 10 keep 10000^(-i/32), pair 16 has ramp 6/13 (f (6/13/40 + 7/13) = 0.0055 for f = 0.01),
// pairs from 23 are divided by 40. attention_factor = mscale(40,1)/mscale(40,1) = 1; softmax
// factor (0.1 ln 40 + 1)^2 = 1.8738542070926265.
TEST(RopeFrequencies, YarnDeepSeekV3WorkedExample) {
  const auto f = frequencies({.theta = 10000.0,
                              .rotary_dim = 64,
                              .scaling = RopeScaling::kYarn,
                              .factor = 40.0,
                              .original_max_position_embeddings = 4096,
                              .beta_fast = 32.0,
                              .beta_slow = 1.0,
                              .mscale = 1.0,
                              .mscale_all_dim = 1.0});
  // Pairs 0 and 10 kept; 11, 16, 22 on the ramp; 23 and 31 divided by 40.
  expect_freqs(f,
               {{0, 1.0},
                {10, 0.056234132519034911},
                {11, 0.039006926567143857},
                {16, 0.0055},
                {22, 0.00017782794100389203},
                {23, 3.3338035804082984e-05},
                {31, 3.3338035804082979e-06}},
               "yarn");
  EXPECT_FLOAT_EQ(f.attention_factor, 1.0f);
  EXPECT_NEAR(f.softmax_scale_factor, 1.8738542070926265, 1e-6);
}

TEST(RopeFrequencies, YarnAttentionFactors) {
  kernels::RopeConfig c{.theta = 1000000.0,
                        .rotary_dim = 128,
                        .scaling = RopeScaling::kYarn,
                        .factor = 4.0,
                        .original_max_position_embeddings = 32768};
  // No mscales (Qwen's long-context configs): 0.1 ln 4 + 1; softmax scale untouched.
  auto f = frequencies(c);
  EXPECT_NEAR(f.attention_factor, 1.1386294361119891, 1e-6);
  EXPECT_EQ(f.softmax_scale_factor, 1.0f);
  // mscale 1, mscale_all_dim 0.707 at factor 40: (0.1 ln 40 + 1) / (0.0707 ln 40 + 1) =
  // 1.0857263992561355; softmax factor (0.0707 ln 40 + 1)^2 = 1.5896261651208736.
  c.factor = 40.0;
  c.mscale = 1.0;
  c.mscale_all_dim = 0.707;
  f = frequencies(c);
  EXPECT_NEAR(f.attention_factor, 1.0857263992561355, 1e-6);
  EXPECT_NEAR(f.softmax_scale_factor, 1.5896261651208736, 1e-6);
  // An explicit attention_factor wins.
  c.attention_factor = 0.5;
  EXPECT_EQ(frequencies(c).attention_factor, 0.5f);
  // A factor of 1 or less has no magnitude correction.
  EXPECT_EQ(kernels::yarn_get_mscale(1.0, 1.0), 1.0);
  EXPECT_EQ(kernels::yarn_get_mscale(0.5, 1.0), 1.0);
}

TEST(RopeFrequencies, BadConfigsSayWhatToDo) {
  auto refused = [](kernels::RopeConfig c) {
    auto f = kernels::rope_frequencies(c);
    EXPECT_FALSE(f.ok());
    if (!f.ok()) {
      EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(f.status().message().find("hint:"), std::string::npos) << f.status().message();
    }
  };
  kernels::RopeConfig c;
  c.rotary_dim = 7;
  refused(c);
  c.rotary_dim = 0;
  refused(c);
  c.rotary_dim = 8;
  c.scaling = RopeScaling::kLinear;
  c.factor = 0.0;
  refused(c);
  c.factor = 8.0;
  c.scaling = RopeScaling::kLlama3;
  refused(c);  // no original_max_position_embeddings
  c.original_max_position_embeddings = 8192;
  c.low_freq_factor = c.high_freq_factor = 2.0;
  refused(c);
  c.scaling = RopeScaling::kYarn;
  c.original_max_position_embeddings = 0;
  refused(c);
}

// ----------------------------------------------------------------------------------- rope rotation

struct RopeCase {
  const char* name;
  int N, heads, head_size, row_stride, rot_offset, rotary_dim;
  RopeLayout layout;
};
void PrintTo(const RopeCase& c, std::ostream* os) {
  *os << c.name;
}
class RopeTest : public FamilyKernelTest, public ::testing::WithParamInterface<RopeCase> {};

// Yarn frequencies with attention factor 1.1386 (factor 4), so the scaling is exercised too.
kernels::RopeFrequencies test_frequencies(int rotary_dim) {
  return frequencies({.rotary_dim = rotary_dim,
                      .scaling = RopeScaling::kYarn,
                      .factor = 4.0,
                      .original_max_position_embeddings = 16});
}

TEST_P(RopeTest, MatchesReferenceAndFiniteDifferences) {
  const RopeCase p = GetParam();
  const kernels::RopeShape s{p.N, p.heads, p.head_size, p.row_stride, p.rot_offset, p.layout};
  const auto freq = test_frequencies(p.rotary_dim);
  const int max_pos = 64;
  const auto table = kernels::rope_table(freq, max_pos);
  const D inv(freq.inv_freq.begin(), freq.inv_freq.end());
  const double af = freq.attention_factor;
  std::vector<int> pos(p.N);
  for (auto& v : pos) v = static_cast<int>(rng_.below(max_pos));
  pos[0] = max_pos - 1;

  const size_t n = static_cast<size_t>(p.N) * p.row_stride;
  D x = float_exact(randn(n, rng_)), dy = float_exact(randn(n, rng_));
  auto loss = [&] {
    D y = x;
    ref::rope_rotate(y.data(), pos.data(), inv, af, s, 1);
    return dot(y, dy);
  };
  D y = x, dx = dy;
  ref::rope_rotate(y.data(), pos.data(), inv, af, s, 1);
  ref::rope_rotate(dx.data(), pos.data(), inv, af, s, -1);
  const std::string tag = std::string(p.name) + " ";
  expect_below(fd_check(x, dx, loss), kFdTol, tag + "ref dx vs finite differences");

  Fv xf = to_float(x), dxf = to_float(dy);
  kernels::rope_forward(xf.data(), pos.data(), table, s);
  kernels::rope_backward(dxf.data(), pos.data(), table, s);
  expect_below(max_rel_diff(xf, y), kFp32Tol, tag + "fp32 rotated x");
  expect_below(max_rel_diff(dxf, dx), kFp32Tol, tag + "fp32 dx");
  // Columns outside the rotary ones pass through bit for bit, in both directions.
  for (int r = 0; r < p.N; ++r)
    for (int col = 0; col < p.row_stride; ++col) {
      const int h = col / p.head_size, j = col % p.head_size;
      const bool rotated = h < p.heads && j >= p.rot_offset && j < p.rot_offset + p.rotary_dim;
      const size_t i = static_cast<size_t>(r) * p.row_stride + col;
      if (!rotated) {
        ASSERT_EQ(xf[i], static_cast<float>(x[i])) << "row " << r << " column " << col;
        ASSERT_EQ(dxf[i], static_cast<float>(dy[i])) << "row " << r << " column " << col;
      }
    }
}

// llama_fused_qkv: q and k heads (4 + 2) of a (4 + 2*2)*8-wide qkv row; v is left alone.
// partial_rotary: the first 4 of 10 columns rotate. deepseek_q: the last 4 of 6 + 4, pairs
// interleaved. deepseek_k_pe: one shared head at the end of a kv_lora_rank 5 + 4 row.
// one_row: a single token, rotary_dim 6 (an odd number of pairs).
INSTANTIATE_TEST_SUITE_P(
    Layouts, RopeTest,
    ::testing::Values(RopeCase{"llama_fused_qkv", 6, 6, 8, 64, 0, 8, RopeLayout::kHalves},
                      RopeCase{"partial_rotary", 5, 3, 10, 30, 0, 4, RopeLayout::kHalves},
                      RopeCase{"deepseek_q", 4, 3, 10, 30, 6, 4, RopeLayout::kInterleaved},
                      RopeCase{"deepseek_k_pe", 5, 1, 9, 9, 5, 4, RopeLayout::kInterleaved},
                      RopeCase{"one_row", 1, 2, 6, 12, 0, 6, RopeLayout::kHalves}));

TEST_F(FamilyKernelTest, RopeTableIsTheDirectValue) {
  const auto freq = test_frequencies(16);
  const auto t = kernels::rope_table(freq, 300);
  double worst = 0.0;
  for (int p : {0, 1, 17, 299})
    for (int i = 0; i < 8; ++i) {
      const double angle = double(p) * double(freq.inv_freq[i]);
      worst = std::max(worst, std::abs(t.cos[p * 8 + i] - freq.attention_factor * std::cos(angle)));
      worst = std::max(worst, std::abs(t.sin[p * 8 + i] - freq.attention_factor * std::sin(angle)));
    }
  expect_below(worst, 2e-7, "rope table vs direct cos/sin");
}

// Scores depend on positions only through their difference, in both layouts (attention factor
// 1 here: otherwise the scores carry its square).
TEST_F(FamilyKernelTest, RopeScoresDependOnRelativePosition) {
  const auto t = kernels::rope_table(frequencies({.rotary_dim = 8}), 64);
  for (RopeLayout layout : {RopeLayout::kHalves, RopeLayout::kInterleaved}) {
    const kernels::RopeShape s{2, 1, 8, 8, 0, layout};
    Fv qk(16);
    test::fill_normal(qk, rng_);
    auto score = [&](int pq, int pk) {
      Fv v = qk;
      const int pos[2] = {pq, pk};
      kernels::rope_forward(v.data(), pos, t, s);
      double d = 0.0;
      for (int j = 0; j < 8; ++j) d += double(v[j]) * v[8 + j];
      return d;
    };
    EXPECT_NEAR(score(5, 2), score(45, 42), 1e-5);
    EXPECT_NEAR(score(0, 9), score(20, 29), 1e-5);
  }
}

// Hugging Face's deepseek_v3 with rope_interleave de-interleaves the rotary columns
// (x[2i] -> i, x[2i+1] -> half + i) and rotates in halves; DeepSeek's code rotates the pairs
// where they are. The outputs are the same numbers in those two orders, bit for bit, so every
// q.k score agrees.
TEST_F(FamilyKernelTest, RopeInterleavedIsHuggingFacesDeinterleavedHalves) {
  const int R = 8, half = 4, N = 3;
  const auto t = kernels::rope_table(test_frequencies(R), 32);
  Fv x(N * R);
  test::fill_normal(x, rng_);
  const int pos[N] = {0, 7, 31};
  Fv deint(N * R);
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < half; ++i) {
      deint[n * R + i] = x[n * R + 2 * i];
      deint[n * R + half + i] = x[n * R + 2 * i + 1];
    }
  kernels::rope_forward(x.data(), pos, t, {N, 1, R, R, 0, RopeLayout::kInterleaved});
  kernels::rope_forward(deint.data(), pos, t, {N, 1, R, R, 0, RopeLayout::kHalves});
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < half; ++i) {
      EXPECT_EQ(x[n * R + 2 * i], deint[n * R + i]);
      EXPECT_EQ(x[n * R + 2 * i + 1], deint[n * R + half + i]);
    }
}

}  // namespace
}  // namespace cann
