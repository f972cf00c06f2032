// Expert parallelism combined with tensor and pipeline parallelism, as the trainer wires it
// (ModelParallel over the process mesh, the data-parallel engine's expert-aware reduction, the
// pipeline runner), ranks as threads over shared-memory groups. Each data rank trains its own
// M micro-batches; after the step's reduction every rank's gradients, assembled into the
// single-process layout, equal one process accumulating all dp*M micro-batches, tensor by
// tensor; the global gradient norm equals that process's; and the losses agree.
//
// What is checked on every rank, not just one: for each (data rank d, tensor rank v) the
// dense tensors of data rank d (split ones from all tensor ranks, replicated ones from rank v)
// and the experts of d's expert group at tensor rank v form a whole model that must equal the
// reference, so a rank whose reduction went over the wrong group shows.
//
// Tolerance: 2e-5 of each tensor's largest gradient, as the other in-process gradient tests
// (fp32 summation order only; observed ~1e-7); the norm to 1e-5 relative (fp32 on the wire).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>

#include "comm_test_util.h"
#include "core/threads.h"
#include "model/model.h"
#include "model/param_table.h"
#include "optim/adamw.h"
#include "parallel/pipeline_runner.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/reducer.h"
#include "test_util.h"
#include "train/data_parallel.h"
#include "train/model_parallel.h"

