// Tensor and sequence parallelism inside the model, ranks as threads over shared-memory groups:
// for gpt, bert, grouped-query attention, MoE bert and gpt (under sp too, with dropped tokens),
// an odd vocabulary (padded shards) and an awkward tp of 3, the tp ranks' losses equal the
// single-process loss and their gradient shards, placed back into full tensors, equal the
// single-process gradients tensor by tensor, over two accumulated micro-batches. Also: the shard
// maps round-trip, and splits that do not divide the model are refused with the dimension named.
//
// Tolerance: the split changes only the fp32 summation order (partial GEMM sums added by the
// all-reduce, per-row log-sum-exp assembled from slices). Observed deviations are ~1e-7 of
// the tensor's largest gradient; 2e-5 (relative to that largest entry, per tensor) leaves
// room and still fails on any real error (a missing reduction or a misplaced shard is off by
// O(1) relative).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "comm_test_util.h"
#include "core/rng.h"
#include "core/threads.h"
#include "custom_ops.h"
#include "model/model.h"
#include "model/param_table.h"
#include "model/spec.h"
#include "model_grad_check.h"
#include "parallel/tp_comm.h"

namespace cann {
namespace {

using model::Model;
using model::ModelSpec;

ModelSpec spec_from(const std::string& yaml) {
  auto s = model::parse_model_spec(yaml, "test.yaml");
  EXPECT_TRUE(s.ok()) << s.status().message();
  return *s;
}

const char kGpt[] =
    "architecture: gpt\nhidden_size: 32\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
    "vocab_size: 61\nseq_length: 16\n";
const char kGqa[] =
    "architecture: gpt\nhidden_size: 32\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
    "num_key_value_heads: 2\nvocab_size: 64\nseq_length: 16\n";
const char kBert[] =
    "architecture: bert\nhidden_size: 32\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
    "vocab_size: 65\nseq_length: 16\n";
const char kMoeBert[] =
    "architecture: bert\nhidden_size: 32\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
    "vocab_size: 65\nseq_length: 16\nnum_local_experts: 4\nnum_experts_per_tok: 2\n"
    "moe_layer_freq: 2\n";
// Capacity factor 1.0 with top-2 of 8 experts: assignments are dropped, and which ones depends
// on the order of the tokens (as in expert_parallel_test).
const char kMoeGpt[] =
    "architecture: gpt\nhidden_size: 32\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
    "vocab_size: 64\nseq_length: 16\nnum_local_experts: 8\nnum_experts_per_tok: 2\n"
    "capacity_factor: 1.0\nrouter_aux_loss_coef: 0.05\n";
const char kSixHeads[] =
    "architecture: gpt\nhidden_size: 48\nnum_hidden_layers: 2\nnum_attention_heads: 6\n"
    "vocab_size: 50\nseq_length: 12\n";

using test::Batch;

std::vector<Batch> make_batches(const ModelSpec& s, int count, int B, int T) {
  Rng rng(4242);
  std::vector<Batch> out(count);
  for (Batch& b : out) b = test::make_batch(s, B, T, rng);
  return out;
}

struct Result {
  std::vector<double> losses;
  std::vector<float> grads;  // in the full (tp = 1) layout
};

constexpr int kB = 2;
// Sequence length of a case: the spec's, or shorter for the shipped models (their 128 tokens
// would only make the test slower).
int seq_of(const ModelSpec& s) {
  return std::min(s.seq_length, 24);
}
constexpr float kScale = 0.5f;  // two micro-batches averaged, as the trainer does

// GPT-2 initialization with every bias and norm shift drawn too (they start at zero, which
// would hide a row-parallel bias added by every rank instead of one).
std::vector<float> initial_params(const ModelSpec& s) {
  auto m = Model::create(s, 1, s.seq_length);
  EXPECT_TRUE(m.ok()) << m.status().message();
  (*m)->init_params(11);
  std::vector<float> p((*m)->params(), (*m)->params() + (*m)->num_floats());
  Rng rng(5);
  for (const auto& t : (*m)->table().tensors())
    if (t.shape.size() == 1)
      for (size_t i = 0; i < t.numel; ++i) p[t.offset + i] += 0.1f * rng.normal();
  return p;
}

Result run_single(const ModelSpec& s, const std::vector<Batch>& batches) {
  auto m = Model::create(s, kB, seq_of(s));
  EXPECT_TRUE(m.ok()) << m.status().message();
  const std::vector<float> init = initial_params(s);
  std::copy(init.begin(), init.end(), (*m)->params());
  (*m)->zero_grads();
  Result r;
  for (const Batch& b : batches) {
    r.losses.push_back((*m)->forward(b.inputs.data(), b.targets.data(), kB, seq_of(s)).loss);
    (*m)->backward(kScale);
  }
  r.grads.assign((*m)->grads(), (*m)->grads() + (*m)->num_floats());
  return r;
}

// Every tp rank's losses, and its gradient shards placed into a full-layout buffer per rank.
std::vector<Result> run_tp(const ModelSpec& s, const std::vector<Batch>& batches, int tp, bool sp) {
  const model::ParamTable full = model::build_param_table(s);
  const std::vector<float> init = initial_params(s);
  std::vector<Result> out(tp);
  test::run_group("shm", tp, [&](int rank, comm::Group& g) {
    parallel::GroupTensorParallelComm comm(g);
    auto m = Model::create(s, kB, seq_of(s), {rank, tp, sp, &comm});
    ASSERT_TRUE(m.ok()) << m.status().message();
    const model::ParamTable& table = (*m)->table();
    // init_params gives exactly this rank's shards of the one-process initialization.
    (*m)->init_params(11);
    auto single = Model::create(s, 1, s.seq_length);
    (*single)->init_params(11);
    std::vector<float> want(table.total_floats(), 0.0f);
    for (size_t i = 0; i < table.tensors().size(); ++i)
      model::copy_tp_shard(table.at(i), (*single)->params() + full.at(i).offset,
                           want.data() + table.at(i).offset, rank, tp);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), (*m)->params()));
    for (size_t i = 0; i < table.tensors().size(); ++i)
      model::copy_tp_shard(table.at(i), init.data() + full.at(i).offset,
                           (*m)->params() + table.at(i).offset, rank, tp);
    (*m)->zero_grads();
    Result& r = out[rank];
    for (const Batch& b : batches) {
      r.losses.push_back((*m)->forward(b.inputs.data(), b.targets.data(), kB, seq_of(s)).loss);
      (*m)->backward(kScale);
    }
    ASSERT_TRUE((*m)->tp_status().ok()) << (*m)->tp_status().message();
    r.grads.assign(full.total_floats(), 0.0f);
    for (size_t i = 0; i < table.tensors().size(); ++i)
      model::place_tp_shard(table.at(i), (*m)->grads() + table.at(i).offset,
                            r.grads.data() + full.at(i).offset, rank, tp);
  });
  return out;
}

