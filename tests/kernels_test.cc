// Every kernel checked twice:
//  1. the naive reference's backward against central finite differences of its own forward,
//     all in double precision;
//  2. the optimized fp32 kernel's forward and backward against the double reference.
// Check 1 proves the math; check 2 proves the fast code computes that math. The helpers are in
// kernel_check.h.
//
// Tolerances. In double, a central difference with step h has truncation error ~h^2 f''' and
// rounding error ~1e-16 |f| / h; with h = 1e-5 both are below 1e-9, so 1e-6 relative error
// (against max(1, |g|)) leaves three orders of margin. For fp32 against double, each output is a
// sum of at most a few hundred products with unit rounding 6e-8, so 2e-4 of the output's scale
// bounds accumulated rounding with room to spare.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <vector>

#include "core/rng.h"
#include "core/threads.h"
#include "kernel_check.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/grad_norm.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/residual.h"
#include "kernels/reference/adamw.h"
#include "kernels/reference/attention.h"
#include "kernels/reference/cross_entropy.h"
#include "kernels/reference/embedding.h"
#include "kernels/reference/gelu.h"
#include "kernels/reference/layernorm.h"
#include "kernels/reference/linear.h"
#include "kernels/reference/moe.h"
#include "test_util.h"

namespace cann {
namespace {

using test::D;
using test::dot;
using test::fd_check;
using test::Fv;
using test::kFdTol;
using test::kFp32Tol;
using test::max_rel_diff;
using test::randn;
using test::to_float;

class KernelTest : public ::testing::Test {
 protected:
  void SetUp() override { set_num_threads(2); }
  Rng rng_{1234};
};

TEST_F(KernelTest, Linear) {
  for (bool bias : {true, false}) {
    const int N = 13, C = 37, OC = 19;
    D x = randn(N * C, rng_), w = randn(OC * C, rng_, 0.2), b = randn(OC, rng_),
      dy = randn(N * OC, rng_);
    const double* bp = bias ? b.data() : nullptr;
    auto loss = [&] {
      D y(N * OC);
      ref::linear_forward(y.data(), x.data(), w.data(), bp, N, C, OC);
      return dot(y, dy);
    };
    D dx(N * C), dw(OC * C, 0.0), db(OC, 0.0);
    ref::linear_backward(dx.data(), dw.data(), bias ? db.data() : nullptr, dy.data(), x.data(),
                         w.data(), N, C, OC);
    EXPECT_LT(fd_check(x, dx, loss), kFdTol);
    EXPECT_LT(fd_check(w, dw, loss), kFdTol);
    if (bias) {
      EXPECT_LT(fd_check(b, db, loss), kFdTol);
    }

    // fp32 kernel vs reference; dw/db start non-zero to check accumulation.
    D y(N * OC);
    ref::linear_forward(y.data(), x.data(), w.data(), bp, N, C, OC);
    Fv yf(N * OC), xf = to_float(x), wf = to_float(w), bf = to_float(b), dyf = to_float(dy);
    kernels::linear_forward(yf.data(), xf.data(), wf.data(), bias ? bf.data() : nullptr, N, C, OC);
    EXPECT_LT(max_rel_diff(yf, y), kFp32Tol);
    Fv dxf(N * C), dwf(OC * C, 1.0f), dbf(OC, 1.0f);
    kernels::linear_backward(dxf.data(), dwf.data(), bias ? dbf.data() : nullptr, dyf.data(),
                             xf.data(), wf.data(), N, C, OC);
    for (auto& v : dw) v += 1.0;
    for (auto& v : db) v += 1.0;
    EXPECT_LT(max_rel_diff(dxf, dx), kFp32Tol);
    EXPECT_LT(max_rel_diff(dwf, dw), kFp32Tol);
    if (bias) {
      EXPECT_LT(max_rel_diff(dbf, db), kFp32Tol);
    }
  }
}

TEST_F(KernelTest, LayerNorm) {
  const int N = 11, C = 29;
  D x = randn(N * C, rng_, 2.0), w = randn(C, rng_), b = randn(C, rng_), dy = randn(N * C, rng_);
  for (auto& v : x) v += 0.5;
  auto loss = [&] {
    D y(N * C), m(N), r(N);
    ref::layernorm_forward(y.data(), m.data(), r.data(), x.data(), w.data(), b.data(), N, C);
    return dot(y, dy);
  };
  D y(N * C), m(N), r(N), dx(N * C), dw(C, 0.0), db(C, 0.0);
  ref::layernorm_forward(y.data(), m.data(), r.data(), x.data(), w.data(), b.data(), N, C);
  ref::layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), m.data(),
                          r.data(), N, C);
  EXPECT_LT(fd_check(x, dx, loss), kFdTol);
  EXPECT_LT(fd_check(w, dw, loss), kFdTol);
  EXPECT_LT(fd_check(b, db, loss), kFdTol);

