// Strategy strings: parse and print round trips, defaults, and every validation error naming
// the numbers that disagree (issue: "a malformed or inconsistent strategy string says exactly
// what is wrong").
#include <gtest/gtest.h>

#include "model/spec.h"
#include "plan/cluster.h"
#include "plan/strategy.h"

namespace cann::plan {
namespace {

model::ModelSpec gpt(int heads, int kv, int layers, int experts = 0) {
  model::ModelSpec m;
  m.name.assign(1, 'm');
  m.hidden_size = 64 * heads;
  m.num_hidden_layers = layers;
  m.num_attention_heads = heads;
  m.num_key_value_heads = kv;
  m.intermediate_size = 4 * m.hidden_size;
  m.moe_intermediate_size = m.intermediate_size;
  m.vocab_size = 1000;
  m.seq_length = 2048;
  m.num_local_experts = experts;
  m.num_experts_per_tok = experts ? 2 : 1;
  return m;
}

ClusterSpec cluster(int nodes, int per_node) {
  ClusterSpec c;
  c.name = "c";
  c.nodes = nodes;
  c.devices_per_node = per_node;
  return c;
}

void expect_error(const Strategy& s, const model::ModelSpec& m, const ClusterSpec& c,
                  const std::string& fragment) {
  Status st = validate_strategy(s, m, c);
  ASSERT_FALSE(st.ok()) << strategy_string(s);
  EXPECT_EQ(st.exit_code(), 2);
  EXPECT_NE(st.message().find(fragment), std::string::npos) << st.message();
}

TEST(PlanStrategyTest, ParsePrintRoundTrip) {
  const std::string text =
      "dp=8,tp=4,pp=2,ep=2,cp=1,sp=on,mbs=2,gbs=512,zero=1,recompute=selective,vpp=2";
  auto s = parse_strategy(text);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->dp, 8);
  EXPECT_EQ(s->tp, 4);
  EXPECT_EQ(s->pp, 2);
  EXPECT_EQ(s->ep, 2);
  EXPECT_TRUE(s->sp);
  EXPECT_EQ(s->mbs, 2);
  EXPECT_EQ(s->gbs, 512);
  EXPECT_EQ(s->zero, 1);
  EXPECT_EQ(s->recompute, Recompute::kSelective);
  EXPECT_EQ(s->vpp, 2);
  EXPECT_EQ(strategy_string(*s), text);
  EXPECT_EQ(s->micro_batches(), 512 / (8 * 2));
}

TEST(PlanStrategyTest, DefaultsAndDerivedDp) {
  auto s = parse_strategy("tp=8, pp=4");  // spaces are harmless
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->dp, 0);  // derived later
  EXPECT_EQ(s->ep, 1);
  EXPECT_FALSE(s->sp);
  EXPECT_EQ(s->recompute, Recompute::kNone);
  EXPECT_EQ(s->mbs, 0);  // not given: the planner takes 1, the trainer its own default
  auto r = resolve_strategy(*s, gpt(32, 32, 32), cluster(16, 8), 1024);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->mbs, 1);
  EXPECT_EQ(r->dp, 128 / 32);
  EXPECT_EQ(r->gbs, 1024);
  // Without a default batch, one micro-batch per data-parallel rank.
  auto r2 = resolve_strategy(*s, gpt(32, 32, 32), cluster(16, 8), 0);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->gbs, r2->dp * r2->mbs);
}

TEST(PlanStrategyTest, SyntaxErrors) {
  struct Case {
    const char* text;
    const char* fragment;
  } cases[] = {
      {"", "empty string"},
      {"tp=8,,pp=2", "empty item"},
      {"tp", "not key=value"},
      {"tq=8", "unknown key 'tq'; hint: the keys are dp, tp"},
      {"tp=8,tp=4", "key 'tp' given twice"},
      {"tp=0", "key 'tp': expected a positive integer, got '0'"},
      {"tp=-2", "expected a positive integer, got '-2'"},
      {"pp=x", "key 'pp': expected a positive integer, got 'x'"},
      {"sp=maybe", "key 'sp': expected on or off"},
      {"zero=4", "expected a ZeRO stage 0, 1, 2 or 3, got '4'"},
      {"recompute=some", "expected none, selective, full, full:K or op, got 'some'"},
  };
  for (const Case& c : cases) {
    auto s = parse_strategy(c.text);
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_EQ(s.status().exit_code(), 2);
    EXPECT_NE(s.status().message().find(c.fragment), std::string::npos)
        << c.text << " -> " << s.status().message();
  }
}

