// The correctness matrix's gradients, through the binary with real processes: every strategy
// of the model-parallel matrix writes the whole model's gradient after its first step
// (`run --dump-grads`, shards assembled into the single-process layout), and each tensor must
// equal the reference run's. The references follow model_parallel_test.cc: gpt_tiny against
// one process; moe_bert_tiny against a run with the same micro-batches (one process with
// --grad-accum 2 for micro-batches of 4; the data-parallel run of the same dp and mbs where
// data parallelism regroups a step's samples), because MoE routing depends on which tokens
// share a micro-batch.
//
// Tolerance: 2e-5 of each tensor's largest reference entry, as the in-process tests use. The
// runs differ only in fp32 summation order (observed up to ~1e-6); a missing reduction, a
// shard in the wrong place or a tied copy left out is off by O(1).
//
// The data-parallel rows include small buckets under interleaving (where a chunk's earlier
// micro-batches run after a higher chunk's last one) and ZeRO 1-3, whose shards the dump
// assembles. Context parallelism (cp=2: each rank holds half the positions of every
// sequence, its gradients parts of the replica's) is checked with dp, tp (with and without
// sp), every pipeline schedule, recomputation and ZeRO 1-3 (sharded over the dp x cp ranks),
// for gpt_tiny (causal, load-balanced chunks) and for a dense BERT (bidirectional, masked
// positions scored). A Qwen3-style dense model (today's blocks) runs the layouts where its
// pieces split or place differently: tp with and without sp, pp (tied head absent), cp
// (rotary positions are global ones), ZeRO and recomputation. Dense DeepSeek models run them
// with multi-head latent attention.
//
// Also: `debug grads --compare` exits 1 when a tensor is over --tolerance, and a malformed
// dump is a one-line error with exit 2.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "ckpt/safetensors.h"
#include "debug/grad_compare.h"
#include "run_args.h"
#include "test_util.h"

namespace cann {
namespace {

// The flags of an n-process run of `strategy`.
std::vector<std::string> np(int n, const std::string& strategy,
                            std::vector<std::string> more = {}) {
  std::vector<std::string> f = {"--nproc-per-node", std::to_string(n), "--strategy", strategy};
  f.insert(f.end(), more.begin(), more.end());
  return f;
}

class MultiProcGradientMatrixTest : public ::testing::Test {
 public:
  struct Case {
    std::string name, reference;
    std::vector<std::string> flags;
  };

 protected:
  // `steps` steps of `model` under `flags`; returns the path of the last step's dump.
  std::string dump(const std::string& model, const std::string& name,
                   std::vector<std::string> flags, int steps) {
    const std::string path = dir_.file(name + ".safetensors");
    const auto r = test::run_cann(test::RunArgs()
                                      .model(model)
                                      .seq_len(64)
                                      .steps(steps)
                                      .flag("--dump-grads-step", steps)
                                      .batch_size(8)
                                      .eval_every(0)
                                      .flag("--eval-batches", 1)
                                      .sample_tokens(0)
                                      .quiet()
                                      .flag("--dump-grads", path)
                                      .flags(flags),
                                  240);
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.output;
    return path;
  }