// Max deviation per tensor relative to its largest reference entry; replicated tensors must
// match on every rank, split ones are assembled from all ranks' shards.
void expect_equivalent(const char* label, const ModelSpec& s, int tp, bool sp) {
  set_num_threads(1);
  const auto batches = make_batches(s, 2, kB, seq_of(s));
  const Result ref = run_single(s, batches);
  const std::vector<Result> ranks = run_tp(s, batches, tp, sp);
  const std::string what = std::string(label) + " tp=" + std::to_string(tp) + (sp ? " sp" : "");
  double worst_loss = 0, worst_grad = 0;
  for (const Result& r : ranks) {
    ASSERT_EQ(r.losses.size(), ref.losses.size()) << what;
    for (size_t i = 0; i < r.losses.size(); ++i)
      worst_loss = std::max(worst_loss, std::abs(r.losses[i] - ref.losses[i]));
  }
  const model::ParamTable full = model::build_param_table(s);
  for (const auto& t : full.tensors()) {
    float scale = 1e-12f;
    for (size_t i = 0; i < t.numel; ++i) scale = std::max(scale, std::abs(ref.grads[t.offset + i]));
    double dev = 0;
    for (size_t i = 0; i < t.numel; ++i) {
      const float want = ref.grads[t.offset + i];
      float got = 0;
      if (t.tp_split == model::TpSplit::kReplicated) {
        for (const Result& r : ranks)
          dev = std::max(dev, static_cast<double>(std::abs(r.grads[t.offset + i] - want)));
        continue;
      }
      // Each element of a split tensor lives on exactly one rank; the others left it 0.
      for (const Result& r : ranks) got += r.grads[t.offset + i];
      dev = std::max(dev, static_cast<double>(std::abs(got - want)));
    }
    worst_grad = std::max(worst_grad, dev / scale);
    EXPECT_LT(dev / scale, 2e-5) << what << " tensor " << t.name << " (max |g| " << scale << ")";
  }
  EXPECT_LT(worst_loss, 1e-5) << what;
  std::printf("%-10s tp=%d sp=%-3s max loss deviation %.2e, max gradient deviation %.2e\n", label,
              tp, sp ? "on" : "off", worst_loss, worst_grad);
}