  Fv xf = to_float(x), wf = to_float(w), bf = to_float(b), dyf = to_float(dy);
  Fv yf(N * C), mf(N), rf(N), dxf(N * C), dwf(C, 0.0f), dbf(C, 0.0f);
  kernels::layernorm_forward(yf.data(), mf.data(), rf.data(), xf.data(), wf.data(), bf.data(), N,
                             C);
  kernels::layernorm_backward(dxf.data(), dwf.data(), dbf.data(), dyf.data(), xf.data(), wf.data(),
                              mf.data(), rf.data(), N, C);
  EXPECT_LT(max_rel_diff(yf, y), kFp32Tol);
  EXPECT_LT(max_rel_diff(dxf, dx), kFp32Tol);
  EXPECT_LT(max_rel_diff(dwf, dw), kFp32Tol);
  EXPECT_LT(max_rel_diff(dbf, db), kFp32Tol);
}

TEST_F(KernelTest, Gelu) {
  const size_t n = 1000;
  D x = randn(n, rng_, 3.0), dy = randn(n, rng_);
  x[0] = 0.0;
  x[1] = 12.0;  // tanh saturates: fast_tanh must stay exact at the rails
  x[2] = -12.0;
  auto loss = [&] {
    D y(n);
    ref::gelu_forward(y.data(), x.data(), n);
    return dot(y, dy);
  };
  D y(n), dx(n);
  ref::gelu_forward(y.data(), x.data(), n);
  ref::gelu_backward(dx.data(), x.data(), dy.data(), n);
  EXPECT_LT(fd_check(x, dx, loss), kFdTol);
  Fv xf = to_float(x), dyf = to_float(dy), yf(n), dxf(n);
  kernels::gelu_forward(yf.data(), xf.data(), n);
  kernels::gelu_backward(dxf.data(), xf.data(), dyf.data(), n);
  EXPECT_LT(max_rel_diff(yf, y), kFp32Tol);
  EXPECT_LT(max_rel_diff(dxf, dx), kFp32Tol);
}

// Attention over shapes that exercise the row blocking (T = 70: blocks of 64 and 6), the key
// blocking and its online softmax (T = 300: key blocks of 128, 128 and 44, row blocks ending
// inside and across them), grouped-query attention (NH = 4 over KVH = 2), the bidirectional
// path, and multi-head latent attention's shape: value heads narrower or wider than the
// query/key heads, with a score scale of its own.
struct AttnCase {
  int B, T, NH, KVH, HS;
  bool causal;
  int VS = 0;
  float scale = 0.0f;
};
void PrintTo(const AttnCase& c, std::ostream* os) {
  *os << "B" << c.B << "_T" << c.T << "_NH" << c.NH << "_KVH" << c.KVH << "_HS" << c.HS
      << (c.causal ? "_causal" : "_bidirectional");
  if (c.VS > 0) *os << "_VS" << c.VS << "_scale" << c.scale;
}

class AttentionTest : public KernelTest, public ::testing::WithParamInterface<AttnCase> {};

