// Activation recomputation (model/recompute.h) against none. Recomputation runs the same
// kernels, with the same arguments, on the same inputs as forward did, and the collectives it
// re-issues carry the same data in the same order; so gradients, losses and MoE routing are
// expected bit for bit equal to recompute=none, and the tests ask for exact equality (a
// tolerance would hide a recomputed tensor read from the wrong buffer whose effect is small).
// Covered: one process (gpt_tiny, moe_bert_tiny, a mixed dense/MoE model that drops tokens),
// tensor parallelism with and without sp (MoE too), two pipeline stages with two activation slots
// in flight, expert parallelism, and ZeRO-3's parameter gathering. The arena equals the planner's
// figure exactly and shrinks none > selective > full. Through the binary, tp=2 recompute=full
// and pp=2 recompute=selective follow the single-process loss, and moe_bert_tiny with full
// recomputation (one process; tp=2 with sp) trains exactly the steps of none.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm_test_util.h"
#include "core/rng.h"
#include "core/threads.h"
#include "model/model.h"
#include "model/param_table.h"
#include "model/spec.h"
#include "optim/adamw.h"
#include "parallel/mesh.h"
#include "parallel/reducer.h"
#include "parallel/tp_comm.h"
#include "plan/engine_memory.h"
#include "run_args.h"
#include "test_util.h"
#include "train/data_parallel.h"