void expect_equivalent(const char* label, const std::string& yaml, int tp, bool sp) {
  expect_equivalent(label, spec_from(yaml), tp, sp);
}

ModelSpec shipped(const char* name) {
  auto s = model::load_model_spec(name);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return *s;
}

// The shipped demo models: gpt_tiny's vocabulary of 256 is padded over tp = 3, and
// moe_bert_tiny's 257 over tp = 2.
TEST(TensorParallelTest, ShippedModelsMatchOneProcess) {
  expect_equivalent("gpt_tiny", shipped("gpt_tiny"), 2, false);
  expect_equivalent("gpt_tiny", shipped("gpt_tiny"), 2, true);
  expect_equivalent("gpt_tiny", shipped("gpt_tiny"), 3, false);
  expect_equivalent("gpt_tiny", shipped("gpt_tiny"), 3, true);
  expect_equivalent("moe_bert_tiny", shipped("moe_bert_tiny"), 2, false);
}

TEST(TensorParallelTest, GptMatchesOneProcess) {
  expect_equivalent("gpt", kGpt, 2, false);
  expect_equivalent("gpt", kGpt, 4, false);
}

TEST(TensorParallelTest, GptWithSequenceParallelMatchesOneProcess) {
  expect_equivalent("gpt", kGpt, 2, true);
  expect_equivalent("gpt", kGpt, 4, true);
}

TEST(TensorParallelTest, GroupedQueryAttentionMatchesOneProcess) {
  expect_equivalent("gqa", kGqa, 2, false);
  expect_equivalent("gqa", kGqa, 2, true);
}

TEST(TensorParallelTest, BertMatchesOneProcess) {
  expect_equivalent("bert", kBert, 2, false);
  expect_equivalent("bert", kBert, 4, true);
}

TEST(TensorParallelTest, MoeBertDensePartsSplitExpertsReplicated) {
  expect_equivalent("moe_bert", kMoeBert, 2, false);
}

// Under sp every rank routes all tokens of the micro-batch and computes the experts for its own
// sequence shard: routing, drops and the aux loss are the single process's, and the expert and
// router gradients (partial per rank) are summed over the group.
TEST(TensorParallelTest, MoeBertWithSequenceParallelMatchesOneProcess) {
  expect_equivalent("moe_bert_tiny", shipped("moe_bert_tiny"), 2, true);
  expect_equivalent("moe_bert", kMoeBert, 2, true);
  expect_equivalent("moe_gpt", kMoeGpt, 2, true);
  expect_equivalent("moe_gpt", kMoeGpt, 4, true);
  // The MoE gradients are summed by one all-reduce onto what rank 0 held: every rank must end
  // with the same bits, or the replicas' experts would drift apart step by step.
  const ModelSpec s = spec_from(kMoeGpt);
  const std::vector<Result> ranks = run_tp(s, make_batches(s, 2, kB, seq_of(s)), 2, true);
  const model::ParamTable full = model::build_param_table(s);
  for (const auto& t : full.tensors()) {
    if (t.name.find(".moe.") == std::string::npos) continue;
    EXPECT_TRUE(std::equal(ranks[0].grads.begin() + t.offset,
                           ranks[0].grads.begin() + t.offset + t.numel,
                           ranks[1].grads.begin() + t.offset))
        << t.name;
  }
  // The moe_gpt cases only test token order if tokens are really dropped.
  auto m = Model::create(s, kB, seq_of(s));
  ASSERT_TRUE(m.ok());
  (*m)->init_params(11);
  const Batch b = make_batches(s, 1, kB, seq_of(s))[0];
  (*m)->forward(b.inputs.data(), b.targets.data(), kB, seq_of(s));
  EXPECT_GT((*m)->dropped_assignments(), 0);
}