TEST_P(AttentionTest, MatchesReferenceAndFiniteDifferences) {
  const AttnCase p = GetParam();
  const kernels::AttentionShape s{p.B, p.T, p.NH, p.KVH, p.HS, p.causal, p.VS, p.scale};
  const size_t nqkv = static_cast<size_t>(p.B) * p.T * s.QKV();
  const size_t nout = static_cast<size_t>(p.B) * p.T * s.C();
  const size_t natt = static_cast<size_t>(p.B) * p.NH * p.T * p.T;
  const size_t nlse = static_cast<size_t>(p.B) * p.NH * p.T;
  D qkv = randn(nqkv, rng_, p.T > 100 ? 2.0 : 1.0), dout = randn(nout, rng_);
  auto loss = [&] {
    D out(nout), att(natt);
    ref::attention_forward(out.data(), att.data(), qkv.data(), s);
    return dot(out, dout);
  };
  D out(nout), att(natt), dqkv(nqkv);
  ref::attention_forward(out.data(), att.data(), qkv.data(), s);
  ref::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), s);
  // Every element for small shapes; a strided sample keeps the large one fast.
  EXPECT_LT(fd_check(qkv, dqkv, loss, p.T > 100 ? 53 : p.T > 32 ? 7 : 1), kFdTol);
  D lse(nlse);
  ref::attention_lse(lse.data(), att.data(), qkv.data(), s);

  // Output buffers prefilled with garbage: every element must be written.
  Fv qkvf = to_float(qkv), doutf = to_float(dout), outf(nout, 5.0f), lsef(nlse, 5.0f),
     dqkvf(nqkv, 99.0f);
  kernels::attention_forward(outf.data(), lsef.data(), qkvf.data(), s);
  kernels::attention_backward(dqkvf.data(), doutf.data(), qkvf.data(), outf.data(), lsef.data(), s);
  EXPECT_LT(max_rel_diff(outf, out), kFp32Tol);
  EXPECT_LT(max_rel_diff(lsef, lse), kFp32Tol);
  EXPECT_LT(max_rel_diff(dqkvf, dqkv), kFp32Tol);
  // Selective recomputation's log-sum-exp is the saved one, bit for bit.
  Fv again(nlse, 7.0f);
  kernels::attention_lse_forward(again.data(), qkvf.data(), s);
  EXPECT_EQ(again, lsef);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionTest,
    ::testing::Values(AttnCase{2, 5, 2, 2, 3, true}, AttnCase{2, 5, 2, 2, 3, false},
                      AttnCase{1, 7, 4, 2, 4, true}, AttnCase{1, 7, 4, 1, 4, false},
                      AttnCase{2, 70, 2, 1, 8, true}, AttnCase{1, 70, 2, 2, 8, false},
                      AttnCase{2, 7, 3, 3, 5, true, 3, 0.7f},
                      AttnCase{1, 70, 2, 2, 6, true, 9, 0.3f}, AttnCase{1, 300, 2, 1, 4, true},
                      AttnCase{1, 300, 2, 2, 4, false}));

TEST_F(KernelTest, Embedding) {
  const int B = 3, T = 5, C = 21, V = 7, maxT = 9;
  std::vector<int> tokens(B * T);
  for (auto& t : tokens) t = static_cast<int>(rng_.below(V));
  tokens[3] = tokens[4];  // repeated token: the backward must sum both rows
  D wte = randn(V * C, rng_), wpe = randn(maxT * C, rng_), dout = randn(B * T * C, rng_);
  auto loss = [&] {
    D out(B * T * C);
    ref::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return dot(out, dout);
  };
  D dwte(V * C, 0.0), dwpe(maxT * C, 0.0);
  ref::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  EXPECT_LT(fd_check(wte, dwte, loss), kFdTol);
  EXPECT_LT(fd_check(wpe, dwpe, loss), kFdTol);

  D out(B * T * C);
  ref::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  Fv wtef = to_float(wte), wpef = to_float(wpe), doutf = to_float(dout), outf(B * T * C);
  Fv dwtef(V * C, 0.0f), dwpef(maxT * C, 0.0f);
  kernels::embedding_forward(outf.data(), tokens.data(), wtef.data(), wpef.data(), B, T, C);
  kernels::embedding_backward(dwtef.data(), dwpef.data(), doutf.data(), tokens.data(), B, T, C);
  EXPECT_LT(max_rel_diff(outf, out), kFp32Tol);
  EXPECT_LT(max_rel_diff(dwtef, dwte), kFp32Tol);
  EXPECT_LT(max_rel_diff(dwpef, dwpe), kFp32Tol);
}