namespace cann {
namespace {

using parallel::PipelineSchedule;

// Every layer MoE; 4 layers so that pp=2 x vpp=2 gets a layer per chunk.
const char kMoeBert[] =
    "architecture: bert\nhidden_size: 32\nnum_hidden_layers: 4\nnum_attention_heads: 4\n"
    "vocab_size: 65\nseq_length: 16\nnum_local_experts: 4\nnum_experts_per_tok: 2\n"
    "moe_layer_freq: 1\n";
// Capacity 1.0 drops tokens; every second layer MoE.
const char kMoeGpt[] =
    "architecture: gpt\nhidden_size: 32\nnum_hidden_layers: 4\nnum_attention_heads: 4\n"
    "vocab_size: 64\nseq_length: 16\nnum_local_experts: 8\nnum_experts_per_tok: 2\n"
    "capacity_factor: 1.0\nmoe_layer_freq: 2\n";

constexpr int kB = 2, kT = 16;

struct Split {
  int dp = 1, tp = 1, pp = 1, ep = 1, vpp = 1;
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  int micro = 4;  // micro-batches per data rank and step
  std::string text() const {
    std::string s = "dp=" + std::to_string(dp) + " tp=" + std::to_string(tp) +
                    " pp=" + std::to_string(pp) + " ep=" + std::to_string(ep);
    if (vpp > 1) s += " vpp=" + std::to_string(vpp);
    if (pp > 1) s += std::string(" ") + parallel::pipeline_schedule_name(schedule);
    return s + " M=" + std::to_string(micro);
  }
};

// One rank's step: M micro-batches of data rank d (batches d*M .. d*M+M-1), reduced by the
// data-parallel engine as the trainer does. Returns this rank's share of the summed loss.
double train_step(const Split& sp, train::ModelParallel& mp, model::Model& m,
                  train::DataParallelEngine& engine, const test::RandomBatches& data,
                  comm::Group& world) {
  const int d = mp.dp_rank(), M = sp.micro;
  const float scale = 1.0f / M;
  double loss = 0;
  if (sp.pp == 1) {
    for (int i = 0; i < M; ++i) {
      const auto& in = data.inputs[d * M + i];
      const auto& tg = data.targets[d * M + i];
      loss += m.forward(in.data(), tg.data(), kB, kT).loss;
      if (i + 1 < M) {
        m.backward(scale);
        continue;
      }
      parallel::StepComm stats;
      EXPECT_TRUE(engine.backward_and_reduce(scale, &stats).ok());
    }
    return loss;
  }
  std::unique_ptr<parallel::PipelineRunner> runner;
  if (sp.schedule == PipelineSchedule::kInterleaved)
    runner = std::make_unique<parallel::PipelineRunner>(m, world, mp.pp_group(), mp.stage_ranks(),
                                                        mp.stage());
  else
    runner = std::make_unique<parallel::PipelineRunner>(m, world, mp.pp_prev(), mp.pp_next(),
                                                        sp.schedule, mp.stage(), sp.pp);
  parallel::PipelineRunner::GradReduction red;
  parallel::StepComm stats;
  red.begin = [&] { engine.begin_reduction(); };
  red.layer_done = [&](int layer) { engine.layer_done(layer); };
  red.finish = [&] { return engine.finish_reduction(&stats); };
  auto st = runner->step(
      M, kB, kT, scale,
      [&](int i, const int** in, const int** tg) {
        *in = data.inputs[d * M + i].data();
        *tg = data.targets[d * M + i].data();
      },
      red);
  EXPECT_TRUE(st.ok()) << st.status().message();
  return st.ok() ? st->loss : 0.0;
}

void expect_matches(const model::ModelSpec& s, const Split& sp) {
  set_num_threads(1);
  const int dp = sp.dp, tp = sp.tp, world_size = sp.dp * sp.tp * sp.pp, M = sp.micro;
  const test::RandomBatches data = test::random_batches(s, dp * M, kB * kT, 23);
  // One process, every micro-batch of every data rank.
  auto single = model::Model::create(s, kB, kT);
  ASSERT_TRUE(single.ok());
  (*single)->init_params(7);
  (*single)->zero_grads();
  std::vector<double> ref_loss(dp, 0.0);
  for (int i = 0; i < dp * M; ++i) {
    ref_loss[i / M] +=
        (*single)->forward(data.inputs[i].data(), data.targets[i].data(), kB, kT).loss;
    (*single)->backward(1.0f / (dp * M));
  }
  const model::ParamTable full = model::build_param_table(s);
  const std::vector<float> ref((*single)->grads(), (*single)->grads() + full.total_floats());
  double ref_norm = 0;
  for (float g : ref) ref_norm += static_cast<double>(g) * g;
  ref_norm = std::sqrt(ref_norm);

  // views[d * tp + v]: the model as data rank d and tensor rank v see it (header).
  std::vector<std::vector<float>> views(dp * tp, std::vector<float>(full.total_floats(), 0.0f));
  std::vector<double> losses(world_size, 0.0), norms(world_size, 0.0);
  std::vector<int> dp_of(world_size), tp_of(world_size);
  std::mutex mu;
  test::run_group("shm", world_size, [&](int rank, comm::Group& world) {
    plan::Strategy layout;
    layout.mbs = kB;
    layout.dp = sp.dp;
    layout.tp = sp.tp;
    layout.pp = sp.pp;
    layout.ep = sp.ep;
    layout.vpp = sp.vpp;
    auto mp = train::ModelParallel::create(world, layout);
    ASSERT_TRUE(mp.ok()) << mp.status().message();
    const model::TensorParallel tpc = (*mp)->tensor_parallel();
    const model::ExpertParallel epc = (*mp)->expert_parallel();
    const model::PipelineStage stage =
        sp.pp > 1 ? (*mp)->pipeline_stage(s, kT, M, sp.schedule) : model::PipelineStage{};
    auto m = model::Model::create(s, kB, kT, tpc, stage, epc);
    ASSERT_TRUE(m.ok()) << m.status().message();
    (*m)->init_params(7);
    (*m)->zero_grads();
    train::DataParallelConfig dc;
    dc.grad_sum_of_squares = (*mp)->grad_sum_of_squares((*m)->table());
    dc.ep = sp.ep;
    dc.expert_dp_group = &(*mp)->expert_dp_group();
    // Buckets of ~4 KiB, so that many leave during the step's last backwards (as a large
    // model's do) and one that leaves before all of its gradients are final shows.
    dc.buckets = {4096, 4096};  // 1/256 MiB each
    auto engine =
        train::DataParallelEngine::create(**m, (*mp)->dp_group(), optim::AdamWConfig{}, dc, 1);
    ASSERT_TRUE(engine.ok()) << engine.status().message();
    losses[rank] = train_step(sp, **mp, **m, **engine, data, world);
    ASSERT_TRUE((*m)->tp_status().ok()) << (*m)->tp_status().message();
    {
      std::lock_guard<std::mutex> lock(mu);
      const int d = (*mp)->dp_rank(), t = tpc.rank;
      dp_of[rank] = d;
      tp_of[rank] = t;
      const model::ParamTable& table = (*m)->table();
      std::vector<float> one;
      for (const auto& ti : table.tensors()) {
        const auto& whole = full.at(*full.find(ti.name));
        const float* g = (*m)->grads() + ti.offset;
        if (ti.expert) {
          // This rank's block of experts, for every data rank of its expert group.
          const size_t at = whole.offset + static_cast<size_t>(epc.rank) * ti.numel;
          for (int peer = d - epc.rank; peer < d - epc.rank + sp.ep; ++peer)
            std::copy(g, g + ti.numel, views[peer * tp + t].begin() + at);
          continue;
        }
        one.assign(whole.numel, 0.0f);
        model::place_tp_shard(ti, g, one.data(), t, tp);
        // The tied wte's two stage copies add up; split shards are disjoint.
        for (int v = 0; v < tp; ++v) {
          if (ti.tp_split == model::TpSplit::kReplicated && v != t) continue;
          float* dst = views[d * tp + v].data() + whole.offset;
          for (size_t k = 0; k < one.size(); ++k) dst[k] += one[k];
        }
      }
    }
    // The optimizer step as the trainer takes it: the tied copies summed, then the global norm.
    ASSERT_TRUE((*mp)->sync_tied_embedding(**m).ok());
    auto norm = (*engine)->step(1e-3f);
    ASSERT_TRUE(norm.ok()) << norm.status().message();
    ASSERT_TRUE((*mp)->status().ok()) << (*mp)->status().message();
    norms[rank] = *norm;
  });
  const std::string what = s.name + " " + sp.text();
  // A data rank's stages add up to its loss (tensor ranks agree).
  for (int d = 0; d < dp; ++d)
    for (int v = 0; v < tp; ++v) {
      double total = 0;
      for (int r = 0; r < world_size; ++r)
        if (dp_of[r] == d && tp_of[r] == v) total += losses[r];
      EXPECT_NEAR(total, ref_loss[d], 1e-5 * std::abs(ref_loss[d])) << what << " dp " << d;
    }
  double worst = 0;
  for (int i = 0; i < dp * tp; ++i)
    worst = std::max(worst, test::expect_tensors_close(full, ref, views[i], 2e-5,
                                                       what + " view " + std::to_string(i)));
  for (int r = 0; r < world_size; ++r)
    EXPECT_NEAR(norms[r], ref_norm, 1e-5 * ref_norm) << what << " rank " << r;
  std::printf("%-34s max gradient deviation %.2e, norm %.6f vs %.6f\n", what.c_str(), worst,
              norms[0], ref_norm);
}

// A shipped model by name, or one of the specs above (named after them in the output).
model::ModelSpec spec_of(const char* yaml_or_name) {
  auto shipped = model::load_model_spec(yaml_or_name);
  if (shipped.ok()) return *shipped;
  const bool bert = std::string(yaml_or_name) == kMoeBert;
  auto parsed = model::parse_model_spec(yaml_or_name, bert ? "moe_bert.yaml" : "moe_gpt.yaml");
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  return *parsed;
}

TEST(ExpertModelParallelTest, ExpertTimesTensorParallelMatchesOneProcess) {
  for (const char* m : {kMoeBert, kMoeGpt, "moe_bert_tiny"})
    expect_matches(spec_of(m), {.dp = 2, .tp = 2, .ep = 2});
  expect_matches(spec_of(kMoeBert), {.dp = 4, .tp = 2, .ep = 2});  // two expert groups
}

TEST(ExpertModelParallelTest, ExpertTimesPipelineParallelMatchesOneProcess) {
  for (const char* m : {kMoeBert, kMoeGpt, "moe_bert_tiny"})
    expect_matches(spec_of(m), {.dp = 2, .pp = 2, .ep = 2});
  expect_matches(spec_of(kMoeBert),
                 {.dp = 2, .pp = 2, .ep = 2, .schedule = PipelineSchedule::kGPipe});
  // Interleaved with M = pp runs micro-batch 0's first chunk after micro-batch 1's second: the
  // backward of that earlier pass must not let the first chunk's buckets leave.
  for (int micro : {2, 4})
    expect_matches(spec_of(kMoeBert), {.dp = 2,
                                       .pp = 2,
                                       .ep = 2,
                                       .vpp = 2,
                                       .schedule = PipelineSchedule::kInterleaved,
                                       .micro = micro});
}

TEST(ExpertModelParallelTest, ExpertTimesTensorTimesPipelineMatchesOneProcess) {
  expect_matches(spec_of(kMoeGpt), {.dp = 2, .tp = 2, .pp = 2, .ep = 2});
}

}  // namespace
}  // namespace cann