// User activations follow their declared distribution rule: an elementwise one runs on each
// rank's slice of the hidden units, a full-row one on whole rows gathered over the tp ranks;
// either way every rank's loss and gradients are one process's.
TEST(TensorParallelTest, UserActivationsFollowTheirDistributionRule) {
  test::register_test_activations();
  const std::string gpt =
      "architecture: gpt\nhidden_size: 48\nnum_hidden_layers: 2\n"
      "num_attention_heads: 6\nvocab_size: 64\nseq_length: 16\n";
  expect_equivalent("rms_silu", gpt + "hidden_act: rms_silu\n", 2, false);
  expect_equivalent("rms_silu", gpt + "hidden_act: rms_silu\n", 2, true);
  expect_equivalent("rms_silu", gpt + "hidden_act: rms_silu\n", 3, false);
  expect_equivalent("sq_relu", gpt + "hidden_act: squared_relu\n", 3, false);
  // The rule is what makes it right: the same full-row op declared elementwise normalizes each
  // rank's slice by that slice's own mean square, and the tp run leaves one process's losses.
  static std::once_flag once;
  std::call_once(once, [] {
    model::ActivationOp wrong = *model::find_activation("rms_silu");
    wrong.name = "rms_silu_declared_elementwise";
    wrong.rule = model::DistributionRule::kElementwise;
    ASSERT_TRUE(model::register_activation(wrong).ok());
  });
  const ModelSpec s = spec_from(gpt + "hidden_act: rms_silu_declared_elementwise\n");
  const auto batches = make_batches(s, 1, kB, seq_of(s));
  const double one = run_single(s, batches).losses[0];
  const double split = run_tp(s, batches, 2, false)[0].losses[0];
  std::printf("declared elementwise: loss %.6f on one process, %.6f split over 2 ranks\n", one,
              split);
  EXPECT_GT(std::abs(one - split), 1e-4);
}

TEST(TensorParallelTest, AwkwardTpOfThree) {
  expect_equivalent("gpt_6head", kSixHeads, 3, false);
  expect_equivalent("gpt_6head", kSixHeads, 3, true);
}