TEST(PlanStrategyTest, EachRuleHasItsMessage) {
  const model::ModelSpec m = gpt(24, 24, 12), moe = gpt(16, 16, 8, 8);
  const ClusterSpec c = cluster(8, 8);  // 64 devices
  auto make = [](int dp, int tp, int pp, int cp, int gbs) {
    Strategy s;
    s.dp = dp, s.tp = tp, s.pp = pp, s.cp = cp, s.gbs = gbs;
    return s;
  };
  Strategy ok = make(16, 4, 1, 1, 64);
  EXPECT_TRUE(validate_strategy(ok, m, c).ok());
  expect_error(make(8, 4, 1, 1, 64), m, c, "dp*tp*pp*cp = 8*4*1*1 = 32, but cluster c has 64");
  expect_error(make(4, 16, 1, 1, 64), m, c, "tp=16 does not divide num_attention_heads 24");
  EXPECT_TRUE(validate_strategy(make(8, 8, 1, 1, 64), m, c).ok());
  Strategy s = make(16, 4, 1, 1, 64);
  s.ep = 2;
  expect_error(s, m, c, "ep=2 but model m has no experts");
  s = make(16, 4, 1, 1, 64);
  s.ep = 3;
  expect_error(s, moe, c, "ep=3 does not divide dp=16");
  s = make(4, 8, 2, 1, 64);
  s.ep = 4;
  EXPECT_TRUE(validate_strategy(s, moe, c).ok());
  s = make(16, 4, 1, 1, 64);
  s.ep = 16;
  expect_error(s, moe, c, "ep=16 exceeds the 8 experts");
  // An ep that does not divide the experts is priced (each rank holds ceil(E/ep) of them).
  s = make(12, 1, 1, 1, 48);
  s.ep = 3;
  EXPECT_TRUE(validate_strategy(s, moe, cluster(3, 4)).ok());
  expect_error(make(1, 4, 16, 1, 64), m, c, "pp*vpp = 16*1 = 16 exceeds the 12 layers");
  expect_error(make(16, 4, 1, 1, 100), m, c, "gbs=100 is not a multiple of dp*mbs = 16*1 = 16");
  s = make(64, 1, 1, 1, 64);
  s.sp = true;
  expect_error(s, m, c, "sp=on needs tp>1");
  s = make(16, 4, 1, 1, 64);
  s.vpp = 2;
  expect_error(s, m, c, "vpp=2 needs pp>1");
  s = make(8, 4, 2, 1, 8 * 3);  // 3 micro-batches, not a multiple of pp = 2
  s.vpp = 2;
  expect_error(s, m, c, "to be a multiple of pp=2");
  s = make(8, 4, 2, 1, 64);
  s.vpp = 4;  // 12 layers in 2 * 4 = 8 chunks
  expect_error(s, m, c, "split into pp*vpp = 8 equal chunks");
  EXPECT_TRUE(validate_strategy(make(16, 1, 1, 4, 64), m, c).ok());
  model::ModelSpec odd_seq = m;
  odd_seq.seq_length = 1000;
  expect_error(make(1, 4, 1, 16, 64), odd_seq, c, "cp=16 does not divide seq_length 1000");
  // Tensor parallelism across nodes only when the cluster allows it.
  expect_error(make(4, 16, 1, 1, 64), gpt(32, 32, 12), c, "does not fit the 8-device nodes");
  ClusterSpec wide = c;
  wide.allow_cross_node_tp = true;
  EXPECT_TRUE(validate_strategy(make(4, 16, 1, 1, 64), gpt(32, 32, 12), wide).ok());
  // GQA: tp and the kv-head count must nest.
  expect_error(make(16, 4, 1, 1, 64), gpt(24, 6, 12), c, "num_key_value_heads 6");
  EXPECT_TRUE(validate_strategy(make(8, 8, 1, 1, 64), gpt(32, 4, 12), c).ok());
}

// recompute=full:K recomputes every K-th layer whole (torchtitan's selective layer mode).
TEST(PlanStrategyTest, EveryKthLayerRecomputationRoundTrips) {
  auto s = parse_strategy("dp=64,recompute=full:2");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->recompute, Recompute::kFull);
  EXPECT_EQ(s->recompute_every, 2);
  EXPECT_EQ(strategy_brief(*s), "dp=64,recompute=full:2");
  s->mbs = 1;
  s->gbs = 64;
  EXPECT_EQ(strategy_string(*s),
            "dp=64,tp=1,pp=1,ep=1,cp=1,sp=off,mbs=1,gbs=64,zero=0,recompute=full:2,vpp=1");
  auto back = parse_strategy(strategy_string(*s));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, *s);
  // full:1 is full.
  EXPECT_EQ(strategy_brief(*parse_strategy("recompute=full:1")), "recompute=full");
  for (const char* bad :
       {"recompute=full:0", "recompute=full:", "recompute=full:2x", "recompute=full:-1"}) {
    auto r = parse_strategy(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("full:K recomputes every K-th layer"), std::string::npos)
        << r.status().message();
  }
  s->recompute_every = 13;
  expect_error(*s, gpt(24, 8, 12), cluster(8, 8), "but model m has 12");
}

// recompute=op, torchtitan's per-operator policy, is priced on bias-free dense blocks with a
// fused attention core only; the engine trains none of it.
TEST(PlanStrategyTest, PerOperatorRecomputationNamesWhatItCannotPrice) {
  auto s = parse_strategy("dp=64,recompute=op");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->recompute, Recompute::kOp);
  EXPECT_EQ(strategy_brief(*s), "dp=64,recompute=op");
  s->mbs = 1;  // as resolve_strategy fills them
  s->gbs = 64;
  model::ModelSpec llama = gpt(24, 8, 12);
  llama.qkv_bias = llama.o_bias = llama.mlp_bias = false;
  const ClusterSpec c = cluster(8, 8);
  EXPECT_TRUE(validate_strategy(*s, llama, c).ok());
  expect_error(*s, gpt(24, 8, 12), c, "model m has biases on its linear layers");
  model::ModelSpec moe = gpt(16, 16, 8, 8);
  moe.qkv_bias = moe.o_bias = moe.mlp_bias = false;
  expect_error(*s, moe, c, "model m has expert layers");
  ClusterSpec materialized = c;
  materialized.device.attention = AttentionKernel::kMaterialized;
  expect_error(*s, llama, materialized, "keeps the output of a fused attention kernel");
  ClusterSpec cpu = c;
  cpu.device.precision = Precision::kFp32;
  expect_error(*s, llama, cpu, "which cluster c does not run");
}

}  // namespace
}  // namespace cann::plan
