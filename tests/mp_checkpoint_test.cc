// Checkpoints of model-parallel runs: every rank's part of the model placed into the whole
// model's layout and sliced back (in process, over tensor, pipeline and expert splits), and
// through the binary: a tp / pp / ep run's checkpoint (also ep with tp or pp) is the whole
// model (it matches the single-process or data-parallel run's checkpoint at the same step),
// resumes exactly, and loads under another strategy.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "model/param_table.h"
#include "model/spec.h"
#include "run_args.h"
#include "test_util.h"

namespace cann {
namespace {

using model::ParamTable;
using model::ShardPlace;
using model::TensorInfo;

// Every (stage, tp rank, ep rank) of a split places its owned tensors into a zero buffer:
// together they rebuild the whole model, and slicing the whole model gives each part back; so
// do the strided groups of the same runs.
void expect_round_trip(const model::ModelSpec& spec, int tp, int ep, std::vector<int> bounds) {
  const ParamTable full = model::build_param_table(spec);
  std::vector<float> whole(full.total_floats());
  for (size_t i = 0; i < whole.size(); ++i) whole[i] = static_cast<float>(i % 1000) + 0.5f;
  std::vector<float> rebuilt(whole.size(), 0.0f), grouped(whole.size(), 0.0f);
  size_t groups = 0, runs = 0;
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    for (int tr = 0; tr < tp; ++tr) {
      for (int er = 0; er < ep; ++er) {
        const ParamTable local =
            model::build_stage_param_table(spec, tp, bounds[s], bounds[s + 1], ep);
        // build_stage_param_table is rank-independent in shape; the data is this rank's.
        std::vector<float> part(local.total_floats(), -1.0f);
        const ShardPlace at{tr, tp, er, ep, nullptr};
        model::slice_from_full(full, whole.data(), local, at, part.data());
        auto owned = [&](const TensorInfo& t) {
          if (t.name == "wte" && t.layer >= 0) return false;
          return t.expert ? tr == 0 : (t.tp_split != model::TpSplit::kReplicated || tr == 0);
        };
        model::place_into_full(local, part.data(), full, at, owned, rebuilt.data());
        // The same placement through the strided groups an elastic node's snapshot carries.
        const std::vector<int64_t> g = model::full_run_groups(local, full, at, owned);
        ASSERT_TRUE(
            model::place_run_groups(g, part.data(), part.size(), grouped.data(), grouped.size()));
        groups += g.size() / 6;
        model::for_each_full_run(local, full, at, owned, [&](size_t, size_t, size_t) { ++runs; });
        // A group that reaches outside either buffer is refused.
        std::vector<int64_t> bad = g;
        bad[bad.size() - 6] = static_cast<int64_t>(part.size());  // the last group past the end
        EXPECT_FALSE(
            model::place_run_groups(bad, part.data(), part.size(), grouped.data(), grouped.size()));
      }
    }
  }
  // Alignment padding between tensors is not a tensor: compare tensor by tensor.
  for (const TensorInfo& t : full.tensors())
    for (size_t j = 0; j < t.numel; ++j) {
      ASSERT_EQ(rebuilt[t.offset + j], whole[t.offset + j])
          << spec.name << " tp=" << tp << " ep=" << ep << ": " << t.name << "[" << j << "]";
      ASSERT_EQ(grouped[t.offset + j], whole[t.offset + j])
          << spec.name << " tp=" << tp << " ep=" << ep << ": " << t.name << "[" << j << "]";
    }
  // A row split's rows are one group: far fewer groups than runs once tp > 1.
  if (tp > 1) {
    EXPECT_LT(groups * 4, runs) << spec.name << " tp=" << tp;
  }
}

TEST(ModelParallelCheckpointTest, PartsRebuildTheWholeModel) {
  auto gpt = model::load_model_spec("gpt_tiny");
  auto moe = model::load_model_spec("moe_bert_tiny");
  ASSERT_TRUE(gpt.ok() && moe.ok());
  const int L = gpt->num_hidden_layers;
  expect_round_trip(*gpt, 1, 1, {0, L});
  expect_round_trip(*gpt, 2, 1, {0, L});
  expect_round_trip(*gpt, 3, 1, {0, L});
  expect_round_trip(*gpt, 1, 1, {0, 1, L});
  expect_round_trip(*gpt, 2, 1, {0, 2, 3, L});
  const int Lm = moe->num_hidden_layers;
  expect_round_trip(*moe, 1, 2, {0, Lm});
  expect_round_trip(*moe, 2, 1, {0, Lm});
  expect_round_trip(*moe, 1, 1, {0, 1, Lm});
  // Experts under tp and pp: every tp rank holds the same experts (tp rank 0 owns them), each
  // stage its own layers' experts.
  expect_round_trip(*moe, 2, 2, {0, Lm});
  expect_round_trip(*moe, 1, 2, {0, 2, Lm});
  expect_round_trip(*moe, 2, 4, {0, 1, Lm});
}

// ---- Through the binary -------------------------------------------------------------------

class MultiProcModelParallelCheckpointTest : public ::testing::Test {
 protected:
  void train(const std::string& model, const std::string& ckpt, std::vector<std::string> extra,
             int steps = 8, int batch = 8) {
    // comparison_run's settings with this batch.
    const auto r = test::run_cann(test::RunArgs()
                                      .model(model)
                                      .seq_len(64)
                                      .steps(steps)
                                      .batch_size(batch)
                                      .eval_every(0)
                                      .sample_tokens(0)
                                      .quiet()
                                      .flag("--checkpoint-dir", dir_.file(ckpt))
                                      .flags(extra),
                                  240);
    ASSERT_EQ(r.exit_code, 0) << ckpt << ": " << r.output;
  }
  ckpt::LoadedCheckpoint read(const std::string& ckpt, int step) {
    char name[32];
    std::snprintf(name, sizeof(name), "/step-%08d", step);
    auto c = ckpt::read_checkpoint(dir_.file(ckpt) + name);
    EXPECT_TRUE(c.ok()) << c.status().message();
    return c.ok() ? *c : ckpt::LoadedCheckpoint{};
  }
  // Largest |a - b| / (max |a| + tiny) over a section.
  static double max_rel_diff(const ckpt::LoadedCheckpoint& a, const ckpt::LoadedCheckpoint& b,
                             const char* section) {
    const ckpt::Section* x = a.find(section);
    const ckpt::Section* y = b.find(section);
    if (x == nullptr || y == nullptr || x->data.size() != y->data.size()) return INFINITY;
    const float* p = reinterpret_cast<const float*>(x->data.data());
    const float* q = reinterpret_cast<const float*>(y->data.data());
    double worst = 0, scale = 1e-30;
    for (size_t i = 0; i < x->data.size() / sizeof(float); ++i) {
      worst = std::max(worst, static_cast<double>(std::abs(p[i] - q[i])));
      scale = std::max(scale, static_cast<double>(std::abs(p[i])));
    }
    return worst / scale;
  }
  test::TempDir dir_;
};

// The checkpoint of a split run is the whole model: it matches the single-process run's at the
// same step. Tolerance: the runs follow each other to ~1e-5 relative in the loss (fp32
// summation order, model_parallel_test.cc); after 8 Adam steps the parameters differ by a few
// lr-sized steps at most in the worst element, 1e-3 of the largest parameter. A misplaced
// shard (a transposed split, a wrong expert block, the tied copy summed twice) is off by the
// parameters' own size.
TEST_F(MultiProcModelParallelCheckpointTest, SplitRunsSaveTheWholeModel) {
  train("gpt_tiny", "single", {"--threads", "1", "--strategy", "mbs=8"});
  const auto single = read("single", 8);
  struct Case {
    std::string name;
    std::vector<std::string> flags;
  };
  for (const Case& c : std::vector<Case>{
           {"tp2", {"--nproc-per-node", "2", "--strategy", "tp=2"}},
           {"pp2", {"--nproc-per-node", "2", "--strategy", "pp=2,mbs=8"}},
           {"dp2_tp2", {"--nproc-per-node", "4", "--strategy", "dp=2,tp=2"}},
           {"dp2_tp2_zero3", {"--nproc-per-node", "4", "--strategy", "dp=2,tp=2,zero=3"}},
       }) {
    train("gpt_tiny", c.name, c.flags);
    const auto split = read(c.name, 8);
    for (const char* s : {"params", "adam_m", "adam_v"})
      EXPECT_LT(max_rel_diff(single, split, s), 1e-3) << c.name << " " << s;
  }
  // Expert parallelism against the data-parallel run of the same dp and mbs (each rank routes
  // its own micro-batch either way).
  train("moe_bert_tiny", "moe_dp2", {"--nproc-per-node", "2", "--strategy", "dp=2"});
  train("moe_bert_tiny", "moe_ep2", {"--nproc-per-node", "2", "--strategy", "dp=2,ep=2"});
  train("moe_bert_tiny", "moe_tp2_ep2", {"--nproc-per-node", "4", "--strategy", "dp=2,tp=2,ep=2"});
  train("moe_bert_tiny", "moe_dp2_mbs2", {"--nproc-per-node", "2", "--strategy", "dp=2,mbs=2"});
  train("moe_bert_tiny", "moe_pp2_ep2",
        {"--nproc-per-node", "4", "--strategy", "dp=2,pp=2,ep=2,mbs=2"});
  for (const char* s : {"params", "adam_m", "adam_v"}) {
    EXPECT_LT(max_rel_diff(read("moe_dp2", 8), read("moe_ep2", 8), s), 1e-3) << s;
    EXPECT_LT(max_rel_diff(read("moe_dp2", 8), read("moe_tp2_ep2", 8), s), 1e-3) << s;
    EXPECT_LT(max_rel_diff(read("moe_dp2_mbs2", 8), read("moe_pp2_ep2", 8), s), 1e-3) << s;
  }
}

// Stopped at step 4 and resumed, a split run ends where the uninterrupted one ends (the same
// processes, the same summation order: exactly); resumed under another strategy it ends close.
TEST_F(MultiProcModelParallelCheckpointTest, ResumesExactlyAndUnderAnotherStrategy) {
  const std::vector<std::string> tp2 = {"--nproc-per-node", "2", "--strategy", "tp=2"};
  train("gpt_tiny", "straight", tp2);
  auto part = tp2;
  part.insert(part.end(), {"--exit-interval", "4"});
  train("gpt_tiny", "resumed", part);
  part = tp2;
  part.push_back("--resume");
  train("gpt_tiny", "resumed", part);
  const auto a = read("straight", 8);
  const auto b = read("resumed", 8);
  for (const char* s : {"params", "adam_m", "adam_v"})
    EXPECT_EQ(max_rel_diff(a, b, s), 0.0) << s;
  // tp=2's step-4 checkpoint, continued as pp=2 and as one process.
  for (const auto& flags : std::vector<std::vector<std::string>>{
           {"--nproc-per-node", "2", "--strategy", "pp=2,mbs=8"},
           {"--threads", "1", "--strategy", "mbs=8"}}) {
    const std::string name = flags.front() == "--nproc-per-node" ? "as_pp2" : "as_single";
    ASSERT_EQ(test::run_command({"/bin/sh", "-c",
                                 "mkdir -p '" + dir_.file(name) + "' && cp -r '" +
                                     dir_.file("resumed") + "/step-00000004' '" +
                                     dir_.file(name) + "/'"})
                  .exit_code,
              0);
    auto more = flags;
    more.push_back("--resume");
    train("gpt_tiny", name, more);
    EXPECT_LT(max_rel_diff(a, read(name, 8), "params"), 1e-3) << name;
  }
}

// The same with experts sharded inside a pipeline: dp=2 x pp=2 with ep=2 resumes exactly, and
// its step-4 checkpoint continues as dp=2 x tp=2 with ep=2 (the same micro-batches of 2, so
// the same routing) close to the uninterrupted run.
TEST_F(MultiProcModelParallelCheckpointTest, ExpertPipelineResumesExactlyAndAsTensorParallel) {
  const std::vector<std::string> ep_pp = {"--nproc-per-node", "4", "--strategy",
                                          "dp=2,pp=2,ep=2,mbs=2"};
  train("moe_bert_tiny", "straight", ep_pp);
  auto part = ep_pp;
  part.insert(part.end(), {"--exit-interval", "4"});
  train("moe_bert_tiny", "resumed", part);
  part = ep_pp;
  part.push_back("--resume");
  train("moe_bert_tiny", "resumed", part);
  const auto a = read("straight", 8);
  for (const char* s : {"params", "adam_m", "adam_v"})
    EXPECT_EQ(max_rel_diff(a, read("resumed", 8), s), 0.0) << s;
  ASSERT_EQ(test::run_command({"/bin/sh", "-c",
                               "mkdir -p '" + dir_.file("as_tp2") + "' && cp -r '" +
                                   dir_.file("resumed") + "/step-00000004' '" +
                                   dir_.file("as_tp2") + "/'"})
                .exit_code,
            0);
  train("moe_bert_tiny", "as_tp2",
        {"--nproc-per-node", "4", "--strategy", "dp=2,tp=2,ep=2,mbs=2", "--resume"});
  EXPECT_LT(max_rel_diff(a, read("as_tp2", 8), "params"), 1e-3);
}

// Expert parallelism over ranks that do not divide the experts (moe_bert_tiny's 4 over 3: 2, 1
// and 1 a rank, two ranks keeping an empty slot): the checkpoint is the whole model, matching
// the data-parallel run of the same micro-batches; and the data-parallel step-4 checkpoint,
// sliced onto the uneven slots, continues close to the uninterrupted run.
TEST_F(MultiProcModelParallelCheckpointTest, ExpertsOverRanksThatDoNotDivideThem) {
  const std::vector<std::string> dp3 = {"--nproc-per-node", "3", "--strategy", "dp=3"};
  const std::vector<std::string> ep3 = {"--nproc-per-node", "3", "--strategy", "dp=3,ep=3"};
  train("moe_bert_tiny", "dp3", dp3, 8, 12);
  train("moe_bert_tiny", "ep3", ep3, 8, 12);
  const auto a = read("dp3", 8);
  for (const char* s : {"params", "adam_m", "adam_v"})
    EXPECT_LT(max_rel_diff(a, read("ep3", 8), s), 1e-3) << s;
  auto part = dp3;
  part.insert(part.end(), {"--exit-interval", "4"});
  train("moe_bert_tiny", "as_ep3", part, 8, 12);
  auto more = ep3;
  more.push_back("--resume");
  train("moe_bert_tiny", "as_ep3", more, 8, 12);
  EXPECT_LT(max_rel_diff(a, read("as_ep3", 8), "params"), 1e-3);
}

// DeepSeek-V3's expert selection bias is model state: an ep=2 run stopped at step 4 and
// resumed ends exactly where the uninterrupted one ends, and the checkpoint's biases have
// moved by whole steps of the update speed (0.05 here), towards balance.
TEST_F(MultiProcModelParallelCheckpointTest, ExpertBiasResumesExactly) {
  const std::string yaml =
      "architecture: gpt\nhidden_size: 64\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
      "vocab_size: 256\nseq_length: 64\nnum_local_experts: 4\nnum_experts_per_tok: 2\n"
      "moe_routing: dropless\nrouter_aux_loss_coef: 0\ntopk_method: noaux_tc\n"
      "expert_bias_update_speed: 0.05\n";
  const std::string model = dir_.file("gpt_noaux.yaml");
  test::write_text(model, yaml);
  const std::vector<std::string> ep = {"--nproc-per-node", "2", "--strategy", "dp=2,ep=2"};
  train(model, "straight", ep);
  auto part = ep;
  part.insert(part.end(), {"--exit-interval", "4"});
  train(model, "resumed", part);
  part = ep;
  part.push_back("--resume");
  train(model, "resumed", part);
  const auto a = read("straight", 8);
  for (const char* s : {"params", "adam_m", "adam_v"})
    EXPECT_EQ(max_rel_diff(a, read("resumed", 8), s), 0.0) << s;
  auto spec = model::parse_model_spec(yaml, "gpt_noaux.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  const ParamTable table = model::build_param_table(*spec);
  const float* p = reinterpret_cast<const float*>(a.find("params")->data.data());
  int moved = 0;
  for (const TensorInfo& t : table.tensors()) {
    if (!t.name.ends_with("moe.router.bias")) continue;
    for (size_t e = 0; e < t.numel; ++e) {
      const double steps = p[t.offset + e] / 0.05;
      EXPECT_NEAR(steps, std::round(steps), 1e-4) << t.name << " expert " << e;
      EXPECT_LE(std::abs(steps), 8.0 + 1e-4) << t.name;
      moved += std::round(steps) != 0;
    }
  }
  EXPECT_GT(moved, 0);
}

}  // namespace
}  // namespace cann
