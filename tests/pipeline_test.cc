// Pipeline parallelism in process (stages as threads over a shared-memory world group): the
// schedules' op lists, and for GPipe and 1F1B over 2, 3 and 4 stages (also with tp=2 inside
// each stage) the summed loss of a step's micro-batches equals one process's and every
// stage's gradients equal the single-process gradients of its tensors; the tied embedding's
// two copies (first and last stage) add up to the single-process wte gradient.
//
// Tolerance as in tensor_parallel_test.cc: 2e-5 of each tensor's largest gradient. Without tp
// the only difference is that wte's gradient is summed from two copies (observed 3e-7); with
// tp the summation order of the split linears too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

#include "comm_test_util.h"
#include "test_util.h"
#include "core/rng.h"
#include "core/threads.h"
#include "model/model.h"
#include "model/param_table.h"
#include "parallel/mesh.h"
#include "parallel/pipeline_runner.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/tp_comm.h"

namespace cann {
namespace {

using parallel::PipelineOp;
using parallel::PipelineSchedule;

TEST(PipelineScheduleTest, OpListsFollowTheHeaderExample) {
  auto str = [](const std::vector<PipelineOp>& ops) {
    std::string s;
    for (const auto& o : ops) {
      s += o.forward ? 'F' : 'B';
      s += std::to_string(o.micro);
      s += ' ';
    }
    return s;
  };
  EXPECT_EQ(str(parallel::pipeline_ops(PipelineSchedule::k1F1B, 0, 2, 4)),
            "F0 F1 B0 F2 B1 F3 B2 B3 ");
  EXPECT_EQ(str(parallel::pipeline_ops(PipelineSchedule::k1F1B, 1, 2, 4)),
            "F0 B0 F1 B1 F2 B2 F3 B3 ");
  EXPECT_EQ(str(parallel::pipeline_ops(PipelineSchedule::kGPipe, 0, 2, 2)), "F0 F1 B0 B1 ");
  // Fewer micro-batches than stages: warm-up is capped by M.
  EXPECT_EQ(str(parallel::pipeline_ops(PipelineSchedule::k1F1B, 0, 4, 2)), "F0 F1 B0 B1 ");
  for (int S : {1, 2, 3, 5})
    for (int M : {1, 2, 3, 8})
      for (int s = 0; s < S; ++s)
        for (auto sched : {PipelineSchedule::kGPipe, PipelineSchedule::k1F1B}) {
          const auto ops = parallel::pipeline_ops(sched, s, S, M);
          ASSERT_EQ(ops.size(), 2u * M);
          // Each micro-batch's forward precedes its backward; in flight never exceeds slots.
          int in_flight = 0, worst = 0;
          std::vector<int> f(M, -1);
          for (size_t k = 0; k < ops.size(); ++k) {
            if (ops[k].forward) {
              f[ops[k].micro] = static_cast<int>(k);
              worst = std::max(worst, ++in_flight);
            } else {
              ASSERT_GE(f[ops[k].micro], 0);
              --in_flight;
            }
          }
          EXPECT_LE(worst, parallel::pipeline_slots(sched, s, S, M));
          EXPECT_EQ(ops.back(), (PipelineOp{false, M - 1}));
        }
  EXPECT_EQ(parallel::pipeline_slots(PipelineSchedule::k1F1B, 0, 4, 8), 4);
  EXPECT_EQ(parallel::pipeline_slots(PipelineSchedule::kGPipe, 0, 4, 8), 8);
}

const char kGpt[] =
    "architecture: gpt\nhidden_size: 32\nnum_hidden_layers: 4\nnum_attention_heads: 4\n"
    "vocab_size: 61\nseq_length: 16\n";
const char kMoeBert[] =
    "architecture: bert\nhidden_size: 32\nnum_hidden_layers: 4\nnum_attention_heads: 4\n"
    "vocab_size: 65\nseq_length: 16\nnum_local_experts: 4\nnum_experts_per_tok: 2\n"
    "moe_layer_freq: 2\n";

constexpr int kB = 2, kT = 16, kM = 4;

// Layer bounds of `stages` nearly equal stages.
std::vector<int> bounds_of(int layers, int stages) {
  std::vector<int> b;
  for (int s = 0; s <= stages; ++s) b.push_back(s * layers / stages);
  return b;
}

void expect_pipeline_matches(const model::ModelSpec& s, int stages, int tp,
                             PipelineSchedule sched) {
  set_num_threads(1);
  const test::RandomBatches data = test::random_batches(s, kM, kB * kT, 31);
  const float scale = 1.0f / kM;
  // One process.
  auto single = model::Model::create(s, kB, kT);
  (*single)->init_params(9);
  (*single)->zero_grads();
  double ref_loss = 0;
  for (int i = 0; i < kM; ++i) {
    ref_loss += (*single)->forward(data.inputs[i].data(), data.targets[i].data(), kB, kT).loss;
    (*single)->backward(scale);
  }
  const model::ParamTable full = model::build_param_table(s);
  const std::vector<float> ref(((*single)->grads()), (*single)->grads() + full.total_floats());

  const auto bounds = bounds_of(s.num_hidden_layers, stages);
  std::vector<float> got(full.total_floats(), 0.0f);
  std::mutex mu;
  std::vector<double> losses(stages * tp, 0.0);
  parallel::MeshShape shape;
  shape.pp = stages;
  shape.tp = tp;
  test::run_group("shm", stages * tp, [&](int rank, comm::Group& world) {
    auto mesh = parallel::ProcessMesh::build(world, shape);
    ASSERT_TRUE(mesh.ok()) << mesh.status().message();
    const int stage = (*mesh)->coords().pp, tp_rank = (*mesh)->coords().tp;
    parallel::GroupTensorParallelComm comm((*mesh)->tp());
    model::TensorParallel tpc{tp_rank, tp, false, tp > 1 ? &comm : nullptr};
    model::PipelineStage ps;
    ps.first_layer = bounds[stage];
    ps.end_layer = bounds[stage + 1];
    ps.slots = parallel::pipeline_slots(sched, stage, stages, kM);
    auto m = model::Model::create(s, kB, kT, tpc, ps);
    ASSERT_TRUE(m.ok()) << m.status().message();
    (*m)->init_params(9);
    (*m)->zero_grads();
    parallel::PipelineRunner runner(**m, world, (*mesh)->pp_prev(), (*mesh)->pp_next(), sched,
                                    stage, stages);
    auto st = runner.step(kM, kB, kT, scale,
                          [&](int i, const int** in, const int** tg) {
                            *in = data.inputs[i].data();
                            *tg = data.targets[i].data();
                          },
                          {});
    ASSERT_TRUE(st.ok()) << st.status().message();
    losses[rank] = st->loss;
    std::lock_guard<std::mutex> lock(mu);
    const model::ParamTable& table = (*m)->table();
    std::vector<float> one;
    for (const auto& t : table.tensors()) {
      const auto& whole = full.at(*full.find(t.name));
      one.assign(whole.numel, 0.0f);
      model::place_tp_shard(t, (*m)->grads() + t.offset, one.data(), tp_rank, tp);
      // Replicated tensors are counted once (tp rank 0); split ones add their shards; the
      // tied wte's two stage copies add up.
      if (t.tp_split == model::TpSplit::kReplicated && tp_rank != 0) continue;
      for (size_t k = 0; k < one.size(); ++k) got[whole.offset + k] += one[k];
    }
  });
  const std::string what = s.name + ", " + std::to_string(stages) + " stages, tp " +
                           std::to_string(tp) + ", " + parallel::pipeline_schedule_name(sched);
  // The stages' losses add up to the step's (the last stage's language-model loss plus each
  // stage's share of the MoE auxiliary loss); tp ranks agree.
  for (int t = 0; t < tp; ++t) {
    double total = 0;
    for (int st = 0; st < stages; ++st) total += losses[st * tp + t];
    EXPECT_NEAR(total, ref_loss, 1e-5) << what;
  }
  const double worst = test::expect_tensors_close(full, ref, got, 2e-5, what);
  std::printf("pipeline %-28s max gradient deviation %.2e\n", what.c_str(), worst);
}

void expect_pipeline_matches(const char* yaml, int stages, int tp, PipelineSchedule sched) {
  auto parsed = model::parse_model_spec(yaml, "test.yaml");
  ASSERT_TRUE(parsed.ok());
  expect_pipeline_matches(*parsed, stages, tp, sched);
}

TEST(PipelineTest, ShippedModelsMatchOneProcess) {
  for (const char* name : {"gpt_tiny", "moe_bert_tiny"}) {
    auto s = model::load_model_spec(name);
    ASSERT_TRUE(s.ok());
    expect_pipeline_matches(*s, 2, 1, PipelineSchedule::k1F1B);
    expect_pipeline_matches(*s, 2, 1, PipelineSchedule::kGPipe);
  }
}

TEST(PipelineTest, GPipeMatchesOneProcess) {
  expect_pipeline_matches(kGpt, 2, 1, PipelineSchedule::kGPipe);
  expect_pipeline_matches(kGpt, 4, 1, PipelineSchedule::kGPipe);
}

TEST(PipelineTest, OneFOneBMatchesOneProcess) {
  expect_pipeline_matches(kGpt, 2, 1, PipelineSchedule::k1F1B);
  expect_pipeline_matches(kGpt, 3, 1, PipelineSchedule::k1F1B);
  expect_pipeline_matches(kGpt, 4, 1, PipelineSchedule::k1F1B);
  expect_pipeline_matches(kMoeBert, 2, 1, PipelineSchedule::k1F1B);
}

TEST(PipelineTest, PipelineTimesTensorParallelMatchesOneProcess) {
  expect_pipeline_matches(kGpt, 2, 2, PipelineSchedule::k1F1B);
  expect_pipeline_matches(kGpt, 2, 2, PipelineSchedule::kGPipe);
}

}  // namespace
}  // namespace cann