TEST_F(KernelTest, Residual) {
  const size_t n = 333;
  Fv a(n), b(n), out(n), dresid(n), dbranch(n);
  test::fill_normal(a, rng_);
  test::fill_normal(b, rng_);
  test::fill_normal(dresid, rng_);
  test::fill_normal(dbranch, rng_);
  kernels::residual_forward(out.data(), a.data(), b.data(), n);
  Fv before = dresid;
  kernels::residual_backward(dresid.data(), dbranch.data(), n);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(out[i], a[i] + b[i]);
    EXPECT_EQ(dresid[i], before[i] + dbranch[i]);
  }
}

TEST_F(KernelTest, SoftmaxCrossEntropy) {
  const int N = 9, V = 31;
  D logits = randn(N * V, rng_, 3.0);
  std::vector<int> targets(N);
  for (auto& t : targets) t = static_cast<int>(rng_.below(V));
  targets[2] = -1;  // not scored
  targets[5] = -1;
  // The backward takes one grad_scale for all rows (the mean's 1/N), so the loss is 0.7 * sum.
  D ones(N, 0.7);
  auto loss_uniform = [&] {
    D l(N);
    ref::softmax_crossentropy_forward(l.data(), logits.data(), targets.data(), N, V);
    return dot(l, ones);
  };
  D dlogits(N * V);
  ref::softmax_crossentropy_backward(dlogits.data(), logits.data(), targets.data(), 0.7, N, V);
  EXPECT_LT(fd_check(logits, dlogits, loss_uniform), kFdTol);

  D l(N);
  ref::softmax_crossentropy_forward(l.data(), logits.data(), targets.data(), N, V);
  Fv logitsf = to_float(logits), lf(N), dlf(N * V);
  kernels::softmax_crossentropy_forward(lf.data(), logitsf.data(), targets.data(), N, V);
  EXPECT_LT(max_rel_diff(lf, l), kFp32Tol);
  EXPECT_EQ(lf[2], 0.0f);
  kernels::softmax_crossentropy_backward(dlf.data(), logitsf.data(), targets.data(), 0.7f, N, V);
  EXPECT_LT(max_rel_diff(dlf, dlogits), kFp32Tol);
  // The fused in-place form gives the same gradient.
  kernels::softmax_crossentropy_backward(logitsf.data(), logitsf.data(), targets.data(), 0.7f, N,
                                         V);
  for (size_t i = 0; i < dlf.size(); ++i) EXPECT_EQ(logitsf[i], dlf[i]);
}

TEST_F(KernelTest, MoeRouterTopKCapacityAndAux) {
  const int N = 40, E = 5, K = 2;
  const int cap = kernels::moe_capacity(N, E, K, 1.0);  // ceil(1.0*40*2/5) = 16
  ASSERT_EQ(cap, 16);
  D logits = randn(N * E, rng_, 1.5);
  // Skew routing towards expert 0 so capacity really drops tokens.
  for (int n = 0; n < N; ++n) logits[n * E] += 2.0;
  Fv lf = to_float(logits), probs(N * E), gate(N * K), load(E);
  std::vector<int> idx(N * K), slot(N * K), count(E);
  const kernels::MoeShape s{N, E, K, cap};
  const float aux = kernels::moe_router_forward(probs.data(), idx.data(), gate.data(), slot.data(),
                                                count.data(), load.data(), lf.data(), s);
  // Top-k against a naive sort; slots in GShard priority order; counts never exceed capacity.
  std::vector<int> used(E, 0);
  for (int k = 0; k < K; ++k)
    for (int n = 0; n < N; ++n) {
      std::vector<int> order(E);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return logits[n * E + a] > logits[n * E + b]; });
      const int e = order[k];
      ASSERT_EQ(idx[n * K + k], e);
      const int expect_slot = used[e] < cap ? used[e]++ : -1;
      ASSERT_EQ(slot[n * K + k], expect_slot);
    }
  long kept = 0;
  for (int e = 0; e < E; ++e) {
    EXPECT_EQ(count[e], used[e]);
    EXPECT_LE(count[e], cap);
    kept += count[e];
  }
  EXPECT_LT(kept, N * K) << "the skew should make expert 0 overflow";
  D gref(N * K);
  const double aux_ref = ref::moe_gates(gref.data(), logits.data(), idx.data(), N, E, K);
  EXPECT_NEAR(aux, aux_ref, 1e-5);
  EXPECT_LT(max_rel_diff(gate, gref), kFp32Tol);

  // Backward: loss = sum over kept gates of w * gate + c * aux, for the fixed routing.
  D w = randn(N * K, rng_);
  const double c = 0.3;
  auto loss = [&] {
    D g(N * K);
    const double a = ref::moe_gates(g.data(), logits.data(), idx.data(), N, E, K);
    double sum = c * a;
    for (int i = 0; i < N * K; ++i)
      if (slot[i] >= 0) sum += w[i] * g[i];
    return sum;
  };
  Fv wf = to_float(w), dlf(N * E);
  kernels::moe_router_backward(dlf.data(), wf.data(), probs.data(), idx.data(), slot.data(),
                               load.data(), static_cast<float>(c), s);
  // Finite differences of the double reference give the ground truth for the fp32 kernel.
  EXPECT_LT(max_rel_diff(dlf, test::fd_gradient(logits, loss)), kFp32Tol);
}

