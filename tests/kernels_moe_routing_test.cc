// The MoE routers of the Mixtral, Qwen-MoE and DeepSeek families (and Qwen2-MoE's
// shared-expert gate), checked as
// tests/kernel_check.h describes (the double reference against finite differences, the fp32
// kernel against the reference) and against small worked examples computed by hand from the
// published formulas. Every check prints its max difference.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "family_kernel_check.h"
#include "kernels/cpu/moe_balance.h"
#include "kernels/cpu/moe_routing.h"
#include "kernels/cpu/shared_expert_gate.h"
#include "kernels/reference/moe_routing.h"
#include "kernels/reference/shared_expert_gate.h"

namespace cann {
namespace {

using kernels::GroupRanking;
using kernels::RouterConfig;
using kernels::RouterScore;
using test::D;
using test::dot;
using test::expect_below;
using test::FamilyKernelTest;
using test::fd_gradient;
using test::float_exact;
using test::Fv;
using test::kFp32Tol;
using test::max_rel_diff;
using test::randn;
using test::to_float;

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

// Qwen2-MoE's shared-expert gate: the fp32 forward against the double reference, and the fp32
// backward of loss = sum dout * out against central differences of the reference in y, x and g
// (out = routed + sigmoid(x . g) * y). dx_add starts at 1 to check that the kernel adds.
TEST_F(FamilyKernelTest, SharedExpertGateMatchesReference) {
  const int N = 7, C = 5;
  D x = float_exact(randn(N * C, rng_)), y = float_exact(randn(N * C, rng_));
  D g = float_exact(randn(C, rng_, 0.5)), routed = float_exact(randn(N * C, rng_));
  D dout = float_exact(randn(N * C, rng_));
  D out(N * C);
  ref::shared_expert_gate_forward(out.data(), routed.data(), y.data(), x.data(), g.data(), N, C);
  Fv of = to_float(routed), gate(N);
  const Fv xf = to_float(x), yf = to_float(y), gf = to_float(g), df = to_float(dout);
  kernels::shared_expert_gate_forward(of.data(), gate.data(), yf.data(), xf.data(), gf.data(), N,
                                      C);
  expect_below(max_rel_diff(of, out), kFp32Tol, "shared gate fp32 out");

  Fv dy(N * C, 9.0f), dg(C, 0.0f), dx(N * C, 1.0f);
  kernels::shared_expert_gate_backward(dy.data(), dg.data(), dx.data(), df.data(), yf.data(),
                                       xf.data(), gf.data(), gate.data(), N, C);
  for (float& v : dx) v -= 1.0f;
  auto loss = [&] {
    ref::shared_expert_gate_forward(out.data(), routed.data(), y.data(), x.data(), g.data(), N, C);
    return dot(out, dout);
  };
  expect_below(max_rel_diff(dy, fd_gradient(y, loss)), kFp32Tol, "shared gate dy vs fd");
  expect_below(max_rel_diff(dx, fd_gradient(x, loss)), kFp32Tol, "shared gate dx vs fd");
  expect_below(max_rel_diff(dg, fd_gradient(g, loss)), kFp32Tol, "shared gate dg vs fd");
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
