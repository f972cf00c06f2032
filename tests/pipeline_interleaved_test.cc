// Interleaved 1F1B (vpp > 1). The schedule: every stage's op list runs each (micro-batch,
// chunk) forward once and its backward once after it, never holds two live pairs in one slot,
// and the stages' lists together run to the end (an event simulation with asynchronous sends
// and blocking receives), with every pair of ranks seeing the same message order in each
// direction (what the runner's ordered per-direction streams need); for pp 2..4, vpp 2..3 and
// M = pp, 2pp, 3pp. The engine, stages as threads over shared memory: gpt and moe_bert with
// pp=2 x vpp=2, pp=2 x vpp=4 and pp=4 x vpp=2, laid out by ModelParallel as `run` does, sum
// to the single-process loss and give every tensor the single-process gradient (the tied
// embedding synchronized); evaluation's forward_only gives the same loss; and the memory the
// stages allocate is what the planner predicts for the strategy.
//
// Tolerance as in pipeline_test.cc: 2e-5 of each tensor's largest gradient (the split changes
// only the summation order of the tied embedding's two copies).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "comm_test_util.h"
#include "core/rng.h"
#include "core/threads.h"
#include "model/model.h"
#include "model/param_table.h"
#include "parallel/pipeline_runner.h"
#include "parallel/pipeline_schedule.h"
#include "plan/engine_memory.h"
#include "plan/strategy.h"
#include "strategy_checks.h"
#include "test_util.h"
#include "train/model_parallel.h"

