// The context-parallel attention kernel (kernels/cpu/attention.h, context_attention_*) against
// the double-precision reference of whole-sequence attention, whose own backward is checked
// against finite differences in kernels_test.cc. One process plays every rank of a cp group:
// rank r takes Megatron's load-balanced chunks r and 2cp-1-r of the sequence as its queries and
// the whole sequence's keys and values. Each rank's outputs, log-sum-exps and query gradients
// must be the reference's rows at its positions, and the key/value gradients summed over the
// ranks (what the reduce-scatter does) the reference's.
//
// Tolerance: 2e-4 of each output's scale, as kernels_test.cc allows fp32 against double (sums
// of at most a few hundred products, unit rounding 6e-8).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/rng.h"
#include "core/threads.h"
#include "kernels/cpu/attention.h"
#include "kernels/reference/attention.h"
#include "test_util.h"

namespace cann {
namespace {

using D = std::vector<double>;
using Fv = std::vector<float>;

constexpr double kFp32Tol = 2e-4;

double max_rel_diff(const Fv& a, const D& b) {
  double scale = 1e-3, worst = 0.0;
  for (double v : b) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst / scale;
}

// VS > 0: value heads of VS beside query/key heads of HS, with a score scale of its own
// (multi-head latent attention's shape).
struct CpCase {
  int B, chunk, cp, NH, KVH, HS;
  bool causal;
  int VS = 0;
  float scale = 0.0f;
};
void PrintTo(const CpCase& c, std::ostream* os) {
  *os << "B" << c.B << "_chunk" << c.chunk << "_cp" << c.cp << "_NH" << c.NH << "_KVH" << c.KVH
      << "_HS" << c.HS << (c.causal ? "_causal" : "_bidirectional");
  if (c.VS > 0) *os << "_VS" << c.VS;
}

class ContextAttentionTest : public ::testing::TestWithParam<CpCase> {
 protected:
  void SetUp() override { set_num_threads(2); }
};

TEST_P(ContextAttentionTest, RanksTogetherMatchWholeSequenceReference) {
  const CpCase p = GetParam();
  const int T = 2 * p.cp * p.chunk, Tq = 2 * p.chunk;
  const kernels::AttentionShape full{p.B, T, p.NH, p.KVH, p.HS, p.causal, p.VS, p.scale};
  // QC: the query columns of a qkv row (the keys and values follow them).
  const int QKV = full.QKV(), C = full.C(), QC = p.NH * p.HS, KV = QKV - QC;
  Rng rng(77);
  D qkv(static_cast<size_t>(p.B) * T * QKV), dout(static_cast<size_t>(p.B) * T * C);
  test::fill_normal(qkv, rng);
  test::fill_normal(dout, rng);
  D out(dout.size()), att(static_cast<size_t>(p.B) * p.NH * T * T), dqkv(qkv.size());
  ref::attention_forward(out.data(), att.data(), qkv.data(), full);
  ref::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), full);
  D lse(static_cast<size_t>(p.B) * p.NH * T);
  ref::attention_lse(lse.data(), att.data(), qkv.data(), full);