TEST_F(KernelTest, MoeDispatchCombine) {
  const int N = 12, E = 3, K = 2, C = 10;
  const int cap = kernels::moe_capacity(N, E, K, 0.75);
  D logits = randn(N * E, rng_);
  Fv lf = to_float(logits), probs(N * E), gate(N * K), load(E);
  std::vector<int> idx(N * K), slot(N * K), count(E);
  const kernels::MoeShape s{N, E, K, cap};
  kernels::moe_router_forward(probs.data(), idx.data(), gate.data(), slot.data(), count.data(),
                              load.data(), lf.data(), s);
  D x = randn(N * C, rng_), ye = randn(static_cast<size_t>(E) * cap * C, rng_);
  D dout = randn(N * C, rng_), g(gate.begin(), gate.end());
  Fv xf = to_float(x), xe(static_cast<size_t>(E) * cap * C, 0.0f);
  kernels::moe_dispatch(xe.data(), xf.data(), idx.data(), slot.data(), s, C);
  for (int a = 0; a < N * K; ++a) {
    if (slot[a] < 0) continue;
    for (int c = 0; c < C; ++c)
      EXPECT_EQ(xe[(idx[a] * cap + slot[a]) * C + c], xf[(a / K) * C + c]);
  }
  // Dispatch backward sums the expert rows back into token rows.
  Fv dx(N * C);
  kernels::moe_dispatch_backward(dx.data(), xe.data(), idx.data(), slot.data(), s, C);
  for (int n = 0; n < N; ++n) {
    int kept = 0;
    for (int k = 0; k < K; ++k) kept += slot[n * K + k] >= 0;
    for (int c = 0; c < C; ++c) EXPECT_FLOAT_EQ(dx[n * C + c], kept * xf[n * C + c]);
  }
  // Combine forward and backward against the reference and finite differences.
  auto loss_ye = [&] {
    D out(N * C);
    ref::moe_combine(out.data(), ye.data(), g.data(), idx.data(), slot.data(), N, K, cap, C);
    return dot(out, dout);
  };
  D out(N * C);
  ref::moe_combine(out.data(), ye.data(), g.data(), idx.data(), slot.data(), N, K, cap, C);
  Fv yef = to_float(ye), outf(N * C), doutf = to_float(dout), dyef(ye.size(), 0.0f), dgf(N * K);
  kernels::moe_combine(outf.data(), yef.data(), gate.data(), idx.data(), slot.data(), s, C);
  EXPECT_LT(max_rel_diff(outf, out), kFp32Tol);
  kernels::moe_combine_backward(dyef.data(), dgf.data(), doutf.data(), yef.data(), gate.data(),
                                idx.data(), slot.data(), s, C);
  D dye(dyef.begin(), dyef.end()), dg(dgf.begin(), dgf.end());
  EXPECT_LT(fd_check(ye, dye, loss_ye), 1e-4);  // analytic side is fp32 here
  EXPECT_LT(fd_check(g, dg, loss_ye), 1e-4);
}

