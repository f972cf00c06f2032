// The kernels of the recommendation models (embedding bags, DLRM's dot interaction, binary
// cross-entropy, the in-batch softmax of two-tower retrieval, ReLU), each checked as
// tests/kernel_check.h describes: the double reference's backward against central finite
// differences of its own forward, then the fp32 kernel against the double reference, at awkward
// sizes (empty bags, repeated ids, one example, widths that are not multiples of a vector).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "family_kernel_check.h"
#include "kernels/cpu/click_loss.h"
#include "kernels/cpu/dot_interaction.h"
#include "kernels/cpu/embedding_bag.h"
#include "kernels/reference/click_loss.h"
#include "kernels/reference/dot_interaction.h"
#include "kernels/reference/embedding_bag.h"

namespace cann {
namespace {

using test::D;
using test::dot;
using test::expect_below;
using test::fd_check;
using test::float_exact;
using test::Fv;
using test::kFdTol;
using test::kFp32Tol;
using test::max_rel_diff;
using test::randn;
using test::to_float;

class RecsysKernelTest : public test::FamilyKernelTest {};

// ------------------------------------------------------------------------------- embedding bag

TEST_F(RecsysKernelTest, EmbeddingBagMatchesReferenceAndFiniteDifferences) {
  // 6 bags over 5 gathered rows of width 19: sizes 2, 0 (empty), 3 with a repeated row, 1, 4, 1;
  // the offsets start at 7, as one feature's slice of a larger CSR array does.
  const int B = 6, U = 5, C = 19, ldo = 23;
  const std::vector<int64_t> offsets = {7, 9, 9, 12, 13, 17, 18};
  const std::vector<int32_t> index = {0, 3, 2, 2, 4, 1, 0, 1, 2, 3, 4};
  for (bool mean : {false, true}) {
    SCOPED_TRACE(mean ? "mean" : "sum");
    D rows = float_exact(randn(U * C, rng_)), dout = float_exact(randn(B * ldo, rng_));
    auto loss = [&] {
      D out(B * ldo, 0.0);
      ref::embedding_bag_forward(out.data(), ldo, rows.data(), offsets.data(), index.data(), B, C,
                                 mean);
      return dot(out, dout);
    };
    D drows(U * C, 0.0);
    ref::embedding_bag_backward(drows.data(), dout.data(), ldo, offsets.data(), index.data(), B, C,
                                mean);
    expect_below(fd_check(rows, drows, loss), kFdTol, "embedding_bag ref drows vs fd");

    D out_ref(B * ldo, 0.0);
    ref::embedding_bag_forward(out_ref.data(), ldo, rows.data(), offsets.data(), index.data(), B, C,
                               mean);
    Fv out(B * ldo, 0.0f), rows_f = to_float(rows), dout_f = to_float(dout);
    const auto pooling = mean ? kernels::BagPooling::kMean : kernels::BagPooling::kSum;
    kernels::embedding_bag_forward(out.data(), ldo, rows_f.data(), offsets.data(), index.data(), B,
                                   C, pooling);
    // Only the first C of every ldo columns are written: compare those.
    for (int b = 0; b < B; ++b)
      for (int c = C; c < ldo; ++c) out[b * ldo + c] = static_cast<float>(out_ref[b * ldo + c]);
    expect_below(max_rel_diff(out, out_ref), kFp32Tol, "embedding_bag fp32 out");
    // drows accumulates: start both from the same nonzero values.
    D start = float_exact(randn(U * C, rng_));
    D want = start;
    ref::embedding_bag_backward(want.data(), dout.data(), ldo, offsets.data(), index.data(), B, C,
                                mean);
    Fv got = to_float(start);
    kernels::embedding_bag_backward(got.data(), dout_f.data(), ldo, offsets.data(), index.data(), B,
                                    C, pooling);
    expect_below(max_rel_diff(got, want), kFp32Tol, "embedding_bag fp32 drows");
  }
}

TEST_F(RecsysKernelTest, EmbeddingBagBackwardSumsSharedRowsAcrossThreads) {
  // Many bags hitting few rows, wide enough to take the parallel path: every contribution lands.
  const int B = 2048, U = 3, C = 64;
  std::vector<int64_t> offsets(B + 1);
  std::vector<int32_t> index;
  for (int b = 0; b < B; ++b) {
    offsets[b] = static_cast<int64_t>(index.size());
    for (int k = 0; k < 1 + b % 3; ++k) index.push_back((b + k) % U);
  }
  offsets[B] = static_cast<int64_t>(index.size());
  Fv dout(B * C, 1.0f), drows(U * C, 0.0f);
  kernels::embedding_bag_backward(drows.data(), dout.data(), C, offsets.data(), index.data(), B, C,
                                  kernels::BagPooling::kSum);
  std::vector<double> count(U, 0.0);
  for (int32_t r : index) count[r] += 1.0;
  for (int r = 0; r < U; ++r)
    for (int c = 0; c < C; ++c) ASSERT_EQ(drows[r * C + c], count[r]) << "row " << r;
}

// --------------------------------------------------------------------------- dot interaction

TEST_F(RecsysKernelTest, DotInteractionMatchesReferenceAndFiniteDifferences) {
  for (auto [B, N, C] : {std::tuple{3, 5, 7}, std::tuple{1, 2, 16}, std::tuple{4, 27, 9}}) {
    SCOPED_TRACE("B=" + std::to_string(B) + " N=" + std::to_string(N) + " C=" + std::to_string(C));
    const int W = kernels::dot_interaction_width(N, C);
    D x = float_exact(randn(B * N * C, rng_)), dz = float_exact(randn(B * W, rng_));
    auto loss = [&] {
      D z(B * W);
      ref::dot_interaction_forward(z.data(), x.data(), B, N, C);
      return dot(z, dz);
    };
    D dx(B * N * C);
    ref::dot_interaction_backward(dx.data(), dz.data(), x.data(), B, N, C);
    expect_below(fd_check(x, dx, loss, B * N * C > 400 ? 7 : 1), kFdTol,
                 "dot_interaction ref dx vs fd");
    D z_ref(B * W);
    ref::dot_interaction_forward(z_ref.data(), x.data(), B, N, C);
    Fv xf = to_float(x), dzf = to_float(dz), z(B * W), dxf(B * N * C, 99.0f);
    kernels::dot_interaction_forward(z.data(), xf.data(), B, N, C);
    expect_below(max_rel_diff(z, z_ref), kFp32Tol, "dot_interaction fp32 z");
    kernels::dot_interaction_backward(dxf.data(), dzf.data(), xf.data(), B, N, C);
    expect_below(max_rel_diff(dxf, dx), kFp32Tol, "dot_interaction fp32 dx (overwritten)");
  }
}

TEST(DotInteraction, OrdersPairsAsDlrmDoes) {
  // x rows (1,0), (0,2), (3,1): z = [1, 0 | <x1,x0>=0, <x2,x0>=3, <x2,x1>=2].
  const Fv x = {1, 0, 0, 2, 3, 1};
  Fv z(kernels::dot_interaction_width(3, 2));
  kernels::dot_interaction_forward(z.data(), x.data(), 1, 3, 2);
  EXPECT_EQ(z, (Fv{1, 0, 0, 3, 2}));
}

// ------------------------------------------------------------------------------------- losses

TEST_F(RecsysKernelTest, BceWithLogitsMatchesReferenceAndFiniteDifferences) {
  const int B = 13;
  D z = float_exact(randn(B, rng_, 3.0)), y(B);
  for (int b = 0; b < B; ++b) y[b] = b % 3 == 0 ? 1.0 : 0.0;
  auto loss = [&] { return ref::bce_with_logits_forward(z.data(), y.data(), B); };
  D dz(B);
  ref::bce_with_logits_backward(dz.data(), z.data(), y.data(), B, 1.0);
  expect_below(fd_check(z, dz, loss), kFdTol, "bce ref dz vs fd");
  const Fv zf = to_float(z), yf = to_float(y);
  expect_below(std::abs(kernels::bce_with_logits_forward(zf.data(), yf.data(), B) - loss()),
               kFp32Tol, "bce fp32 loss");
  Fv dzf(B);
  kernels::bce_with_logits_backward(dzf.data(), zf.data(), yf.data(), B, 1.0f);
  expect_below(max_rel_diff(dzf, dz), kFp32Tol, "bce fp32 dz");
}

TEST(BceWithLogits, LargeLogitsStayFinite) {
  const Fv z = {200.0f, -200.0f}, y = {0.0f, 1.0f};
  // Each example is 200 nats wrong: the mean is 200, not infinity.
  EXPECT_NEAR(kernels::bce_with_logits_forward(z.data(), y.data(), 2), 200.0, 1e-3);
}

TEST_F(RecsysKernelTest, InBatchSoftmaxMatchesReferenceAndFiniteDifferences) {
  // NV = B (in-batch negatives only) and NV > B (sampled negatives appended).
  for (auto [B, NV, C] : {std::tuple{5, 5, 7}, std::tuple{4, 11, 17}, std::tuple{1, 1, 3}}) {
    SCOPED_TRACE("B=" + std::to_string(B) + " NV=" + std::to_string(NV));
    const double t = 0.3;
    D u = float_exact(randn(B * C, rng_, 0.5)), v = float_exact(randn(NV * C, rng_, 0.5));
    auto loss = [&] { return ref::in_batch_softmax_forward(u.data(), v.data(), B, NV, C, t); };
    D du(B * C), dv(NV * C, 0.0);
    ref::in_batch_softmax_backward(du.data(), dv.data(), u.data(), v.data(), B, NV, C, t, 1.0);
    expect_below(fd_check(u, du, loss), kFdTol, "in_batch_softmax ref du vs fd");
    expect_below(fd_check(v, dv, loss), kFdTol, "in_batch_softmax ref dv vs fd");

    const Fv uf = to_float(u), vf = to_float(v);
    Fv probs(B * NV), duf(B * C, 99.0f), dvf(NV * C, 0.0f);
    const double l = kernels::in_batch_softmax_forward(probs.data(), uf.data(), vf.data(), B, NV, C,
                                                       static_cast<float>(t));
    expect_below(std::abs(l - loss()) / std::max(1.0, loss()), kFp32Tol, "in_batch_softmax loss");
    kernels::in_batch_softmax_backward(duf.data(), dvf.data(), probs.data(), uf.data(), vf.data(),
                                       B, NV, C, static_cast<float>(t), 1.0f);
    expect_below(max_rel_diff(duf, du), kFp32Tol, "in_batch_softmax fp32 du");
    expect_below(max_rel_diff(dvf, dv), kFp32Tol, "in_batch_softmax fp32 dv");
  }
}

TEST_F(RecsysKernelTest, ReluMatchesReference) {
  const long n = 1001;
  D x = float_exact(randn(n, rng_)), dy = float_exact(randn(n, rng_));
  D y(n), dx(n);
  ref::relu_forward(y.data(), x.data(), n);
  ref::relu_backward(dx.data(), dy.data(), y.data(), n);
  Fv xf = to_float(x), dyf = to_float(dy), yf(n), dxf(n);
  kernels::relu_forward(yf.data(), xf.data(), n);
  kernels::relu_backward(dxf.data(), dyf.data(), yf.data(), n);
  EXPECT_EQ(max_rel_diff(yf, y), 0.0);
  EXPECT_EQ(max_rel_diff(dxf, dx), 0.0);
}

}  // namespace
}  // namespace cann