  // Every position's keys and values, as the all-gather leaves them.
  Fv kv(static_cast<size_t>(p.B) * T * KV);
  for (int b = 0; b < p.B; ++b)
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < KV; ++j)
        kv[(static_cast<size_t>(b) * T + t) * KV + j] =
            static_cast<float>(qkv[(static_cast<size_t>(b) * T + t) * QKV + QC + j]);
  D dkv_sum(kv.size(), 0.0);
  for (int r = 0; r < p.cp; ++r) {
    std::vector<int> pos;
    for (int chunk : {r, 2 * p.cp - 1 - r})
      for (int i = 0; i < p.chunk; ++i) pos.push_back(chunk * p.chunk + i);
    // The rank's rows of the fused qkv (queries read from it with stride QKV), of dout, and the
    // reference's rows it must reproduce.
    Fv q(static_cast<size_t>(p.B) * Tq * QKV), dout_r(static_cast<size_t>(p.B) * Tq * C);
    D want_out(dout_r.size()), want_lse(static_cast<size_t>(p.B) * p.NH * Tq);
    D want_dq(static_cast<size_t>(p.B) * Tq * QC);
    for (int b = 0; b < p.B; ++b)
      for (int i = 0; i < Tq; ++i) {
        const size_t g = static_cast<size_t>(b) * T + pos[i], l = static_cast<size_t>(b) * Tq + i;
        for (int j = 0; j < QKV; ++j) q[l * QKV + j] = static_cast<float>(qkv[g * QKV + j]);
        for (int j = 0; j < C; ++j) {
          dout_r[l * C + j] = static_cast<float>(dout[g * C + j]);
          want_out[l * C + j] = out[g * C + j];
        }
        for (int j = 0; j < QC; ++j) want_dq[l * QC + j] = dqkv[g * QKV + j];
        for (int h = 0; h < p.NH; ++h)
          want_lse[(static_cast<size_t>(b) * p.NH + h) * Tq + i] =
              lse[(static_cast<size_t>(b) * p.NH + h) * T + pos[i]];
      }
    const kernels::ContextAttentionShape s{p.B,  Tq,       T,          p.NH, p.KVH,
                                           p.HS, p.causal, pos.data(), p.VS, p.scale};
    Fv outf(dout_r.size(), 5.0f), lsef(want_lse.size(), 5.0f);
    kernels::context_attention_forward(outf.data(), lsef.data(), q.data(), QKV, kv.data(), s);
    EXPECT_LT(max_rel_diff(outf, want_out), kFp32Tol) << "rank " << r;
    EXPECT_LT(max_rel_diff(lsef, want_lse), kFp32Tol) << "rank " << r;
    Fv again(lsef.size(), 7.0f);
    kernels::context_attention_lse_forward(again.data(), q.data(), QKV, kv.data(), s);
    EXPECT_EQ(again, lsef) << "rank " << r << ": recomputed log-sum-exp differs";

    // dq lands in the query columns of QKV-wide rows; the key/value columns stay as they were.
    Fv dq(q.size(), 3.0f), dkv(kv.size(), 9.0f);
    kernels::context_attention_backward(dq.data(), dkv.data(), dout_r.data(), q.data(), QKV,
                                        kv.data(), outf.data(), lsef.data(), s);
    Fv dq_cols(want_dq.size());
    for (size_t l = 0; l < static_cast<size_t>(p.B) * Tq; ++l) {
      for (int j = 0; j < QC; ++j) dq_cols[l * QC + j] = dq[l * QKV + j];
      for (int j = QC; j < QKV; ++j) ASSERT_EQ(dq[l * QKV + j], 3.0f) << "rank " << r;
    }
    EXPECT_LT(max_rel_diff(dq_cols, want_dq), kFp32Tol) << "rank " << r;
    for (size_t i = 0; i < dkv.size(); ++i) dkv_sum[i] += dkv[i];
  }
  Fv dkv_got(dkv_sum.begin(), dkv_sum.end());
  D dkv_want(kv.size());
  for (size_t row = 0; row < static_cast<size_t>(p.B) * T; ++row)
    for (int j = 0; j < KV; ++j) dkv_want[row * KV + j] = dqkv[row * QKV + QC + j];
  EXPECT_LT(max_rel_diff(dkv_got, dkv_want), kFp32Tol);
}

// chunk 35 at cp = 2 gives 70 queries per rank: a 64-row causal block that ends inside the
// first chunk and a second one spanning the jump to the last chunk. cp = 3 with chunks of 2
// puts queries of three ranks on every block boundary; NH = 4 over KVH = 2 and 1 is GQA; the
// last two have value heads apart from the query/key heads and their own score scale (MLA).
INSTANTIATE_TEST_SUITE_P(
    Shapes, ContextAttentionTest,
    ::testing::Values(CpCase{2, 2, 2, 2, 2, 3, true}, CpCase{2, 2, 2, 2, 2, 3, false},
                      CpCase{1, 2, 3, 4, 2, 4, true}, CpCase{1, 2, 3, 4, 1, 4, false},
                      CpCase{1, 35, 2, 2, 1, 8, true}, CpCase{2, 35, 2, 2, 2, 8, false},
                      CpCase{2, 2, 2, 3, 3, 5, true, 3, 0.7f},
                      CpCase{1, 35, 2, 2, 2, 6, true, 9, 0.3f}, CpCase{1, 40, 2, 2, 1, 4, true},
                      CpCase{1, 40, 2, 2, 2, 4, false}));

}  // namespace
}  // namespace cann
