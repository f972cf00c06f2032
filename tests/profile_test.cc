// `run --profile`: the schedule parser, the Chrome traces a 2-rank run writes (structure,
// tracks, nesting on each track, collectives with bytes and bandwidth, one merged file with a
// process per rank), and merge errors on files that are not traces.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "monitor/chrome_trace.h"
#include "run_args.h"
#include "test_util.h"
#include "train/step_profiler.h"

namespace cann {
namespace {

const char kTinyGpt[] =
    "architecture: gpt\nhidden_size: 32\nnum_hidden_layers: 2\nnum_attention_heads: 2\n"
    "vocab_size: 256\nseq_length: 32\n";

TEST(ProfileScheduleTest, ParsesAndRejects) {
  auto s = train::parse_profile_schedule("wait=5,warmup=1,active=3");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->wait, 5);
  EXPECT_EQ(s->warmup, 1);
  EXPECT_EQ(s->active, 3);
  auto d = train::parse_profile_schedule("active=2");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->wait, 0);
  EXPECT_EQ(d->warmup, 0);
  for (const char* bad :
       {"wait=1,active=0", "wait=-1", "wait", "steps=3", "wait=x", "active=2,", ""}) {
    EXPECT_EQ(train::parse_profile_schedule(bad).status().code(), StatusCode::kInvalidArgument)
        << bad;
  }
}

// The recorder skips `wait` steps, discards `warmup` and keeps `active`.
TEST(ProfileScheduleTest, StepProfilerKeepsOnlyActiveSteps) {
  test::TempDir dir;
  train::StepProfiler p({2, 1, 2}, dir.path(), 0, 1, "h");
  int finished_at = -1;
  for (int i = 0; i < 8; ++i) {
    p.begin_step(i, i + 1);
    EXPECT_EQ(p.recording(), i >= 2 && i < 5) << i;
    p.compute("step", 10.0 + i, 10.5 + i);
    if (p.end_step()) finished_at = i;
  }
  EXPECT_EQ(finished_at, 4);
  auto line = p.finish(nullptr);
  ASSERT_TRUE(line.ok()) << line.status().message();
  const auto doc = nlohmann::json::parse(test::read_text(dir.file("trace-rank0.json")));
  std::vector<int> steps;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "X") steps.push_back(e["args"]["step"].get<int>());
  EXPECT_EQ(steps, (std::vector<int>{4, 5}));
}

TEST(ProfileScheduleTest, MergeRejectsFilesThatAreNotTraces) {
  test::TempDir dir;
  test::write_text(dir.file("a.json"), "{\"traceEvents\": 3}");
  test::write_text(dir.file("b.json"), "not json at all");
  for (const char* name : {"a.json", "b.json"}) {
    Status s = monitor::merge_chrome_traces({dir.file(name)}, dir.file("out.json"));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << name;
    EXPECT_NE(s.message().find(name), std::string::npos) << s.message();
  }
  EXPECT_EQ(monitor::merge_chrome_traces({dir.file("missing.json")}, dir.file("out.json")).code(),
            StatusCode::kNotFound);
}

// Events of one track must nest: each span either ends before the next starts or contains it.
// Timestamps are microseconds of Unix time held in doubles (0.25 us resolution), and a parent
// span is measured by separate clock reads from its children, so allow 2 us.
void expect_nested(const std::vector<nlohmann::json>& events, const std::string& where) {
  std::vector<std::pair<double, double>> spans;
  for (const auto& e : events)
    spans.push_back({e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
  std::sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second > b.second;
  });
  constexpr double kSlackUs = 2.0;
  std::vector<double> open_ends;
  for (const auto& [begin, end] : spans) {
    while (!open_ends.empty() && open_ends.back() <= begin + kSlackUs) open_ends.pop_back();
    if (!open_ends.empty()) {
      EXPECT_LE(end, open_ends.back() + kSlackUs)
          << where << ": span [" << begin << ", " << end << "] overlaps its enclosing span's end "
          << open_ends.back();
    }
    open_ends.push_back(end);
  }
}