namespace cann {
namespace {

using parallel::PipelineOp;
using parallel::PipelineSchedule;
constexpr PipelineSchedule kI = PipelineSchedule::kInterleaved;

std::string str(const std::vector<PipelineOp>& ops) {
  std::string s;
  for (const auto& o : ops) {
    s += o.forward ? 'F' : 'B';
    s += std::to_string(o.micro);
    s += '.';
    s += std::to_string(o.chunk);
    s += ' ';
  }
  return s;
}

// The example of docs/model-parallel.md: P = 2, V = 2, M = 4 (op "F1.0": forward of
// micro-batch 1 through the stage's chunk 0).
TEST(InterleavedScheduleTest, FollowsMegatronOrder) {
  EXPECT_EQ(str(parallel::pipeline_ops(kI, 0, 2, 4, 2)),
            "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0 ");
  EXPECT_EQ(str(parallel::pipeline_ops(kI, 1, 2, 4, 2)),
            "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0 ");
  // Stage 0 holds 5 chunk activations at most (warm-up 4, plus one), stage 1 holds 3.
  EXPECT_EQ(parallel::pipeline_slots(kI, 0, 2, 4, 2), 5);
  EXPECT_EQ(parallel::pipeline_slots(kI, 1, 2, 4, 2), 3);
  // M = P: stage 0's warm-up covers every forward.
  EXPECT_EQ(str(parallel::pipeline_ops(kI, 0, 2, 2, 2)),
            "F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0 ");
  EXPECT_EQ(parallel::pipeline_slots(kI, 0, 2, 2, 2), 4);
}

// Each stage alone: complete, forwards before backwards, slots never shared by live pairs, at
// most warm-up + 1 pairs live, and the last backward of each chunk (micro-batch M-1) in
// descending chunk order, so the reduction sees layers finish from the top down.
TEST(InterleavedScheduleTest, EachStageRunsEveryPairOnceInItsSlot) {
  for (int P : {2, 3, 4})
    for (int V : {2, 3})
      for (int M : {P, 2 * P, 3 * P})
        for (int s = 0; s < P; ++s) {
          const std::string what = "P=" + std::to_string(P) + " V=" + std::to_string(V) +
                                   " M=" + std::to_string(M) + " stage " + std::to_string(s);
          const auto ops = parallel::pipeline_ops(kI, s, P, M, V);
          const int slots = parallel::pipeline_slots(kI, s, P, M, V);
          ASSERT_EQ(ops.size(), 2u * M * V) << what;
          std::map<std::pair<int, int>, int> live;  // (micro, chunk) -> slot
          std::set<std::pair<int, int>> done;
          std::vector<int> slot_owner(slots, 0);
          int worst = 0;
          std::vector<int> last_chunks;
          for (const PipelineOp& op : ops) {
            const auto key = std::make_pair(op.micro, op.chunk);
            ASSERT_TRUE(op.slot >= 0 && op.slot < slots) << what;
            if (op.forward) {
              ASSERT_FALSE(live.count(key) || done.count(key)) << what;
              ASSERT_EQ(slot_owner[op.slot], 0) << what << ": slot " << op.slot << " in use";
              slot_owner[op.slot] = 1;
              live[key] = op.slot;
              worst = std::max(worst, static_cast<int>(live.size()));
            } else {
              ASSERT_TRUE(live.count(key)) << what << ": backward before forward";
              ASSERT_EQ(live[key], op.slot) << what;
              slot_owner[op.slot] = 0;
              live.erase(key);
              done.insert(key);
              if (op.micro == M - 1) last_chunks.push_back(op.chunk);
            }
          }
          EXPECT_TRUE(live.empty()) << what;
          EXPECT_EQ(worst, slots) << what;
          EXPECT_EQ(worst, std::min(M * V, (P - 1 - s) * 2 + (V - 1) * P + 1)) << what;
          std::vector<int> descending(V);
          for (int c = 0; c < V; ++c) descending[c] = V - 1 - c;
          EXPECT_EQ(last_chunks, descending) << what;
        }
}

// All stages together: virtual stage c*P + s feeds c*P + s + 1. Sends never block; a forward
// waits for its input, a backward for its output's gradient. Every op must run (no deadlock),
// and between each ordered pair of ranks each direction's messages are received in the order
// they were sent.
TEST(InterleavedScheduleTest, StagesTogetherNeverDeadlock) {
  for (int P : {2, 3, 4})
    for (int V : {2, 3})
      for (int M : {P, 2 * P, 3 * P}) {
        const std::string what =
            "P=" + std::to_string(P) + " V=" + std::to_string(V) + " M=" + std::to_string(M);
        const int stages = P * V;
        std::vector<std::vector<PipelineOp>> ops(P);
        for (int s = 0; s < P; ++s) ops[s] = parallel::pipeline_ops(kI, s, P, M, V);
        // sent[{dir, from, to}]: messages (virtual stage, micro) in send order; got: receives.
        std::map<std::tuple<int, int, int>, std::vector<std::pair<int, int>>> sent, got;
        std::set<std::tuple<int, int, int>> arrived;  // (dir, receiving virtual stage, micro)
        std::vector<size_t> next(P, 0);
        size_t left = 2u * P * M * V;
        while (left > 0) {
          bool progress = false;
          for (int s = 0; s < P; ++s) {
            while (next[s] < ops[s].size()) {
              const PipelineOp& op = ops[s][next[s]];
              const int vs = op.chunk * P + s;
              const int dir = op.forward ? 0 : 1;
              const bool needs = op.forward ? vs > 0 : vs < stages - 1;
              if (needs && !arrived.count({dir, vs, op.micro})) break;
              if (needs)
                got[{dir, op.forward ? (s + P - 1) % P : (s + 1) % P, s}].push_back({vs, op.micro});
              const bool sends = op.forward ? vs < stages - 1 : vs > 0;
              if (sends) {
                const int to_vs = op.forward ? vs + 1 : vs - 1;
                arrived.insert({dir, to_vs, op.micro});
                sent[{dir, s, to_vs % P}].push_back({to_vs, op.micro});
              }
              ++next[s];
              --left;
              progress = true;
            }
          }
          ASSERT_TRUE(progress) << what << ": deadlock";
        }
        EXPECT_EQ(sent, got) << what;
      }
}

// --pipeline-schedule against the strategy: auto picks interleaved with vpp > 1; an explicit
// gpipe or 1f1b with vpp > 1, interleaved with vpp = 1, and micro-batches that are not a
// multiple of pp are one-line errors with a hint (exit 2), also at launch.
TEST(InterleavedScheduleTest, ScheduleFlagAgainstTheStrategy) {
  plan::Strategy vpp2;
  vpp2.pp = 2;
  vpp2.vpp = 2;
  plan::Strategy plain;
  plain.pp = 2;
  EXPECT_EQ(*train::resolve_pipeline_schedule("auto", vpp2, 4, ""), kI);
  EXPECT_EQ(*train::resolve_pipeline_schedule("interleaved", vpp2, 2, ""), kI);
  EXPECT_EQ(*train::resolve_pipeline_schedule("auto", plain, 3, ""), PipelineSchedule::k1F1B);
  EXPECT_EQ(*train::resolve_pipeline_schedule("gpipe", plain, 3, ""), PipelineSchedule::kGPipe);
  auto refused = [](StatusOr<PipelineSchedule> r, const std::string& part) {
    ASSERT_FALSE(r.ok()) << part;
    EXPECT_NE(r.status().message().find(part), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("hint:"), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
    EXPECT_EQ(r.status().exit_code(), 2);
  };
  refused(train::resolve_pipeline_schedule("1f1b", vpp2, 4, ""), "--pipeline-schedule 1f1b");
  refused(train::resolve_pipeline_schedule("gpipe", vpp2, 4, ""), "--pipeline-schedule gpipe");
  refused(train::resolve_pipeline_schedule("interleaved", plain, 4, ""), "add vpp=2");
  refused(train::resolve_pipeline_schedule("auto", vpp2, 3, ""), "not a multiple of pp=2");
  // At launch: gbs 8 over mbs 8 is one micro-batch; gpt_tiny's 4 layers do not cut into 6.
  const std::string model = "gpt_tiny";
  EXPECT_TRUE(test::check_launch("pp=2,vpp=2,mbs=2", model, 2, {8, 0, ""}).ok());
  refused(test::check_launch("pp=2,vpp=2,mbs=8", model, 2, {8, 0, ""}),
          "runs 1 micro-batches per step");
  refused(test::check_launch("pp=2,vpp=2", model, 2, {8, 2, "1f1b"}),
          "--pipeline-schedule 1f1b with vpp=2");
  refused(test::check_launch("pp=2,vpp=3,mbs=2", model, 2, {8, 0, ""}), "hint: use vpp in 1, 2");
}

// ---- The engine -----------------------------------------------------------------------------

const char kGpt8[] =
    "architecture: gpt\nhidden_size: 32\nnum_hidden_layers: 8\nnum_attention_heads: 4\n"
    "vocab_size: 61\nseq_length: 16\n";

constexpr int kB = 2, kT = 16;

void expect_interleaved_matches(const model::ModelSpec& s, int P, int V, int M) {
  set_num_threads(1);
  const std::string what =
      s.name + " pp=" + std::to_string(P) + " vpp=" + std::to_string(V) + " M=" + std::to_string(M);
  const test::RandomBatches data = test::random_batches(s, M, kB * kT, 17);
  const float scale = 1.0f / M;
  auto single = model::Model::create(s, kB, kT);
  ASSERT_TRUE(single.ok());
  (*single)->init_params(5);
  (*single)->zero_grads();
  double ref_loss = 0;
  for (int i = 0; i < M; ++i) {
    ref_loss += (*single)->forward(data.inputs[i].data(), data.targets[i].data(), kB, kT).loss;
    (*single)->backward(scale);
  }
  const double ref_eval =
      (*single)->forward(data.inputs[0].data(), data.targets[0].data(), kB, kT).loss;
  const model::ParamTable full = model::build_param_table(s);
  const std::vector<float> ref((*single)->grads(), (*single)->grads() + full.total_floats());

  std::vector<float> got(full.total_floats(), 0.0f);
  std::vector<double> losses(P, 0.0), evals(P, 0.0);
  std::vector<size_t> memory(P, 0);
  std::mutex mu;
  plan::Strategy layout;
  layout.mbs = kB;
  layout.pp = P;
  layout.vpp = V;
  test::run_group("shm", P, [&](int rank, comm::Group& world) {
    auto mp = train::ModelParallel::create(world, layout);
    ASSERT_TRUE(mp.ok()) << mp.status().message();
    const model::PipelineStage ps = (*mp)->pipeline_stage(s, kT, M, kI);
    ASSERT_EQ(ps.chunks.size(), static_cast<size_t>(V));
    auto m = model::Model::create(s, kB, kT, {}, ps);
    ASSERT_TRUE(m.ok()) << m.status().message();
    (*m)->init_params(5);
    (*m)->zero_grads();
    parallel::PipelineRunner runner(**m, world, (*mp)->pp_group(), (*mp)->stage_ranks(),
                                    (*mp)->stage());
    // The reduction hooks see the last backwards' layers from the top down.
    std::vector<int> reported;
    parallel::PipelineRunner::GradReduction red;
    bool begun = false;
    red.begin = [&] { begun = true; };
    red.layer_done = [&](int l) { reported.push_back(l); };
    red.finish = [&] { return OkStatus(); };
    auto st = runner.step(
        M, kB, kT, scale,
        [&](int i, const int** in, const int** tg) {
          *in = data.inputs[i].data();
          *tg = data.targets[i].data();
        },
        red);
    ASSERT_TRUE(st.ok()) << st.status().message();
    EXPECT_TRUE(begun);
    // Every layer the stage holds, once, from the top down (the final norm as layer L, the
    // embeddings as -1).
    std::set<int> held;
    for (const auto& t : (*m)->table().tensors()) held.insert(t.layer);
    EXPECT_EQ(reported, std::vector<int>(held.rbegin(), held.rend())) << what;
    ASSERT_TRUE((*mp)->sync_tied_embedding(**m).ok());
    auto ev = runner.forward_only(data.inputs[0].data(), data.targets[0].data(), kB, kT);
    ASSERT_TRUE(ev.ok()) << ev.status().message();
    std::lock_guard<std::mutex> lock(mu);
    losses[rank] = st->loss;
    evals[rank] = ev->loss;
    memory[rank] = (*m)->activation_bytes() + 16 * (*m)->num_floats();
    for (const auto& t : (*m)->table().tensors()) {
      if (t.name == "wte" && t.layer >= 0) {
        // The last stage's copy of the tied embedding, synchronized: the full gradient.
        const auto& whole = full.at(*full.find("wte"));
        for (size_t k = 0; k < t.numel; ++k)
          EXPECT_NEAR((*m)->grads()[t.offset + k], ref[whole.offset + k], 1e-6) << what;
        continue;
      }
      const auto& whole = full.at(*full.find(t.name));
      for (size_t k = 0; k < t.numel; ++k) got[whole.offset + k] += (*m)->grads()[t.offset + k];
    }
  });
  double total = 0, eval = 0;
  for (int r = 0; r < P; ++r) {
    total += losses[r];
    eval += evals[r];
  }
  EXPECT_NEAR(total, ref_loss, 1e-5) << what;
  EXPECT_NEAR(eval, ref_eval, 1e-5) << what;
  const double worst = test::expect_tensors_close(full, ref, got, 2e-5, what);
  // Parameters, gradients and AdamW's two moments (16 bytes a float) plus the arena: what the
  // planner predicts for the worst stage.
  plan::Strategy strategy;
  strategy.dp = 1;
  strategy.pp = P;
  strategy.vpp = V;
  strategy.mbs = kB;
  strategy.gbs = kB * M;
  auto predicted = plan::predict_engine_memory(s, strategy, kB, kT);
  ASSERT_TRUE(predicted.ok()) << predicted.status().message();
  const size_t engine = *std::max_element(memory.begin(), memory.end());
  EXPECT_EQ(static_cast<double>(engine), predicted->total) << what;
  std::printf("interleaved %-32s max gradient deviation %.2e, memory %zu bytes (planner %.0f)\n",
              what.c_str(), worst, engine, predicted->total);
}

model::ModelSpec spec_of(const char* yaml) {
  auto parsed = model::parse_model_spec(yaml, "test.yaml");
  EXPECT_TRUE(parsed.ok());
  return *parsed;
}

TEST(InterleavedPipelineTest, ShippedModelsMatchOneProcess) {
  for (const char* name : {"gpt_tiny", "moe_bert_tiny"}) {
    auto s = model::load_model_spec(name);
    ASSERT_TRUE(s.ok());
    expect_interleaved_matches(*s, 2, 2, 2);
    expect_interleaved_matches(*s, 2, 2, 6);
  }
}

TEST(InterleavedPipelineTest, MoreChunksAndStagesMatchOneProcess) {
  const model::ModelSpec gpt8 = spec_of(kGpt8);
  expect_interleaved_matches(gpt8, 2, 4, 4);
  expect_interleaved_matches(gpt8, 4, 2, 4);
  expect_interleaved_matches(gpt8, 4, 2, 12);
}

}  // namespace
}  // namespace cann
