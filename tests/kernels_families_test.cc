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

#include "core/threads.h"
#include "kernel_check.h"
#include "kernels/cpu/moe_balance.h"
#include "kernels/cpu/moe_routing.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/rope_scaling.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/reference/moe_routing.h"
#include "kernels/reference/rmsnorm.h"
#include "kernels/reference/rope.h"
#include "kernels/reference/swiglu.h"

namespace cann {
namespace {

using kernels::GroupRanking;
using kernels::RopeLayout;
using kernels::RopeScaling;
using kernels::RouterConfig;
using kernels::RouterScore;
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

// ------------------------------------------------------------------------------------- MoE routing

struct RouteCase {
  const char* name;
  RouterConfig c;
  bool bias;
  int B, T;
};
void PrintTo(const RouteCase& c, std::ostream* os) {
  *os << c.name;
}
class RouterTest : public FamilyKernelTest, public ::testing::WithParamInterface<RouteCase> {};

TEST_P(RouterTest, ChoiceWeightsAndGradients) {
  const RouteCase p = GetParam();
  const RouterConfig& c = p.c;
  ASSERT_TRUE(kernels::check_router_config(c).ok()) << kernels::check_router_config(c).message();
  const int N = p.B * p.T, E = c.E, K = c.K;
  D logits = float_exact(randn(N * E, rng_, 1.5));
  D bias = float_exact(randn(E, rng_, p.bias ? 0.3 : 0.0));
  const double* bias_d = p.bias ? bias.data() : nullptr;
  Fv lf = to_float(logits), bf = to_float(bias), sf(N * E), wf(N * K);
  std::vector<int> idx(N * K), ref_idx(N * K);
  kernels::moe_route_forward(sf.data(), idx.data(), wf.data(), lf.data(),
                             p.bias ? bf.data() : nullptr, c, N);
  ref::moe_route_choose(ref_idx.data(), logits.data(), bias_d, c, N);
  EXPECT_EQ(idx, ref_idx) << "the choice differs from the reference's full sort";

  D s(N * E), w(N * K);
  ref::moe_route_weights(s.data(), w.data(), logits.data(), idx.data(), c, N);
  const std::string tag = std::string(p.name) + " ";
  expect_below(max_rel_diff(sf, s), kFp32Tol, tag + "fp32 scores");
  expect_below(max_rel_diff(wf, w), kFp32Tol, tag + "fp32 combine weights");

  // Balance losses: values, and their gradients w.r.t. the scores against finite differences.
  const double seq = ref::moe_seq_balance_loss(s.data(), idx.data(), p.B, p.T, E, K);
  const double sw = ref::moe_switch_balance_loss(s.data(), idx.data(), N, E, K);
  EXPECT_NEAR(kernels::moe_seq_balance_loss(sf.data(), idx.data(), p.B, p.T, E, K) / seq, 1.0,
              1e-5);
  EXPECT_NEAR(kernels::moe_switch_balance_loss(sf.data(), idx.data(), N, E, K) / sw, 1.0, 1e-5);
  const double c_seq = 0.7, c_sw = 0.4;
  Fv dseq(N * E), dsw(N * E);
  kernels::moe_seq_balance_loss_backward(dseq.data(), sf.data(), idx.data(), p.B, p.T, E, K,
                                         static_cast<float>(c_seq));
  kernels::moe_switch_balance_loss_backward(dsw.data(), idx.data(), N, E, K,
                                            static_cast<float>(c_sw));
  D s_var = s;
  auto seq_loss = [&] {
    return c_seq * ref::moe_seq_balance_loss(s_var.data(), idx.data(), p.B, p.T, E, K);
  };
  auto switch_loss = [&] {
    return c_sw * ref::moe_switch_balance_loss(s_var.data(), idx.data(), N, E, K);
  };
  expect_below(max_rel_diff(dseq, fd_gradient(s_var, seq_loss)), kFp32Tol,
               tag + "seq balance dscores vs fd");
  expect_below(max_rel_diff(dsw, fd_gradient(s_var, switch_loss)), kFp32Tol,
               tag + "switch balance dprobs vs fd");

  // Router backward: loss = sum dweight * weight + both balance terms, for the fixed choice,
  // against finite differences of the double reference in the logits.
  D dweight = float_exact(randn(N * K, rng_));
  auto loss = [&] {
    D sc(N * E), wt(N * K);
    ref::moe_route_weights(sc.data(), wt.data(), logits.data(), idx.data(), c, N);
    return dot(wt, dweight) +
           c_seq * ref::moe_seq_balance_loss(sc.data(), idx.data(), p.B, p.T, E, K) +
           c_sw * ref::moe_switch_balance_loss(sc.data(), idx.data(), N, E, K);
  };
  Fv dscores(N * E), dlf(N * E, 9.0f), dwf = to_float(dweight);
  for (int i = 0; i < N * E; ++i) dscores[i] = dseq[i] + dsw[i];
  kernels::moe_route_backward(dlf.data(), dwf.data(), dscores.data(), sf.data(), idx.data(), c, N);
  expect_below(max_rel_diff(dlf, fd_gradient(logits, loss)), kFp32Tol, tag + "fp32 dlogits vs fd");
}

RouterConfig router(int E, int K, RouterScore score, bool norm, float scale, int n_group = 1,
                    int topk_group = 1, GroupRanking ranking = GroupRanking::kMaxScore) {
  return RouterConfig{E, K, score, norm, scale, n_group, topk_group, ranking};
}

// mixtral: softmax, top 2, renormalized. qwen2_moe: norm_topk_prob false. qwen3_moe: true.
// deepseek_v2: group_limited_greedy (groups by their best score), routed_scaling_factor 16
// with no normalization. deepseek_v3: sigmoid, selection bias, groups by their top-2 sum,
// normalized, scale 2.5. k_equals_e: every expert chosen. groups_of_one: six one-expert groups
// (the top-2 sum of a group is its one score). one_token: N = 1.
INSTANTIATE_TEST_SUITE_P(
    Families, RouterTest,
    ::testing::Values(
        RouteCase{"mixtral", router(8, 2, RouterScore::kSoftmax, true, 1.0f), false, 2, 9},
        RouteCase{"qwen2_moe", router(10, 3, RouterScore::kSoftmax, false, 1.0f), false, 1, 13},
        RouteCase{"qwen3_moe", router(16, 4, RouterScore::kSoftmax, true, 1.0f), false, 3, 5},
        RouteCase{"deepseek_v2", router(12, 3, RouterScore::kSoftmax, false, 16.0f, 4, 2), false, 2,
                  7},
        RouteCase{"deepseek_v3",
                  router(16, 4, RouterScore::kSigmoid, true, 2.5f, 4, 2, GroupRanking::kTopTwoSum),
                  true, 2, 8},
        RouteCase{"k_equals_e", router(5, 5, RouterScore::kSoftmax, true, 1.0f), false, 1, 6},
        RouteCase{"groups_of_one",
                  router(6, 2, RouterScore::kSigmoid, true, 1.0f, 6, 3, GroupRanking::kTopTwoSum),
                  true, 2, 4},
        RouteCase{"one_token",
                  router(8, 2, RouterScore::kSigmoid, true, 2.5f, 2, 1, GroupRanking::kTopTwoSum),
                  true, 1, 1}));

// Eight experts in four groups of two, sigmoid scores s = (.9 .1 | .6 .5 | .2 .8 | .3 .4) from
// logits ln(s/(1-s)), bias +0.5 on expert 4 only, two groups kept, two experts chosen.
// Biased c = (.9 .1 | .6 .5 | .7 .8 | .3 .4).
//  - DeepSeek-V3 (top-2 sums 1.0, 1.1, 1.5, 0.7): groups 2 and 1 are kept; the best of
//    {.6 .5 .7 .8} are experts 5 and 4, though expert 0 has the highest score of all. Weights
//    use s, not c: .8 and .2, normalized (sum 1) and times 2.5 = 2.0 and 0.5.
//  - DeepSeek-V2's ranking by the best member (.9, .6, .8, .4) keeps groups 0 and 2 and
//    chooses experts 0 (.9) and 5 (.8): weights .9 and .8, unnormalized, times 2.5.
TEST(MoeRouting, DeepSeekWorkedExample) {
  const float s[8] = {0.9f, 0.1f, 0.6f, 0.5f, 0.2f, 0.8f, 0.3f, 0.4f};
  Fv logits(8), bias(8, 0.0f), scores(8), w(2);
  for (int e = 0; e < 8; ++e) logits[e] = std::log(s[e] / (1.0f - s[e]));
  bias[4] = 0.5f;
  std::vector<int> idx(2);
  auto v3 = router(8, 2, RouterScore::kSigmoid, true, 2.5f, 4, 2, GroupRanking::kTopTwoSum);
  kernels::moe_route_forward(scores.data(), idx.data(), w.data(), logits.data(), bias.data(), v3,
                             1);
  EXPECT_EQ(idx, (std::vector<int>{5, 4}));
  EXPECT_NEAR(w[0], 2.0, 1e-5);
  EXPECT_NEAR(w[1], 0.5, 1e-5);
  auto v2 = router(8, 2, RouterScore::kSigmoid, false, 2.5f, 4, 2, GroupRanking::kMaxScore);
  kernels::moe_route_forward(scores.data(), idx.data(), w.data(), logits.data(), bias.data(), v2,
                             1);
  EXPECT_EQ(idx, (std::vector<int>{0, 5}));
  EXPECT_NEAR(w[0], 0.9 * 2.5, 1e-5);
  EXPECT_NEAR(w[1], 0.8 * 2.5, 1e-5);
}

// Ties go to the lower index, for experts and for groups.
TEST(MoeRouting, TiesGoToTheLowerIndex) {
  Fv logits(6, 0.3f), scores(6), w(3);
  std::vector<int> idx(3);
  kernels::moe_route_forward(scores.data(), idx.data(), w.data(), logits.data(), nullptr,
                             router(6, 3, RouterScore::kSoftmax, true, 1.0f), 1);
  EXPECT_EQ(idx, (std::vector<int>{0, 1, 2}));
  for (float v : w) EXPECT_FLOAT_EQ(v, 1.0f / 3.0f);
  // Sigmoid saturates to exactly 1.0f for logits 30 and 40: a tie in float, lower index first.
  logits = {-1.0f, 40.0f, 0.0f, 30.0f, 2.0f, 1.0f};
  idx.resize(2);
  w.resize(2);
  kernels::moe_route_forward(scores.data(), idx.data(), w.data(), logits.data(), nullptr,
                             router(6, 2, RouterScore::kSigmoid, false, 1.0f), 1);
  EXPECT_EQ(idx, (std::vector<int>{1, 3}));
  // Groups (0,1) and (2,3) tie on their best score; group 0 is kept.
  logits = {2.0f, -1.0f, -1.0f, 2.0f, 0.0f, 0.0f};
  kernels::moe_route_forward(scores.data(), idx.data(), w.data(), logits.data(), nullptr,
                             router(6, 2, RouterScore::kSoftmax, false, 1.0f, 3, 1), 1);
  EXPECT_EQ(idx, (std::vector<int>{0, 1}));
}

TEST(MoeRouting, BadConfigsSayWhatToDo) {
  for (const RouterConfig& c : {router(4, 5, RouterScore::kSoftmax, true, 1.0f),
                                router(6, 2, RouterScore::kSoftmax, true, 1.0f, 4, 1),
                                router(8, 2, RouterScore::kSoftmax, true, 1.0f, 4, 5),
                                router(8, 3, RouterScore::kSoftmax, true, 1.0f, 8, 2)}) {
    const Status st = kernels::check_router_config(c);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("hint:"), std::string::npos) << st.message();
  }
}

// Auxiliary-loss-free balancing: loads (10, 2, 6, 6) have mean 6, so the overloaded expert 0
// loses u, the underloaded expert 1 gains u, and the two at the mean keep their bias.
TEST(MoeRouting, ExpertBiasUpdate) {
  const int idx[6 * 1] = {0, 0, 1, 2, 0, 3};
  Fv load(4, 0.0f);
  kernels::moe_count_expert_load(load.data(), idx, 6, 1);
  EXPECT_EQ(load, (Fv{3.0f, 1.0f, 1.0f, 1.0f}));
  load = {10.0f, 2.0f, 6.0f, 6.0f};
  Fv bias = {0.1f, 0.1f, 0.1f, -0.2f};
  kernels::moe_update_expert_bias(bias.data(), load.data(), 4, 0.001f);
  EXPECT_FLOAT_EQ(bias[0], 0.099f);
  EXPECT_FLOAT_EQ(bias[1], 0.101f);
  EXPECT_FLOAT_EQ(bias[2], 0.1f);
  EXPECT_FLOAT_EQ(bias[3], -0.2f);
}

// Perfectly even routing: 4 experts, 4 tokens per sequence, each token choosing one distinct
// expert with uniform scores. DeepSeek's sequence loss is sum_e f_e P_e = 4 * (1 * 1/4) = 1;
// Hugging Face's Switch loss is E * sum_e (c_e/N)(1/E) = K, here with K = 2 (each token also
// choosing the next expert) 2.
TEST(MoeRouting, BalanceLossesOfEvenRouting) {
  const int T = 4, E = 4;
  Fv scores(2 * T * E, 0.25f);
  std::vector<int> one(2 * T), two(2 * T * 2);
  for (int n = 0; n < 2 * T; ++n) {
    one[n] = n % E;
    two[2 * n] = n % E;
    two[2 * n + 1] = (n + 1) % E;
  }
  EXPECT_NEAR(kernels::moe_seq_balance_loss(scores.data(), one.data(), 2, T, E, 1), 1.0, 1e-6);
  EXPECT_NEAR(kernels::moe_seq_balance_loss(scores.data(), two.data(), 2, T, E, 2), 1.0, 1e-6);
  EXPECT_NEAR(kernels::moe_switch_balance_loss(scores.data(), two.data(), 2 * T, E, 2), 2.0, 1e-6);
}

}  // namespace
}  // namespace cann