TEST(MultiProcProfileTest, TwoRanksWriteTracesAndOneMergedTrace) {
  test::TempDir dir;
  test::write_text(dir.file("m.yaml"), kTinyGpt);
  const auto r = test::run_cann(test::RunArgs()
                                    .model(dir.file("m.yaml"))
                                    .steps(8)
                                    .batch_size(8)
                                    .seq_len(16)
                                    .sample_tokens(0)
                                    .eval_every(0)
                                    .nproc(2)
                                    .flag("--checkpoint-dir", dir.file("ck"))
                                    .flag("--checkpoint-every", 4)
                                    .flag("--profile", "wait=2,warmup=1,active=3")
                                    .flag("--profile-dir", dir.file("prof")),
                                120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("profile: " + dir.file("prof/trace.json")), std::string::npos)
      << r.output;

  // Each rank's own file holds only its own pid.
  for (int rank = 0; rank < 2; ++rank) {
    const auto doc = nlohmann::json::parse(
        test::read_text(dir.file("prof/trace-rank" + std::to_string(rank) + ".json")));
    ASSERT_TRUE(doc["traceEvents"].is_array());
    for (const auto& e : doc["traceEvents"]) EXPECT_EQ(e["pid"], rank);
  }

  const auto doc = nlohmann::json::parse(test::read_text(dir.file("prof/trace.json")));
  ASSERT_TRUE(doc.contains("traceEvents"));
  std::map<int, std::string> processes;
  std::map<std::pair<int, int>, std::string> tracks;
  std::map<std::pair<int, int>, std::vector<nlohmann::json>> by_track;
  for (const auto& e : doc["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("tid") && e.contains("name"))
        << e.dump();
    const int pid = e["pid"], tid = e["tid"];
    if (e["ph"] == "M" && e["name"] == "process_name") processes[pid] = e["args"]["name"];
    if (e["ph"] == "M" && e["name"] == "thread_name") tracks[{pid, tid}] = e["args"]["name"];
    if (e["ph"] != "X") continue;
    ASSERT_TRUE(e["ts"].is_number() && e["dur"].is_number()) << e.dump();
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    by_track[{pid, tid}].push_back(e);
  }
  ASSERT_EQ(processes.size(), 2u);
  EXPECT_EQ(processes[0].rfind("rank 0", 0), 0u) << processes[0];
  EXPECT_EQ(processes[1].rfind("rank 1", 0), 0u) << processes[1];

  double first_ts[2] = {0, 0};
  for (int rank = 0; rank < 2; ++rank) {
    const int compute = static_cast<int>(monitor::TraceTrack::kCompute);
    const int coll = static_cast<int>(monitor::TraceTrack::kCollective);
    EXPECT_EQ(tracks[std::make_pair(rank, compute)], "compute");
    EXPECT_EQ(tracks[std::make_pair(rank, coll)], "collectives");
    std::map<std::string, int> names;
    std::set<int> steps;
    for (const auto& e : by_track[{rank, compute}]) {
      names[e["name"]]++;
      steps.insert(e["args"]["step"].get<int>());
    }
    // Steps 4, 5, 6 (wait 2, warmup 1, active 3), each with its phases.
    EXPECT_EQ(steps, (std::set<int>{4, 5, 6}));
    EXPECT_EQ(names["step"], 3);
    EXPECT_EQ(names["forward"], 3);
    EXPECT_EQ(names["backward"], 3);
    EXPECT_EQ(names["optimizer"], 3);
    // Every step's gradient all-reduce and loss all-reduce, with bytes and bandwidth.
    const auto& colls = by_track[{rank, coll}];
    ASSERT_GE(colls.size(), 6u);
    int grad_buckets = 0;
    for (const auto& e : colls) {
      EXPECT_EQ(e["name"], "allreduce");
      EXPECT_GT(e["args"]["bytes"].get<double>(), 0.0) << e.dump();
      EXPECT_GT(e["args"]["busbw_GBps"].get<double>(), 0.0) << e.dump();
      EXPECT_EQ(e["args"]["group_size"].get<int>(), 2);
      if (e["args"]["tag"] == "grad_bucket") ++grad_buckets;
    }
    EXPECT_GE(grad_buckets, 3);
    for (const auto& [key, events] : by_track) {
      if (key.first == rank)
        expect_nested(events,
                      "rank " + std::to_string(rank) + " track " + std::to_string(key.second));
    }
    first_ts[rank] = by_track[{rank, compute}].front()["ts"].get<double>();
  }
  // Rank 0 checkpointed at step 4, inside the window.
  const auto& ck = by_track[{0, static_cast<int>(monitor::TraceTrack::kCheckpoint)}];
  ASSERT_EQ(ck.size(), 1u);
  EXPECT_NE(ck[0]["args"]["path"].get<std::string>().find("step-00000004"), std::string::npos);
  // One wall clock: both ranks' first recorded step starts within a second of each other.
  EXPECT_LT(std::abs(first_ts[0] - first_ts[1]), 1e6);
}

}  // namespace
}  // namespace cann
