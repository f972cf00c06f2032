// `cann-train debug replay`: the collective sequence read from a profile trace (order by
// sequence number, sizes, what is skipped), errors on files that are not usable traces, and a
// real replay of a recorded 2-rank run that issues the same ops in the same order.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "debug/trace_replay.h"
#include "run_args.h"
#include "test_util.h"

namespace cann {
namespace {

std::string event(int pid, const std::string& cat, const std::string& name, int seq, double bytes,
                  double ts) {
  nlohmann::json e = {{"ph", "X"},    {"pid", pid}, {"tid", 2},   {"cat", cat},
                      {"name", name}, {"ts", ts},   {"dur", 50.0}};
  e["args"] = {{"seq", seq},
               {"bytes", bytes},
               {"group_size", 2},
               {"tag", std::string("t").append(std::to_string(seq))}};
  return e.dump();
}

std::string wrap(const std::string& events) {
  std::string s = "{\"traceEvents\":[";
  s += events;
  s += "]}";
  return s;
}

TEST(ReplayPlanTest, OrdersBySequenceAndSkipsWhatCannotBeReplayed) {
  std::string events = event(1, "collective", "allreduce", 5, 64, 9);
  for (const std::string& e :
       {event(1, "collective", "allgather", 4, 32, 10), event(1, "p2p", "send", 6, 8, 11),
        event(1, "collective", "alltoallv", 7, 0, 12), event(2, "collective", "barrier", 1, 0, 1)})
    events += "," + e;
  const std::string trace = wrap(events);
  auto plan = debug::parse_replay_plan(trace, "t.json");
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->rank, 1);
  EXPECT_EQ(plan->ranks_in_file, (std::vector<int>{1, 2}));
  EXPECT_EQ(plan->group_size, 2);
  ASSERT_EQ(plan->ops.size(), 2u);
  EXPECT_EQ(plan->ops[0].op, "allgather");  // seq 4 before seq 5, whatever the file order
  EXPECT_EQ(plan->ops[0].bytes, 32u);
  EXPECT_EQ(plan->ops[1].op, "allreduce");
  EXPECT_EQ(plan->ops[1].tag, "t5");
  EXPECT_NEAR(plan->ops[1].recorded_s, 50e-6, 1e-12);
  EXPECT_EQ(plan->skipped, 2);
  auto two = debug::parse_replay_plan(trace, "t.json", 2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->ops[0].op, "barrier");
  EXPECT_DOUBLE_EQ(debug::bus_bandwidth_factor("allreduce", 4), 1.5);
  EXPECT_DOUBLE_EQ(debug::bus_bandwidth_factor("allgather", 4), 3.0);
}

TEST(ReplayPlanTest, UnusableTracesAreErrors) {
  for (const std::string& bad :
       {std::string("[1,2]"), std::string("{\"traceEvents\":[]}"), std::string("garbage"),
        wrap(event(0, "collective", "frobnicate", 1, 4, 1)),
        std::string("{\"traceEvents\":[{\"ph\":\"X\",\"pid\":0,\"cat\":\"collective\","
                    "\"name\":\"allreduce\",\"args\":{}}]}")}) {
    auto plan = debug::parse_replay_plan(bad, "bad.json");
    EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(plan.status().message().find("bad.json"), std::string::npos);
  }
  const std::string ok = wrap(event(0, "collective", "allreduce", 1, 4, 1));
  EXPECT_EQ(debug::parse_replay_plan(ok, "x", 3).status().code(), StatusCode::kInvalidArgument);
  test::TempDir dir;
  test::write_text(dir.file("t.json"), "{\"traceEvents\": 5}");
  const auto r = test::run_cann({"debug", "replay", dir.file("t.json")}, 30);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("not a Chrome trace"), std::string::npos) << r.output;
}

TEST(MultiProcReplayTest, ReplaysARecordedRunInOrder) {
  test::TempDir dir;
  test::write_text(dir.file("m.yaml"),
                   "architecture: gpt\nhidden_size: 32\nnum_hidden_layers: 2\n"
                   "num_attention_heads: 2\nvocab_size: 256\nseq_length: 32\n");
  const auto run = test::run_cann(test::RunArgs()
                                      .model(dir.file("m.yaml"))
                                      .steps(6)
                                      .batch_size(8)
                                      .seq_len(16)
                                      .sample_tokens(0)
                                      .eval_every(0)
                                      .nproc(2)
                                      .flag("--profile", "wait=1,warmup=1,active=3")
                                      .flag("--profile-dir", dir.file("prof")),
                                  120);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // The recorded sequence of rank 0, by sequence number.
  const auto trace = nlohmann::json::parse(test::read_text(dir.file("prof/trace.json")));
  std::vector<std::tuple<int, std::string, double, std::string>> recorded;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["pid"] == 0 && e["cat"] == "collective")
      recorded.emplace_back(e["args"]["seq"].get<int>(), e["name"], e["args"]["bytes"],
                            e["args"]["tag"]);
  }
  std::sort(recorded.begin(), recorded.end());
  ASSERT_GE(recorded.size(), 6u);  // 3 steps x (gradient buckets + the step's scalars)

  const auto r = test::run_cann({"debug", "replay", dir.file("prof/trace.json"), "--repeat", "2",
                                 "--json", dir.file("replay.json")},
                                120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("recorded over 2 ranks, replayed over 2"), std::string::npos) << r.output;
  const auto rep = nlohmann::json::parse(test::read_text(dir.file("replay.json")));
  ASSERT_EQ(rep["ops"].size(), recorded.size());
  EXPECT_EQ(rep["replay_group_size"], 2);
  for (size_t i = 0; i < recorded.size(); ++i) {
    const auto& op = rep["ops"][i];
    EXPECT_EQ(op["recorded_seq"].get<int>(), std::get<0>(recorded[i])) << i;
    EXPECT_EQ(op["op"], std::get<1>(recorded[i])) << i;
    EXPECT_EQ(op["bytes"].get<double>(), std::get<2>(recorded[i])) << i;
    EXPECT_EQ(op["tag"], std::get<3>(recorded[i])) << i;
    EXPECT_GT(op["replay_s"].get<double>(), 0.0) << i;
  }
}

}  // namespace
}  // namespace cann