TEST(TensorParallelTest, ShardsRoundTripAndCoverEveryElementOnce) {
  for (const char* yaml : {kGpt, kGqa, kMoeBert, kSixHeads}) {
    const ModelSpec s = spec_from(yaml);
    const model::ParamTable full = model::build_param_table(s);
    std::vector<float> src(full.total_floats());
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i % 9973) + 1.0f;
    for (int tp : {1, 2, 3, 4}) {
      if (!model::check_tp_divides(s, tp).ok()) continue;
      std::vector<float> back(src.size(), 0.0f);
      std::vector<int> hits(src.size(), 0);
      for (int r = 0; r < tp; ++r) {
        const model::ParamTable mine = model::build_param_table(s, tp);
        ASSERT_EQ(mine.tensors().size(), full.tensors().size());
        std::vector<float> shard(mine.total_floats());
        for (size_t i = 0; i < full.tensors().size(); ++i) {
          const auto& t = mine.at(i);
          model::copy_tp_shard(t, src.data() + full.at(i).offset, shard.data() + t.offset, r, tp);
          std::vector<float> one(full.at(i).numel, 0.0f);
          model::place_tp_shard(t, shard.data() + t.offset, one.data(), r, tp);
          for (size_t k = 0; k < one.size(); ++k)
            if (one[k] != 0.0f) {
              back[full.at(i).offset + k] = one[k];
              ++hits[full.at(i).offset + k];
            }
        }
      }
      for (const auto& t : full.tensors())
        for (size_t k = 0; k < t.numel; ++k) {
          ASSERT_EQ(back[t.offset + k], src[t.offset + k]) << t.name << " tp=" << tp;
          const int want = t.tp_split == model::TpSplit::kReplicated ? tp : 1;
          ASSERT_EQ(hits[t.offset + k], want) << t.name << " tp=" << tp;
        }
    }
  }
  // The fused QKV shard of rank 1 of 2 (4 heads, 2 kv heads, head size 8) holds q rows 16..31,
  // k rows 40..47 and v rows 56..63 of the full weight.
  const ModelSpec s = spec_from(kGqa);
  const model::ParamTable mine = model::build_param_table(s, 2);
  const auto& qkv = mine.at(*mine.find("h.0.attn.qkv.w"));
  EXPECT_EQ(qkv.shape, (std::vector<int64_t>{32, 32}));
  std::vector<float> full(64 * 32), shard(32 * 32);
  for (size_t i = 0; i < full.size(); ++i) full[i] = static_cast<float>(i / 32);  // row index
  model::copy_tp_shard(qkv, full.data(), shard.data(), 1, 2);
  EXPECT_EQ(shard[0], 16.0f);
  EXPECT_EQ(shard[15 * 32], 31.0f);
  EXPECT_EQ(shard[16 * 32], 40.0f);
  EXPECT_EQ(shard[24 * 32], 56.0f);
  // An odd vocabulary: 61 rows over 2 ranks is 31 per rank, the last one padded.
  const model::ParamTable gpt2 = model::build_param_table(spec_from(kGpt), 2);
  EXPECT_EQ(gpt2.at(*gpt2.find("wte")).shape[0], 31);
}

// Sequence parallelism keeps 1/tp of the residual-stream and layernorm rows: for gpt_tiny at
// 4 x 64 tokens those are 10 (N, C) buffers per layer of the 4 layers' ~25, so activations
// shrink by well over 10% at tp = 2.
TEST(TensorParallelTest, SequenceParallelHoldsFewerActivations) {
  test::run_group("shm", 2, [&](int rank, comm::Group& g) {
    parallel::GroupTensorParallelComm comm(g);
    const ModelSpec s = shipped("gpt_tiny");
    auto plain = Model::create(s, 4, 64, {rank, 2, false, &comm});
    auto sp = Model::create(s, 4, 64, {rank, 2, true, &comm});
    ASSERT_TRUE(plain.ok() && sp.ok());
    EXPECT_LT((*sp)->activation_bytes(), 0.9 * (*plain)->activation_bytes())
        << (*sp)->activation_bytes() << " vs " << (*plain)->activation_bytes();
  });
}

TEST(TensorParallelTest, SplitsThatDoNotDivideAreRefused) {
  const Status heads = model::check_tp_divides(spec_from(kGpt), 3);
  ASSERT_FALSE(heads.ok());
  EXPECT_NE(heads.message().find("tp=3 does not divide num_attention_heads 4"), std::string::npos)
      << heads.message();
  const Status kv = model::check_tp_divides(spec_from(kGqa), 4);
  ASSERT_FALSE(kv.ok());
  EXPECT_NE(kv.message().find("num_key_value_heads 2"), std::string::npos) << kv.message();
  // Model::create refuses too, and MoE with sequence parallelism and expert parallelism (which
  // takes no token shard) is refused by name.
  test::run_group("shm", 2, [&](int rank, comm::Group& g) {
    parallel::GroupTensorParallelComm comm(g);
    auto moe_sp =
        Model::create(spec_from(kMoeBert), 2, 16, {rank, 2, true, &comm}, {}, {rank, 2, nullptr});
    ASSERT_FALSE(moe_sp.ok());
    EXPECT_NE(moe_sp.status().message().find("expert parallelism ep=2"), std::string::npos)
        << moe_sp.status().message();
  });
}

}  // namespace
}  // namespace cann