TEST_F(KernelTest, AdamWMatchesReferenceOverSteps) {
  const size_t n = 100003;  // odd size: exercises the vector loop remainder
  D p = randn(n, rng_), m(n, 0.0), v(n, 0.0);
  Fv pf = to_float(p), mf(n, 0.0f), vf(n, 0.0f);
  for (int step = 1; step <= 5; ++step) {
    D g = randn(n, rng_);
    Fv gf = to_float(g);
    ref::adamw_update(p.data(), m.data(), v.data(), g.data(), n, 1e-2, 0.9, 0.95, 1e-8, 0.1, step,
                      0.5);
    kernels::AdamWHyper h{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 0.5f};
    kernels::adamw_update(pf.data(), mf.data(), vf.data(), gf.data(), n, h);
  }
  EXPECT_LT(max_rel_diff(pf, p), 1e-5);
  EXPECT_LT(max_rel_diff(mf, m), 1e-5);
  EXPECT_LT(max_rel_diff(vf, v), 1e-5);
}

// The frozen-variance step of 1-bit Adam: against the formula in double, on a length that is
// not a multiple of any vector width, with decay.
TEST_F(KernelTest, AdamApply) {
  const size_t n = 100003;
  Fv p(n), m(n), v(n);
  test::fill_normal(p, rng_);
  test::fill_normal(m, rng_);
  test::fill_normal(v, rng_);
  for (float& x : v) x = x * x + 1e-6f;
  Fv out = p;
  kernels::adam_apply(out.data(), m.data(), v.data(), n, 1e-2f, 1e-8f, 0.999f);
  for (size_t i = 0; i < n; ++i) {
    const double want = static_cast<double>(p[i]) * 0.999 -
                        1e-2 * m[i] / (std::sqrt(static_cast<double>(v[i])) + 1e-8);
    ASSERT_NEAR(out[i], want, 1e-5 * std::max(1.0, std::fabs(want))) << i;
  }
}

TEST_F(KernelTest, GradNormAndClip) {
  const size_t n = 250001;
  Fv x(n);
  test::fill_normal(x, rng_);
  double naive = 0.0;
  for (float v : x) naive += static_cast<double>(v) * v;
  EXPECT_NEAR(kernels::sum_of_squares(x.data(), n) / naive, 1.0, 1e-6);
  EXPECT_EQ(kernels::sum_of_squares(x.data(), n), kernels::sum_of_squares(x.data(), n));
  EXPECT_EQ(kernels::clip_coefficient(0.5, 1.0f), 1.0f);
  EXPECT_EQ(kernels::clip_coefficient(5.0, 0.0f), 1.0f);
  const float c = kernels::clip_coefficient(4.0, 1.0f);
  EXPECT_NEAR(c, 0.25f, 1e-6);
  kernels::scale_inplace(x.data(), n, c);
  EXPECT_NEAR(std::sqrt(kernels::sum_of_squares(x.data(), n)), 0.25 * std::sqrt(naive), 1e-3);
}

TEST_F(KernelTest, ResultsDoNotDependOnThreadCount) {
  // The same thread count must give bit-identical results run to run (exact resume relies on
  // it); here the reductions with per-thread partials are run twice with 2 threads.
  const int N = 64, C = 48;
  Fv x(N * C), w(C), b(C), dy(N * C);
  test::fill_normal(x, rng_);
  test::fill_normal(w, rng_);
  test::fill_normal(b, rng_);
  test::fill_normal(dy, rng_);
  Fv y(N * C), m(N), r(N), dx1(N * C), dw1(C, 0.0f), db1(C, 0.0f), dx2(N * C), dw2(C, 0.0f),
      db2(C, 0.0f);
  kernels::layernorm_forward(y.data(), m.data(), r.data(), x.data(), w.data(), b.data(), N, C);
  kernels::layernorm_backward(dx1.data(), dw1.data(), db1.data(), dy.data(), x.data(), w.data(),
                              m.data(), r.data(), N, C);
  kernels::layernorm_backward(dx2.data(), dw2.data(), db2.data(), dy.data(), x.data(), w.data(),
                              m.data(), r.data(), N, C);
  EXPECT_EQ(dw1, dw2);
  EXPECT_EQ(db1, db2);
  EXPECT_EQ(dx1, dx2);
}

}  // namespace
}  // namespace cann