namespace cann {
namespace {

using model::Model;
using model::ModelSpec;
using model::Recompute;

const Recompute kModes[] = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
const char* name_of(Recompute r) {
  return r == Recompute::kNone ? "none" : r == Recompute::kSelective ? "selective" : "full";
}

ModelSpec shipped(const std::string& name) {
  auto s = model::load_model_spec(name);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return *s;
}

// Dense and MoE layers alternating, top-2 of 4 experts at capacity 1.0 (tokens are dropped),
// sizes that are not multiples of 16.
ModelSpec mixed_moe() {
  auto s = model::parse_model_spec(
      "architecture: gpt\nhidden_size: 20\nnum_hidden_layers: 4\nnum_attention_heads: 4\n"
      "vocab_size: 45\nseq_length: 24\nnum_local_experts: 4\nnum_experts_per_tok: 2\n"
      "moe_layer_freq: 2\nmoe_intermediate_size: 28\ncapacity_factor: 1.0\n",
      "mixed.yaml");
  EXPECT_TRUE(s.ok()) << s.status().message();
  return *s;
}

// An MoE layer whose buffers are smaller than the dense layer's (top-1 at capacity 0.5, narrow
// experts, a wide dense MLP): full recomputation's shared set is then the dense one in floats
// plus the MoE routing ints beside it.
ModelSpec narrow_moe() {
  auto s = model::parse_model_spec(
      "architecture: gpt\nhidden_size: 20\nnum_hidden_layers: 2\nnum_attention_heads: 2\n"
      "intermediate_size: 200\nvocab_size: 45\nseq_length: 24\nnum_local_experts: 4\n"
      "num_experts_per_tok: 1\nmoe_layer_freq: 2\nmoe_intermediate_size: 8\n"
      "capacity_factor: 0.5\n",
      "narrow.yaml");
  EXPECT_TRUE(s.ok()) << s.status().message();
  return *s;
}

struct Batch {
  std::vector<int> inputs, targets;
};

Batch make_batch(const ModelSpec& s, int B, int T, uint64_t seed) {
  Rng rng(seed);
  Batch b;
  for (int i = 0; i < B * T; ++i) {
    b.inputs.push_back(static_cast<int>(rng.below(s.vocab_size)));
    int t = static_cast<int>(rng.below(s.vocab_size));
    if (s.architecture == model::Architecture::kBert && rng.uniform() < 0.6f) t = -1;
    b.targets.push_back(t);
  }
  return b;
}

struct Outcome {
  std::vector<double> losses, aux;
  std::vector<float> grads;
  std::vector<int> expert_counts;
  long dropped = 0;
};

// Two micro-batches accumulated, the second smaller than the buffers.
Outcome run_one_process(const ModelSpec& s, Recompute r, int B, int T) {
  auto m = Model::create(s, B, T, {}, {}, {}, r);
  EXPECT_TRUE(m.ok()) << m.status().message();
  (*m)->init_params(5);
  (*m)->zero_grads();
  Outcome o;
  for (int mb = 0; mb < 2; ++mb) {
    const int b = mb == 0 ? B : B - 1;
    const Batch batch = make_batch(s, b, T, 100 + mb);
    const model::ForwardStats st = (*m)->forward(batch.inputs.data(), batch.targets.data(), b, T);
    o.losses.push_back(st.loss);
    o.aux.push_back(st.aux_loss);
    (*m)->backward(0.5f);
    for (int i = 0; i < (*m)->num_moe_layers(); ++i)
      for (int c : (*m)->expert_counts(i)) o.expert_counts.push_back(c);
    o.dropped += (*m)->dropped_assignments();
  }
  o.grads.assign((*m)->grads(), (*m)->grads() + (*m)->num_floats());
  return o;
}

// Exact equality per tensor; prints the largest difference so a failure says how far off.
void expect_same_grads(const model::ParamTable& table, const std::vector<float>& want,
                       const std::vector<float>& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  double worst = 0;
  for (const auto& t : table.tensors()) {
    double dev = 0;
    for (size_t k = t.offset; k < t.offset + t.numel; ++k)
      dev = std::max(dev, static_cast<double>(std::abs(want[k] - got[k])));
    EXPECT_EQ(dev, 0.0) << what << " " << t.name;
    worst = std::max(worst, dev);
  }
  std::printf("%-44s max gradient difference %.3g\n", what.c_str(), worst);
}

TEST(RecomputeTest, OneProcessGradientsEqualNone) {
  set_num_threads(2);
  const std::vector<ModelSpec> specs = {shipped("gpt_tiny"), shipped("moe_bert_tiny"), mixed_moe(),
                                        narrow_moe()};
  for (size_t k = 0; k < specs.size(); ++k) {
    const ModelSpec& s = specs[k];
    const int B = 3, T = std::min(40, s.seq_length);
    const Outcome none = run_one_process(s, Recompute::kNone, B, T);
    const model::ParamTable table = model::build_param_table(s);
    for (Recompute r : {Recompute::kSelective, Recompute::kFull}) {
      const Outcome got = run_one_process(s, r, B, T);
      const std::string what = s.name + " recompute=" + name_of(r);
      EXPECT_EQ(got.losses, none.losses) << what;
      EXPECT_EQ(got.aux, none.aux) << what;  // counted once, by forward
      EXPECT_EQ(got.expert_counts, none.expert_counts) << what;
      EXPECT_EQ(got.dropped, none.dropped) << what;
      expect_same_grads(table, none.grads, got.grads, what);
    }
    if (k == 2) {
      EXPECT_GT(none.dropped, 0) << "capacity 1.0 should drop tokens";
    }
  }
}

// Tensor parallelism (tp=2, with and without sp): full recomputation re-issues the layer's
// forward all-reduces (all-gathers and reduce-scatters under sp) in backward on every rank.
TEST(RecomputeTest, TensorParallelRanksEqualNone) {
  set_num_threads(1);
  struct Case {
    ModelSpec spec;
    bool sp;
  };
  const int tp = 2, B = 2, T = 24;
  for (const Case& c :
       {Case{shipped("gpt_tiny"), false}, Case{shipped("gpt_tiny"), true},
        Case{shipped("moe_bert_tiny"), false}, Case{shipped("moe_bert_tiny"), true}}) {
    const Batch batch = make_batch(c.spec, B, T, 7);
    std::vector<std::vector<float>> grads(3 * tp);
    std::vector<double> losses(3 * tp);
    test::run_group("shm", tp, [&](int rank, comm::Group& g) {
      parallel::GroupTensorParallelComm comm(g);
      for (int mode = 0; mode < 3; ++mode) {
        auto m = Model::create(c.spec, B, T, {rank, tp, c.sp, &comm}, {}, {}, kModes[mode]);
        ASSERT_TRUE(m.ok()) << m.status().message();
        (*m)->init_params(9);
        (*m)->zero_grads();
        losses[mode * tp + rank] =
            (*m)->forward(batch.inputs.data(), batch.targets.data(), B, T).loss;
        (*m)->backward(1.0f);
        ASSERT_TRUE((*m)->tp_status().ok()) << (*m)->tp_status().message();
        grads[mode * tp + rank].assign((*m)->grads(), (*m)->grads() + (*m)->num_floats());
      }
    });
    for (int rank = 0; rank < tp; ++rank)
      for (int mode = 1; mode < 3; ++mode) {
        const std::string what = c.spec.name + (c.sp ? " tp=2 sp" : " tp=2") + " rank " +
                                 std::to_string(rank) + " " + name_of(kModes[mode]);
        EXPECT_EQ(losses[mode * tp + rank], losses[rank]) << what;
        EXPECT_EQ(grads[mode * tp + rank], grads[rank]) << what;
      }
  }
}

// Two pipeline stages of gpt_tiny and moe_bert_tiny in one thread, two micro-batches in flight
// (both forwards, then both backwards, as GPipe): each slot keeps its own layer outputs while
// the recomputed layer's buffers are shared.
TEST(RecomputeTest, PipelineStagesWithSlotsEqualNone) {
  set_num_threads(1);
  const int B = 2, T = 24;
  for (const ModelSpec& s : {shipped("gpt_tiny"), shipped("moe_bert_tiny")}) {
    const Batch mb[2] = {make_batch(s, B, T, 31), make_batch(s, B, T, 32)};
    std::vector<float> want[2];
    for (int mode = 0; mode < 3; ++mode) {
      auto first = Model::create(s, B, T, {}, {0, 2, 2, {}}, {}, kModes[mode]);
      auto last = Model::create(s, B, T, {}, {2, -1, 2, {}}, {}, kModes[mode]);
      ASSERT_TRUE(first.ok() && last.ok());
      Model* st[2] = {first->get(), last->get()};
      for (Model* m : st) {
        m->init_params(4);
        m->zero_grads();
      }
      const size_t io = st[0]->stage_io_floats(B, T);
      for (int i = 0; i < 2; ++i) {
        st[0]->use_slot(i);
        st[0]->forward(mb[i].inputs.data(), mb[i].targets.data(), B, T);
        st[1]->use_slot(i);
        std::copy(st[0]->stage_output(), st[0]->stage_output() + io, st[1]->stage_input());
        st[1]->forward(mb[i].inputs.data(), mb[i].targets.data(), B, T);
      }
      for (int i = 0; i < 2; ++i) {
        st[1]->use_slot(i);
        st[1]->backward(0.5f);
        st[0]->use_slot(i);
        std::copy(st[1]->stage_input_grad(), st[1]->stage_input_grad() + io,
                  st[0]->stage_output_grad());
        st[0]->backward(0.5f);
      }
      for (int k = 0; k < 2; ++k) {
        std::vector<float> g(st[k]->grads(), st[k]->grads() + st[k]->num_floats());
        if (mode == 0) {
          want[k] = g;
          continue;
        }
        expect_same_grads(st[k]->table(), want[k], g,
                          s.name + " stage " + std::to_string(k) + " " + name_of(kModes[mode]));
      }
    }
  }
}

// Expert parallelism (dp=2, ep=2): the recomputed MoE layer exchanges its tokens again, and
// its routing (with drops, capacity 1.0 in the mixed model) is forward's.
TEST(RecomputeTest, ExpertParallelEqualsNone) {
  set_num_threads(1);
  const int dp = 2, B = 2, T = 16;
  for (const ModelSpec& s : {shipped("moe_bert_tiny"), mixed_moe()}) {
    std::vector<std::vector<float>> grads(3 * dp);
    std::vector<double> losses(3 * dp);
    parallel::MeshShape shape;
    shape.dp = dp;
    shape.ep = dp;
    test::run_group("shm", dp, [&](int rank, comm::Group& world) {
      auto mesh = parallel::ProcessMesh::build(world, shape);
      ASSERT_TRUE(mesh.ok()) << mesh.status().message();
      parallel::GroupExpertParallelComm comm((*mesh)->ep());
      const int ep_rank = (*mesh)->coords().ep;
      const Batch batch = make_batch(s, B, T, 50 + rank);
      for (int mode = 0; mode < 3; ++mode) {
        auto m = Model::create(s, B, T, {}, {}, {ep_rank, dp, &comm}, kModes[mode]);
        ASSERT_TRUE(m.ok()) << m.status().message();
        (*m)->init_params(5);
        (*m)->zero_grads();
        losses[mode * dp + rank] =
            (*m)->forward(batch.inputs.data(), batch.targets.data(), B, T).loss;
        (*m)->backward(1.0f);
        ASSERT_TRUE((*m)->tp_status().ok()) << (*m)->tp_status().message();
        grads[mode * dp + rank].assign((*m)->grads(), (*m)->grads() + (*m)->num_floats());
      }
    });
    for (int rank = 0; rank < dp; ++rank)
      for (int mode = 1; mode < 3; ++mode) {
        const std::string what =
            s.name + " ep=2 rank " + std::to_string(rank) + " " + name_of(kModes[mode]);
        EXPECT_EQ(losses[mode * dp + rank], losses[rank]) << what;
        EXPECT_EQ(grads[mode * dp + rank], grads[rank]) << what;
      }
  }
}

// ZeRO-3 gathers a block's parameters at kBeforeBackward and releases them after its
// backward; full recomputation reads them in between. Two steps over two ranks: the second
// step's loss depends on the first step's gradients, which would be garbage if recomputation
// ran on released parameters.
TEST(RecomputeTest, ZeroThreeGathersTheRecomputedBlock) {
  set_num_threads(1);
  const ModelSpec s = shipped("gpt_tiny");
  const int P = 2, B = 2, T = 24;
  std::vector<double> losses(3 * P * 2);
  for (int mode = 0; mode < 3; ++mode) {
    test::run_group("shm", P, [&](int rank, comm::Group& g) {
      auto m = Model::create(s, B, T, {}, {}, {}, kModes[mode]);
      ASSERT_TRUE(m.ok());
      (*m)->init_params(8);
      train::DataParallelConfig dc;
      dc.zero = 3;
      auto dp = train::DataParallelEngine::create(**m, g, optim::AdamWConfig{}, dc, 2);
      ASSERT_TRUE(dp.ok()) << dp.status().message();
      ASSERT_TRUE((*dp)->adopt_params().ok());
      for (int step = 0; step < 2; ++step) {
        (*dp)->zero_grads();
        const Batch batch = make_batch(s, B, T, 70 + 2 * step + rank);
        losses[(mode * P + rank) * 2 + step] =
            (*m)->forward(batch.inputs.data(), batch.targets.data(), B, T).loss;
        parallel::StepComm stats;
        ASSERT_TRUE((*dp)->backward_and_reduce(1.0f, &stats).ok());
        ASSERT_TRUE((*dp)->step(1e-3f).ok());
      }
    });
  }
  for (int i = 0; i < P * 2; ++i) {
    EXPECT_EQ(losses[P * 2 + i], losses[i]) << "selective " << i;
    EXPECT_EQ(losses[2 * P * 2 + i], losses[i]) << "full " << i;
  }
}

// The arena Model::create allocates is the planner's prediction for the same strategy, byte
// for byte (the recomputed layer's buffers are the planner's staging), and the run's total is
// parameters, gradients, AdamW's two moments and that arena.
TEST(RecomputeTest, ArenaIsThePlannersFigure) {
  for (const ModelSpec& m :
       {shipped("gpt_tiny"), shipped("moe_bert_tiny"), mixed_moe(), narrow_moe()}) {
    for (auto [B, T] : {std::pair{1, 1}, {2, m.seq_length / 2 + 1}, {3, m.seq_length}}) {
      for (Recompute r : kModes) {
        auto model = Model::create(m, B, T, {}, {}, {}, r);
        ASSERT_TRUE(model.ok()) << model.status().message();
        plan::Strategy st;
        st.dp = 1;
        st.gbs = 0;
        st.recompute = r;
        auto e = plan::predict_engine_memory(m, st, B, T);
        ASSERT_TRUE(e.ok()) << e.status().message();
        const double arena = static_cast<double>((*model)->activation_bytes());
        const std::string what =
            m.name + " " + std::to_string(B) + "x" + std::to_string(T) + " recompute=" + name_of(r);
        EXPECT_EQ(e->activations + e->staging, arena) << what;
        EXPECT_EQ(e->total, 16.0 * (*model)->num_floats() + arena) << what;
      }
    }
  }
  // By hand from the arena's pieces for gpt_tiny (dense only): selective keeps all but the
  // probabilities and holds one layer's; full keeps the outputs and holds one layer's rest.
  const ModelSpec g = shipped("gpt_tiny");
  const int L = g.num_hidden_layers;
  const plan::EngineArena a = plan::engine_arena(g, 2, 64);
  auto bytes = [&](Recompute r) {
    auto model = Model::create(g, 2, 64, {}, {}, {}, r);
    return static_cast<double>((*model)->activation_bytes());
  };
  EXPECT_EQ(bytes(Recompute::kNone), 4 * a.total(g));
  EXPECT_EQ(bytes(Recompute::kSelective), 4 * (a.total(g) - (L - 1) * a.attention_lse));
  EXPECT_EQ(bytes(Recompute::kFull), 4 * (a.embedding + L * a.layer_output + a.head + a.scratch +
                                          a.dense_layer - a.layer_output));
}

TEST(RecomputeTest, ArenaShrinksNoneSelectiveFull) {
  const ModelSpec g = shipped("gpt_tiny");
  double mib[3];
  for (int i = 0; i < 3; ++i) {
    auto m = Model::create(g, 8, g.seq_length, {}, {}, {}, kModes[i]);
    ASSERT_TRUE(m.ok());
    mib[i] = static_cast<double>((*m)->activation_bytes()) / (1 << 20);
  }
  std::printf("gpt_tiny 8x%d activations: none %.1f MiB, selective %.1f MiB, full %.1f MiB\n",
              g.seq_length, mib[0], mib[1], mib[2]);
  EXPECT_LT(mib[1], mib[0]);
  EXPECT_LT(mib[2], mib[1]);
}

// ---- Through the binary -------------------------------------------------------------------

class MultiProcRecomputeTest : public ::testing::Test {
 protected:
  std::vector<nlohmann::json> train(const std::string& name, std::vector<std::string> extra,
                                    std::string* output = nullptr,
                                    const std::string& model = "gpt_tiny") {
    const auto r = test::run_cann(test::RunArgs().comparison_run(model, 20)
                                      .sample_tokens(0)
                                      .log_json(dir_.file(name + ".jsonl"))
                                      .flags(extra),
                                  240);
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.output;
    if (output != nullptr) *output = r.output;
    std::vector<nlohmann::json> rows;
    std::ifstream f(dir_.file(name + ".jsonl"));
    for (std::string line; std::getline(f, line);) rows.push_back(nlohmann::json::parse(line));
    return rows;
  }
  test::TempDir dir_;
};

// Tolerance as in model_parallel_test.cc: 1e-4 of the loss at every step (the model-parallel
// runs differ from one process in fp32 summation order; recomputation itself adds nothing).
// One process with recomputation prints the planner's figure exactly (+0.0%).
TEST_F(MultiProcRecomputeTest, FollowsTheSingleProcessLoss) {
  const auto want = train("single", {"--threads", "1", "--quiet"});
  ASSERT_EQ(want.size(), 20u);
  struct Case {
    std::string name;
    std::vector<std::string> flags;
  };
  const std::vector<Case> cases = {
      {"single_full", {"--threads", "1", "--strategy", "mbs=8,recompute=full"}},
      {"single_selective", {"--threads", "1", "--strategy", "mbs=8,recompute=selective"}},
      {"tp2_full", {"--nproc-per-node", "2", "--strategy", "tp=2,recompute=full", "--quiet"}},
      {"pp2_selective",
       {"--nproc-per-node", "2", "--strategy", "pp=2,mbs=2,recompute=selective", "--quiet"}},
  };
  for (const Case& c : cases) {
    std::string out;
    const auto rows = train(c.name, c.flags, &out);
    ASSERT_EQ(rows.size(), 20u) << c.name;
    double worst_rel = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      const double a = want[i]["loss"].get<double>(), b = rows[i]["loss"].get<double>();
      worst_rel = std::max(worst_rel, std::abs(a - b) / std::abs(a));
    }
    if (c.name.rfind("single", 0) == 0) {
      EXPECT_EQ(worst_rel, 0.0) << c.name;  // the same kernels on the same data
      EXPECT_NE(out.find("(+0.0%)"), std::string::npos) << out;
    }
    EXPECT_LT(worst_rel, 1e-4) << c.name;
    std::printf("gpt_tiny %-17s vs one process: max relative loss deviation %.2e\n", c.name.c_str(),
                worst_rel);
  }
}

// MoE layers through the binary: full recomputation (which keeps no per-token expert
// assignments, only the counts the step log reads) trains exactly the steps of none, in one
// process and under tp=2 with sp, where the recomputed layer gathers its tokens and routes
// them all again on every rank.
TEST_F(MultiProcRecomputeTest, MoeFullRecomputationTrainsTheSameSteps) {
  struct Run {
    std::string name, strategy;
    std::vector<std::string> flags;
  };
  for (const Run& r : {Run{"single", "mbs=4", {"--threads", "1"}},
                       Run{"tp2_sp", "tp=2,sp=on,mbs=4", {"--nproc-per-node", "2", "--quiet"}}}) {
    std::vector<std::string> none = r.flags, full = r.flags;
    none.insert(none.end(), {"--strategy", r.strategy});
    full.insert(full.end(), {"--strategy", r.strategy + ",recompute=full"});
    const auto want = train("moe_" + r.name, none, nullptr, "moe_bert_tiny");
    const auto got = train("moe_" + r.name + "_full", full, nullptr, "moe_bert_tiny");
    ASSERT_EQ(want.size(), 20u) << r.name;
    ASSERT_EQ(got.size(), 20u) << r.name;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i]["loss"].get<double>(), want[i]["loss"].get<double>()) << r.name << " " << i;
      EXPECT_EQ(got[i]["dropped_assignments"], want[i]["dropped_assignments"])
          << r.name << " " << i;
    }
  }
}

}  // namespace
}  // namespace cann
