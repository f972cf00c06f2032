// The planner's fp32 arena against the engine's for the MoE families and every layout the
// engine builds them in: tensor and sequence parallelism, expert parallelism (with tp too),
// pipeline stages, each recomputation mode; context parallelism refused for MoE as the engine refuses it; and
// the shipped tiny configs at the size `run` trains them, 16 x 128 on one process.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "comm_test_util.h"
#include "engine_memory_models.h"
#include "model/model.h"
#include "model/param_table.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/tp_comm.h"
#include "plan/engine_memory.h"
#include "plan/predict.h"
#include "test_util.h"

namespace cann::plan {
namespace {

using namespace engine_test;

constexpr model::Recompute kModes[] = {model::Recompute::kNone, model::Recompute::kSelective,
                                       model::Recompute::kFull};

std::string describe(const model::ModelSpec& m, const Strategy& s, int B, int seq) {
  return m.name + " " + strategy_string(s) + " " + std::to_string(B) + "x" + std::to_string(seq) +
         " recompute " + std::to_string(static_cast<int>(s.recompute));
}

// MoE under tp, with and without sp, over a real tensor group: every rank routes all tokens
// (routing buffers of N rows even under sp), sp adds the shard's renumbered slots and one MoE
// layer's gradient scratch; the arena equals the planner's figure for every recomputation mode
// (full recomputation's routing ints are the planner's staging index bytes). Every MoE model
// whose heads and widths tp = 2 divides.
TEST(PlanEngineMemoryTest, MoeUnderTensorAndSequenceParallelismIsTheEnginesArena) {
  int checked = 0;
  for (const model::ModelSpec& m : moe_models()) {
    if (!model::check_tp_divides(m, 2).ok()) continue;
    ++checked;
    for (bool sp : {false, true})
      for (auto [B, seq] : {std::pair{1, 2}, {2, m.seq_length / 2 + 1}, {3, m.seq_length}})
        for (model::Recompute r : kModes) {
          Strategy st = data_parallel(1, 0);
          st.tp = 2;
          st.sp = sp;
          st.recompute = r;
          auto e = predict_engine_memory(m, st, B, seq);
          ASSERT_TRUE(e.ok()) << e.status().message();
          const std::string what = describe(m, st, B, seq);
          test::run_group("shm", 2, [&](int rank, comm::Group& g) {
            parallel::GroupTensorParallelComm comm(g);
            auto model = model::Model::create(m, B, seq, {rank, 2, sp, &comm}, {}, {}, r);
            ASSERT_TRUE(model.ok()) << model.status().message();
            const double arena = static_cast<double>((*model)->activation_bytes());
            EXPECT_EQ(e->activations + e->staging, arena) << what;
            if (r == model::Recompute::kNone) {
              EXPECT_EQ(4 * engine_arena(m, B, seq, 2, sp).total(m), arena) << what;
            }
          });
        }
  }
  EXPECT_GE(checked, 7);
}

// Expert parallelism, ep = 2 over dp = 2, alone and beside tp = 2: each rank holds half the
// experts, whose buffers take every rank's rows for them (E * capacity rows in all), plus the
// all-to-all staging and the received counts; every recomputation mode. Creating a model issues
// no collective, so one group serves as the tensor and the expert communicator.
TEST(PlanEngineMemoryTest, MoeUnderExpertParallelismIsTheEnginesArena) {
  int checked = 0;
  for (const model::ModelSpec& m : moe_models()) {
    if (m.num_local_experts % 2 != 0) continue;
    for (int tp : {1, 2}) {
      if (!model::check_tp_divides(m, tp).ok()) continue;
      ++checked;
      for (auto [B, seq] : {std::pair{1, 3}, {3, m.seq_length}})
        for (model::Recompute r : kModes) {
          Strategy st = data_parallel(2, 0);
          st.tp = tp;
          st.ep = 2;
          st.recompute = r;
          auto e = predict_engine_memory(m, st, B, seq);
          ASSERT_TRUE(e.ok()) << e.status().message();
          const std::string what = describe(m, st, B, seq);
          test::run_group("shm", 2 * tp, [&](int rank, comm::Group& g) {
            parallel::GroupTensorParallelComm tcomm(g);
            parallel::GroupExpertParallelComm ecomm(g);
            const model::TensorParallel t =
                tp > 1 ? model::TensorParallel{rank % tp, tp, false, &tcomm}
                       : model::TensorParallel{};
            auto model = model::Model::create(m, B, seq, t, {}, {rank / tp, 2, &ecomm}, r);
            ASSERT_TRUE(model.ok()) << model.status().message();
            const double arena = static_cast<double>((*model)->activation_bytes());
            EXPECT_EQ(e->activations + e->staging, arena) << what;
            if (r == model::Recompute::kNone) {
              EXPECT_EQ(4 * engine_arena(m, B, seq, tp, false, 1, 2).total(m), arena) << what;
            }
          });
        }
    }
  }
  EXPECT_GE(checked, 8);
}

// Expert parallelism over ranks that do not divide the experts (ep = 3): each rank keeps
// ceil(E/3) expert slots, some empty (model/expert_placement.h), and the planner's figures are
// still the engine's, parameters included.
TEST(PlanEngineMemoryTest, MoeOverRanksThatDoNotDivideTheExpertsIsTheEnginesArena) {
  int checked = 0;
  for (const model::ModelSpec& m : moe_models()) {
    if (m.num_local_experts % 3 == 0 || m.num_local_experts < 3) continue;
    ++checked;
    for (auto [B, seq] : {std::pair{1, 3}, {3, m.seq_length}})
      for (model::Recompute r : kModes) {
        Strategy st = data_parallel(3, 0);
        st.ep = 3;
        st.recompute = r;
        auto e = predict_engine_memory(m, st, B, seq);
        ASSERT_TRUE(e.ok()) << e.status().message();
        const std::string what = describe(m, st, B, seq);
        test::run_group("shm", 3, [&](int rank, comm::Group& g) {
          parallel::GroupExpertParallelComm ecomm(g);
          auto model = model::Model::create(m, B, seq, {}, {}, {rank, 3, &ecomm}, r);
          ASSERT_TRUE(model.ok()) << model.status().message();
          EXPECT_EQ(e->activations + e->staging, static_cast<double>((*model)->activation_bytes()))
              << what;
          EXPECT_EQ(e->parameters, 4.0 * (*model)->num_floats()) << what;
        });
      }
  }
  EXPECT_GE(checked, 2);
}

// One process, every model and recomputation mode: what the arena keeps plus what it rebuilds
// (one layer's tensors for full recomputation, the larger of the dense and the MoE set, their
// routing ints apart; one layer's probabilities for selective) is the engine's arena.
TEST(PlanEngineMemoryTest, RecomputationIsTheEnginesArenaForEveryModel) {
  for (const model::ModelSpec& m : models())
    for (auto [B, seq] : {std::pair{1, 1}, {2, m.seq_length / 2 + 1}, {3, m.seq_length}})
      for (model::Recompute r : kModes) {
        Strategy st = data_parallel(1, 0);
        st.recompute = r;
        auto e = predict_engine_memory(m, st, B, seq);
        ASSERT_TRUE(e.ok()) << e.status().message();
        auto model = model::Model::create(m, B, seq, {}, {}, {}, r);
        ASSERT_TRUE(model.ok()) << model.status().message();
        EXPECT_EQ(e->activations + e->staging, static_cast<double>((*model)->activation_bytes()))
            << describe(m, st, B, seq);
      }
}

// Two 1F1B pipeline stages of every model (the families' dense first layers and MoE layers
// split by the planner's partition, as `run` splits them), each with the activation slots the
// schedule needs for 4 micro-batches: each stage's arena, recomputed layers included, is the
// planner's figure for that stage.
TEST(PlanEngineMemoryTest, PipelineStagesAreTheEnginesArenas) {
  const int B = 2, M = 4;
  for (const model::ModelSpec& m : models())
    for (model::Recompute r : kModes) {
      const int seq = m.seq_length;
      Strategy st = data_parallel(1, 0);
      st.pp = 2;
      st.mbs = B;
      st.gbs = B * M;
      st.recompute = r;
      auto in = make_plan_input(m, engine_cluster(st.devices()), 0);
      ASSERT_TRUE(in.ok()) << in.status().message();
      in->seq_len = seq;
      auto p = predict(*in, st, Fidelity::kExact);
      ASSERT_TRUE(p.ok()) << p.status().message();
      const std::vector<int> bounds = engine_stage_bounds(m, st, seq);
      ASSERT_EQ(p->stages.size(), 2u);
      for (int i = 0; i < 2; ++i) {
        const model::PipelineStage stage{
            bounds[i], bounds[i + 1],
            parallel::pipeline_slots(parallel::PipelineSchedule::k1F1B, i, 2, M), {}};
        auto model = model::Model::create(m, B, seq, {}, stage, {}, r);
        ASSERT_TRUE(model.ok()) << model.status().message();
        const StageReport& sr = p->stages[i];
        EXPECT_EQ(sr.activation_bytes + sr.transient_bytes,
                  static_cast<double>((*model)->activation_bytes()))
            << describe(m, st, B, seq) << " stage " << i << " layers [" << bounds[i] << ", "
            << bounds[i + 1] << ")";
      }
    }
}

// Context parallelism with MoE layers: the engine refuses it (each rank would route only its
// positions), and so does the planner, naming cp.
TEST(PlanEngineMemoryTest, ContextParallelismRefusesMoeAsTheEngineDoes) {
  for (const model::ModelSpec& m : moe_models()) {
    Strategy st = data_parallel(1, 0);
    st.cp = 2;
    auto e = predict_engine_memory(m, st, 1, 8);
    ASSERT_FALSE(e.ok()) << m.name;
    EXPECT_NE(e.status().message().find("cp"), std::string::npos) << e.status().message();
    test::run_group("shm", 2, [&](int rank, comm::Group& g) {
      parallel::GroupTensorParallelComm comm(g);
      auto model = model::Model::create(m, 1, 8, {}, {}, {}, model::Recompute::kNone,
                                        model::ContextParallel{rank, 2, &comm});
      EXPECT_FALSE(model.ok()) << m.name;
    });
  }
}

// Every shipped tiny config at the size `run` trains it by default (16 sequences of 128 on
// one process): the planner's arena is the engine's, printed for the record.
TEST(PlanEngineMemoryTest, ShippedTinyConfigsAtSixteenByOneTwentyEight) {
  int checked = 0;
  for (const std::string& name : model::shipped_model_names()) {
    if (name.size() < 5 || name.compare(name.size() - 5, 5, "_tiny") != 0) continue;
    const model::ModelSpec m = shipped(name);
    const int B = 16, T = 128;
    auto model = model::Model::create(m, B, T);
    ASSERT_TRUE(model.ok()) << model.status().message();
    auto e = predict_engine_memory(m, data_parallel(1, 0), B, T);
    ASSERT_TRUE(e.ok()) << e.status().message();
    const double arena = static_cast<double>((*model)->activation_bytes());
    std::printf("%-15s arena %dx%d: predicted %.0f B, engine %.0f B (%+.1f%%)\n", name.c_str(), B,
                T, e->activations, arena, 100.0 * (e->activations - arena) / arena);
    EXPECT_EQ(e->activations, arena) << name;
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

}  // namespace
}  // namespace cann::plan