  void expect_matrix(const std::string& model,
                     const std::map<std::string, std::vector<std::string>>& refs,
                     const std::vector<Case>& cases, int steps = 1) {
    std::map<std::string, ckpt::SafeTensors> want;
    for (const auto& [name, flags] : refs) {
      auto r = ckpt::read_safetensors(dump(model, name, flags, steps));
      ASSERT_TRUE(r.ok()) << r.status().message();
      want[name] = std::move(*r);
    }
    for (const Case& c : cases) {
      auto got = ckpt::read_safetensors(dump(model, c.name, c.flags, steps));
      ASSERT_TRUE(got.ok()) << got.status().message();
      auto rows = debug::compare_grads(*got, want.at(c.reference), c.name, c.reference);
      ASSERT_TRUE(rows.ok()) << rows.status().message();
      double worst = 0;
      std::string worst_name;
      for (const auto& d : *rows) {
        EXPECT_LT(d.relative, 2e-5) << model << " " << c.name << ": " << d.name;
        if (!(d.relative <= worst)) {
          worst = d.relative;
          worst_name = d.name;
        }
      }
      std::printf("%-14s %-18s vs %-18s %3zu tensors, max gradient deviation %.2e (%s)\n",
                  model.substr(model.find_last_of('/') + 1).c_str(), c.name.c_str(),
                  c.reference.c_str(), rows->size(), worst,
                  worst_name.c_str());
    }
  }
  test::TempDir dir_;
};

TEST_F(MultiProcGradientMatrixTest, GptTinyMatchesOneProcessPerTensor) {
  expect_matrix("gpt_tiny", {{"single", {"--threads", "1"}}},
                {
                    {"dp2", "single", np(2, "dp=2")},
                    {"tp2", "single", np(2, "tp=2")},
                    {"tp2_sp", "single", np(2, "tp=2,sp=on")},
                    {"pp2_gpipe", "single", np(2, "pp=2,mbs=2", {"--pipeline-schedule", "gpipe"})},
                    {"pp2_1f1b", "single", np(2, "pp=2,mbs=2")},
                    {"pp2_vpp2", "single", np(2, "pp=2,vpp=2,mbs=2")},
                    {"dp2_tp2", "single", np(4, "dp=2,tp=2,mbs=4")},
                    {"dp2_pp2", "single", np(4, "dp=2,pp=2,mbs=2")},
                    {"pp2_tp2", "single", np(4, "pp=2,tp=2,mbs=2")},
                    {"pp2_tp2_sp", "single", np(4, "pp=2,tp=2,sp=on,mbs=2")},
                    {"dp2_pp2_vpp2", "single", np(4, "dp=2,pp=2,vpp=2,mbs=2")},
                    {"dp2_pp2_vpp2_b1", "single",
                     np(4, "dp=2,pp=2,vpp=2,mbs=2", {"--bucket-size-mb", "1"})},
                    {"dp2_zero1", "single", np(2, "dp=2,zero=1")},
                    {"dp2_zero2", "single", np(2, "dp=2,zero=2")},
                    {"dp2_zero3", "single", np(2, "dp=2,zero=3")},
                    {"dp2_tp2_zero3", "single", np(4, "dp=2,tp=2,zero=3")},
                    {"dp2_pp2_zero1", "single", np(4, "dp=2,pp=2,zero=1,mbs=2")},
                });
}

TEST_F(MultiProcGradientMatrixTest, GptTinyContextParallelMatchesOneProcessPerTensor) {
  expect_matrix("gpt_tiny", {{"single", {"--threads", "1"}}},
                {
                    {"cp2", "single", np(2, "cp=2")},
                    {"dp2_cp2", "single", np(4, "dp=2,cp=2")},
                    {"cp2_tp2", "single", np(4, "cp=2,tp=2")},
                    {"cp2_tp2_sp", "single", np(4, "cp=2,tp=2,sp=on")},
                    {"cp2_pp2_gpipe", "single",
                     np(4, "cp=2,pp=2,mbs=2", {"--pipeline-schedule", "gpipe"})},
                    {"cp2_pp2_1f1b", "single", np(4, "cp=2,pp=2,mbs=2")},
                    {"cp2_pp2_vpp2", "single", np(4, "cp=2,pp=2,vpp=2,mbs=2")},
                    {"cp2_selective", "single", np(2, "cp=2,recompute=selective")},
                    {"cp2_full", "single", np(2, "cp=2,recompute=full")},
                    {"cp2_zero1", "single", np(2, "cp=2,zero=1")},
                    {"cp2_zero2", "single", np(2, "cp=2,zero=2")},
                    {"cp2_zero3", "single", np(2, "cp=2,zero=3")},
                });
}

// No shipped BERT is both dense and small: a 2-layer one, byte vocabulary plus [MASK]. Each
// data-parallel replica averages over its own masked positions, whose count differs between
// replicas, so dp x cp is compared with the data-parallel run, and a pipeline's micro-batches
// of 2 with the single process accumulating the same micro-batches (the context split itself
// counts a micro-batch's positions over all its cp ranks).
TEST_F(MultiProcGradientMatrixTest, DenseBertContextParallelMatchesOneProcessPerTensor) {
  const std::string bert = dir_.file("bert_dense.yaml");
  test::write_text(bert,
                   "architecture: bert\nhidden_size: 64\nnum_hidden_layers: 2\n"
                   "num_attention_heads: 4\nvocab_size: 257\nseq_length: 64\n");
  expect_matrix(bert,
                {{"single", {"--threads", "1"}},
                 {"single_accum4", {"--threads", "1", "--grad-accum", "4"}},
                 {"dp2", np(2, "dp=2")}},
                {
                    {"cp2", "single", np(2, "cp=2")},
                    {"dp2_cp2", "dp2", np(4, "dp=2,cp=2")},
                    {"cp2_pp2", "single_accum4", np(4, "cp=2,pp=2,mbs=2")},
                    {"cp2_tp2_sp", "single", np(4, "cp=2,tp=2,sp=on")},
                });
}

// Today's dense families: a small Qwen3-style model with every piece of the dense blocks that
// tensor parallelism splits differently (RMSNorm, rotary positions, SwiGLU's {gate, up} parts
// split each over tp, grouped KV heads, QK-norm whose weights see only a rank's heads,
// head_dim apart from hidden/heads, q/k/v biases, an untied head split by vocabulary).
TEST_F(MultiProcGradientMatrixTest, DenseFamiliesMatchOneProcessPerTensor) {
  const std::string qwen = dir_.file("qwen3_dense.yaml");
  test::write_text(qwen,
                   "model_type: qwen3\nhidden_size: 64\nnum_hidden_layers: 4\n"
                   "num_attention_heads: 4\nnum_key_value_heads: 2\nhead_dim: 24\n"
                   "intermediate_size: 96\nvocab_size: 256\nmax_position_embeddings: 64\n"
                   "seq_length: 64\nattention_bias: true\ntie_word_embeddings: false\n");
  expect_matrix(qwen, {{"single", {"--threads", "1"}}},
                {
                    {"dp2", "single", np(2, "dp=2")},
                    {"tp2", "single", np(2, "tp=2")},
                    {"tp2_sp", "single", np(2, "tp=2,sp=on")},
                    {"pp2_1f1b", "single", np(2, "pp=2,mbs=2")},
                    {"pp2_vpp2", "single", np(2, "pp=2,vpp=2,mbs=2")},
                    {"pp2_tp2_sp", "single", np(4, "pp=2,tp=2,sp=on,mbs=2")},
                    {"dp2_tp2_zero3", "single", np(4, "dp=2,tp=2,zero=3")},
                    {"dp2_zero1", "single", np(2, "dp=2,zero=1")},
                    {"dp2_zero2", "single", np(2, "dp=2,zero=2")},
                    {"cp2", "single", np(2, "cp=2")},
                    {"cp2_tp2_sp", "single", np(4, "cp=2,tp=2,sp=on")},
                    {"cp2_pp2_1f1b", "single", np(4, "cp=2,pp=2,mbs=2")},
                    {"selective", "single", np(1, "dp=1,recompute=selective")},
                    {"tp2_full", "single", np(2, "tp=2,recompute=full")},
                });
}

// DeepSeek's multi-head latent attention, dense: tp splits q_b and kv_b by heads while q_a,
// kv_a and their norms are replicated with gradients summed over the ranks (with sp too), pp
// and interleaving place its tensors, cp gathers every position's expanded keys and values
// (the rotary key at global positions), ZeRO shards them, recomputation rebuilds the latents.
// The plain q projection of DeepSeek-V2 (with biases on kv_a and o) runs the splits that
// differ for it.
TEST_F(MultiProcGradientMatrixTest, LatentAttentionMatchesOneProcessPerTensor) {
  const std::string mla = dir_.file("deepseek_v3_dense.yaml");
  const std::string dims =
      "hidden_size: 64\nnum_hidden_layers: 4\nnum_attention_heads: 4\nkv_lora_rank: 24\n"
      "qk_nope_head_dim: 16\nqk_rope_head_dim: 8\nv_head_dim: 12\nintermediate_size: 96\n"
      "vocab_size: 256\nmax_position_embeddings: 64\nseq_length: 64\nn_routed_experts: 0\n"
      "tie_word_embeddings: false\n";
  test::write_text(mla,
                   "model_type: deepseek_v3\nq_lora_rank: 32\nfirst_k_dense_replace: 4\n"
                   "num_nextn_predict_layers: 0\n" +
                       dims);
  expect_matrix(mla, {{"single", {"--threads", "1"}}},
                {
                    {"dp2", "single", np(2, "dp=2")},
                    {"tp2", "single", np(2, "tp=2")},
                    {"tp2_sp", "single", np(2, "tp=2,sp=on")},
                    {"pp2_1f1b", "single", np(2, "pp=2,mbs=2")},
                    {"pp2_vpp2", "single", np(2, "pp=2,vpp=2,mbs=2")},
                    {"pp2_tp2_sp", "single", np(4, "pp=2,tp=2,sp=on,mbs=2")},
                    {"dp2_tp2", "single", np(4, "dp=2,tp=2,mbs=4")},
                    {"dp2_tp2_zero3", "single", np(4, "dp=2,tp=2,zero=3")},
                    {"dp2_zero1", "single", np(2, "dp=2,zero=1")},
                    {"dp2_zero2", "single", np(2, "dp=2,zero=2")},
                    {"cp2", "single", np(2, "cp=2")},
                    {"cp2_tp2_sp", "single", np(4, "cp=2,tp=2,sp=on")},
                    {"cp2_pp2_1f1b", "single", np(4, "cp=2,pp=2,mbs=2")},
                    {"selective", "single", np(1, "dp=1,recompute=selective")},
                    {"tp2_full", "single", np(2, "tp=2,recompute=full")},
                    {"cp2_full", "single", np(2, "cp=2,recompute=full")},
                });
  const std::string plain = dir_.file("deepseek_v2_dense.yaml");
  test::write_text(plain,
                   "model_type: deepseek_v2\nq_lora_rank: null\nattention_bias: true\n" + dims);
  expect_matrix(plain, {{"single", {"--threads", "1"}}},
                {
                    {"tp2", "single", np(2, "tp=2")},
                    {"tp2_sp_full", "single", np(2, "tp=2,sp=on,recompute=full")},
                    {"cp2_tp2", "single", np(4, "cp=2,tp=2")},
                    {"pp2_vpp2_tp2", "single", np(4, "pp=2,vpp=2,tp=2,mbs=2")},
                });
}

TEST_F(MultiProcGradientMatrixTest, MoeBertTinyMatchesItsReferencePerTensor) {
  expect_matrix(
      "moe_bert_tiny",
      {{"single_accum2", {"--threads", "1", "--grad-accum", "2"}},
       {"dp2", np(2, "dp=2,mbs=4")},
       {"dp2_mbs2", np(2, "dp=2,mbs=2")},
       {"dp4", np(4, "dp=4,mbs=2")}},
      {
          {"tp2", "single_accum2", np(2, "tp=2,mbs=4")},
          {"tp2_sp", "single_accum2", np(2, "tp=2,sp=on,mbs=4")},
          {"pp2_gpipe", "single_accum2", np(2, "pp=2,mbs=4", {"--pipeline-schedule", "gpipe"})},
          {"pp2_1f1b", "single_accum2", np(2, "pp=2,mbs=4")},
          {"pp2_vpp2", "single_accum2", np(2, "pp=2,vpp=2,mbs=4")},
          {"pp2_tp2", "single_accum2", np(4, "pp=2,tp=2,mbs=4")},
          {"dp2_tp2", "dp2", np(4, "dp=2,tp=2,mbs=4")},
          {"dp2_tp2_sp", "dp2", np(4, "dp=2,tp=2,sp=on,mbs=4")},
          {"dp2_pp2", "dp2_mbs2", np(4, "dp=2,pp=2,mbs=2")},
          {"dp2_ep2", "dp2", np(2, "dp=2,ep=2,mbs=4")},
          {"dp4_ep2", "dp4", np(4, "dp=4,ep=2,mbs=2")},
          {"dp4_ep4", "dp4", np(4, "dp=4,ep=4,mbs=2")},
          {"dp2_tp2_ep2", "dp2", np(4, "dp=2,tp=2,ep=2,mbs=4")},
          {"dp2_pp2_ep2", "dp2_mbs2", np(4, "dp=2,pp=2,ep=2,mbs=2")},
          // M = pp micro-batches: a stage's lower chunk runs its earlier micro-batch last.
          {"dp2_pp2_vpp2", "dp2_mbs2", np(4, "dp=2,pp=2,vpp=2,mbs=2")},
          {"dp2_pp2_vpp2_ep2", "dp2_mbs2", np(4, "dp=2,pp=2,vpp=2,ep=2,mbs=2")},
      });
}

// The references of the MoE families' rows below: the same micro-batches (the balance loss is
// over a micro-batch's tokens), on one process or data-parallel.
const std::map<std::string, std::vector<std::string>> kMoeFamilyRefs = {
    {"single_accum2", {"--threads", "1", "--grad-accum", "2"}},
    {"dp2", np(2, "dp=2,mbs=4")},
    {"dp2_mbs2", np(2, "dp=2,mbs=2")}};

// The MoE families' layouts, each against its reference, and `more` after them.
std::vector<MultiProcGradientMatrixTest::Case> moe_family_rows(
    std::vector<MultiProcGradientMatrixTest::Case> more) {
  std::vector<MultiProcGradientMatrixTest::Case> rows = {
      {"tp2", "single_accum2", np(2, "tp=2,mbs=4")},
      {"tp2_sp", "single_accum2", np(2, "tp=2,sp=on,mbs=4")},
      {"pp2_1f1b", "single_accum2", np(2, "pp=2,mbs=4")},
      {"pp2_vpp2", "single_accum2", np(2, "pp=2,vpp=2,mbs=4")},
      {"tp2_full", "single_accum2", np(2, "tp=2,recompute=full,mbs=4")},
      {"dp2_ep2", "dp2", np(2, "dp=2,ep=2,mbs=4")},
      {"dp2_tp2_ep2", "dp2", np(4, "dp=2,tp=2,ep=2,mbs=4")},
      {"dp2_pp2_ep2", "dp2_mbs2", np(4, "dp=2,pp=2,ep=2,mbs=2")},
      {"dp2_zero3", "dp2", np(2, "dp=2,zero=3,mbs=4")},
  };
  rows.insert(rows.end(), more.begin(), more.end());
  return rows;
}

// Today's MoE families: a small Qwen3-MoE (a dense first layer, 4 SwiGLU experts without
// biases, normalized top-2, dropless, the Switch balance loss, QK-norm), against references of
// the same micro-batches as moe_bert_tiny's: the balance loss is over a micro-batch's tokens.
TEST_F(MultiProcGradientMatrixTest, MoeFamiliesMatchTheirReferencePerTensor) {
  const std::string qwen = dir_.file("qwen3_moe.yaml");
  test::write_text(qwen,
                   "model_type: qwen3_moe\nhidden_size: 64\nnum_hidden_layers: 4\n"
                   "num_attention_heads: 4\nnum_key_value_heads: 2\nhead_dim: 24\n"
                   "intermediate_size: 96\nmoe_intermediate_size: 32\nnum_experts: 4\n"
                   "num_experts_per_tok: 2\nnorm_topk_prob: true\nmlp_only_layers: [0]\n"
                   "output_router_logits: true\nrouter_aux_loss_coef: 0.01\nvocab_size: 256\n"
                   "max_position_embeddings: 64\nseq_length: 64\ntie_word_embeddings: false\n");
  expect_matrix(qwen, kMoeFamilyRefs, moe_family_rows({}));
}

// Shared experts: a small Qwen2-MoE (a shared expert of width 48 scaled by its sigmoid gate,
// 4 routed experts, dropless, the Switch balance loss), on the same layouts and references,
// plus sp with selective recomputation and ZeRO-1. The shared expert splits over tp like a
// dense MLP (also under sp, where its gate's weight sees only a rank's rows) and is whole on
// every ep rank, its gradient reduced over the data-parallel group with the router's.
TEST_F(MultiProcGradientMatrixTest, MoeSharedExpertsMatchTheirReferencePerTensor) {
  const std::string qwen = dir_.file("qwen2_moe.yaml");
  test::write_text(qwen,
                   "model_type: qwen2_moe\nhidden_size: 64\nnum_hidden_layers: 4\n"
                   "num_attention_heads: 4\nnum_key_value_heads: 2\nintermediate_size: 96\n"
                   "moe_intermediate_size: 32\nshared_expert_intermediate_size: 48\n"
                   "num_experts: 4\nnum_experts_per_tok: 2\nmlp_only_layers: [0]\n"
                   "output_router_logits: true\nrouter_aux_loss_coef: 0.01\nvocab_size: 256\n"
                   "max_position_embeddings: 64\nseq_length: 64\ntie_word_embeddings: false\n");
  expect_matrix(qwen, kMoeFamilyRefs,
                moe_family_rows({
                    {"tp2_sp_sel", "single_accum2", np(2, "tp=2,sp=on,recompute=selective,mbs=4")},
                    {"dp2_zero1", "dp2", np(2, "dp=2,zero=1,mbs=4")},
                }));
}

// DeepSeek-V3's selection bias (noaux_tc) on cann-train's own MoE GPT (DeepSeek's configs also
// need MLA): the third step's gradient, after two bias updates at speed 0.05, which move the
// biases well past the spread of the scores and so change the routing. Every layout must
// count the step's loads over the ranks that route distinct tokens and move every copy of a
// bias alike (under ZeRO-3 the shard's). Dropless routing and no balance loss make a token's
// output independent of which tokens share its micro-batch, so the reference is one process;
// a learning rate of 1e-7 keeps the layouts' parameters (whose updates differ in rounding)
// within the tolerance after three steps, while the biases move by the full speed.
TEST_F(MultiProcGradientMatrixTest, MoeExpertBiasMatchesOneProcessPerTensor) {
  const std::string gpt = dir_.file("gpt_noaux.yaml");
  test::write_text(gpt,
                   "architecture: gpt\nhidden_size: 64\nnum_hidden_layers: 4\n"
                   "num_attention_heads: 4\nvocab_size: 256\nseq_length: 64\n"
                   "num_local_experts: 4\nnum_experts_per_tok: 2\nmoe_layer_freq: 2\n"
                   "moe_routing: dropless\nrouter_aux_loss_coef: 0\ntopk_method: noaux_tc\n"
                   "expert_bias_update_speed: 0.05\n");
  const std::vector<std::string> lr = {"--lr", "1e-7"};
  auto with = [&](int n, const std::string& strategy) { return np(n, strategy, lr); };
  expect_matrix(gpt, {{"single", {"--threads", "1", "--lr", "1e-7"}}},
                {
                    {"dp2", "single", with(2, "dp=2")},
                    {"tp2", "single", with(2, "tp=2")},
                    {"tp2_sp", "single", with(2, "tp=2,sp=on")},
                    {"pp2_1f1b", "single", with(2, "pp=2,mbs=2")},
                    {"pp2_vpp2", "single", with(2, "pp=2,vpp=2,mbs=2")},
                    {"tp2_full", "single", with(2, "tp=2,recompute=full")},
                    {"dp2_ep2", "single", with(2, "dp=2,ep=2")},
                    {"dp2_tp2_ep2", "single", with(4, "dp=2,tp=2,ep=2")},
                    {"dp2_pp2_ep2", "single", with(4, "dp=2,pp=2,ep=2,mbs=2")},
                    {"dp2_zero1", "single", with(2, "dp=2,zero=1")},
                    {"dp2_zero2", "single", with(2, "dp=2,zero=2")},
                    {"dp2_zero3", "single", with(2, "dp=2,zero=3")},
                },
                3);
}

// The comparison as a user runs it: within the tolerance exit 0, over it exit 1 with the
// tensor marked; a file that is not a dump is one line and exit 2.
TEST(GradientDumpTest, CompareExitsOneOverTheToleranceAndTwoOnMalformedFiles) {
  test::TempDir dir;
  ckpt::SafeTensors a;
  a.metadata["step"] = "1";
  a.tensors = {{"w", {2, 2}, {1.0f, -2.0f, 3.0f, 4.0f}}, {"b", {3}, {0.5f, 0.25f, 0.0f}}};
  ckpt::SafeTensors b = a;
  b.tensors[1].data[2] = 0.01f;  // 2% of b's largest entry
  ASSERT_TRUE(ckpt::write_safetensors(dir.file("a.safetensors"), a).ok());
  ASSERT_TRUE(ckpt::write_safetensors(dir.file("b.safetensors"), b).ok());
  auto back = ckpt::read_safetensors(dir.file("a.safetensors"));
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->tensors.size(), 2u);
  EXPECT_EQ(back->tensors[0].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(back->tensors[1].data, a.tensors[1].data);
  EXPECT_EQ(back->metadata.at("step"), "1");

  auto same = test::run_cann({"debug", "grads", dir.file("a.safetensors"), "--compare",
                              dir.file("a.safetensors"), "--tolerance", "1e-6"});
  EXPECT_EQ(same.exit_code, 0) << same.output;
  EXPECT_NE(same.output.find("0 of 2 tensors over"), std::string::npos) << same.output;
  auto over = test::run_cann({"debug", "grads", dir.file("b.safetensors"), "--compare",
                              dir.file("a.safetensors"), "--tolerance", "1e-3"});
  EXPECT_EQ(over.exit_code, 1) << over.output;
  EXPECT_NE(over.output.find("1 of 2 tensors over"), std::string::npos) << over.output;
  EXPECT_NE(over.output.find("(b)"), std::string::npos) << over.output;

  std::string bytes = test::read_text(dir.file("a.safetensors"));
  test::write_text(dir.file("cut.safetensors"), bytes.substr(0, bytes.size() - 4));
  auto cut = test::run_cann({"debug", "grads", dir.file("cut.safetensors")});
  EXPECT_EQ(cut.exit_code, 2) << cut.output;
  EXPECT_NE(cut.output.find("data_offsets do not fit"), std::string::npos) << cut.output;
  auto other =
      test::run_cann({"debug", "grads", dir.file("a.safetensors"), "--compare", "/dev/null"});
  EXPECT_NE(other.exit_code, 0) << other.output;

  // --dump-grads where the full gradient does not exist is refused before training.
  auto topk = test::run_cann(test::RunArgs()
                                 .steps(1)
                                 .nproc(2)
                                 .flag("--compress", "topk:0.1")
                                 .flag("--dump-grads", dir.file("z.safetensors")));
  EXPECT_EQ(topk.exit_code, 2) << topk.output;
  EXPECT_NE(topk.output.find("--compress topk:0.1 replaces"), std::string::npos) << topk.output;
}

}  // namespace
}  // namespace cann
