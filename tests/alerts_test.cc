// Alerts on what the hub receives: a loss spike on rank 0 raises one alert (not one per step
// of the shift), a slow rank is named as a straggler, and alerts reach a webhook as JSON. Also
// the TensorBoard scalars of a real run.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/rng.h"
#include "monitor/alerts.h"
#include "monitor/hub.h"
#include "run_args.h"
#include "test_util.h"

namespace cann::monitor {
namespace {

RankSnapshot step_of(int rank, int64_t step, double loss, double backward) {
  RankSnapshot s;
  s.rank = rank;
  s.host = std::string("h").append(std::to_string(rank / 8));
  s.step = step;
  s.time = 1796230000.0 + step;
  s.loss = loss;
  s.grad_norm = 1.0;
  s.forward_s = 0.1;
  s.backward_s = backward;
  s.step_time_s = 0.1 + backward;
  return s;
}

size_t alerts_in(const Hub& hub) {
  const auto events = nlohmann::json::parse(hub.events_json(1000));
  size_t n = 0;
  for (const auto& e : events) n += e["event"] == "alert";
  return n;
}

TEST(AlertTest, LossSpikeRaisesOneAlert) {
  Hub hub("job", 1);
  AlertConfig c;
  c.straggler_interval_s = 1e9;  // not under test here
  AlertEngine alerts(hub, "job", c);
  hub.set_observer([&](const RankSnapshot& s) { alerts.observe(s); });
  Rng rng(3);
  for (int64_t step = 1; step <= 400; ++step) {
    double loss = 3.0 + 0.02 * rng.normal();
    if (step >= 300) loss += 1.0;  // a jump that stays: one alert, then quiet
    hub.update(step_of(0, step, loss, 0.2));
  }
  EXPECT_EQ(alerts_in(hub), 1u) << hub.events_json(10);
  EXPECT_NE(hub.events_json(10).find("loss"), std::string::npos);
}

// A diverged loss crosses the wire as JSON, where NaN is null: the hub must still see NaN, raise
// the non-finite alert, and export the gauge as NaN, never as a plausible 0.
TEST(AlertTest, NanLossThroughJsonRaisesTheNonFiniteAlert) {
  Hub hub("job", 1);
  AlertConfig c;
  c.straggler_interval_s = 1e9;
  AlertEngine alerts(hub, "job", c);
  hub.set_observer([&](const RankSnapshot& s) { alerts.observe(s); });
  for (int64_t step = 1; step <= 20; ++step) {
    const double loss = step < 15 ? 3.0 - 0.01 * step : std::nan("");
    auto wire = RankSnapshot::from_json(step_of(0, step, loss, 0.2).to_json());
    ASSERT_TRUE(wire.ok()) << wire.status().message();
    EXPECT_EQ(std::isnan(wire->loss), step >= 15) << step;
    hub.update(*wire);
  }
  const std::string events = hub.events_json(10);
  EXPECT_GE(alerts_in(hub), 1u) << events;
  EXPECT_NE(events.find("nan"), std::string::npos) << events;
  EXPECT_NE(hub.prometheus_text().find("cann_train_loss{job=\"job\",rank=\"0\",host=\"h0\"} NaN"),
            std::string::npos)
      << hub.prometheus_text();
  // A missing figure is not a diverged one.
  auto bare = RankSnapshot::from_json("{\"rank\": 1}");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->loss, 0.0);
  EXPECT_EQ(bare->val_loss, -1.0);
}

TEST(AlertTest, SlowRankIsNamedOnce) {
  Hub hub("job", 16);
  AlertConfig c;
  c.straggler_interval_s = 1e9;
  AlertEngine alerts(hub, "job", c);
  Rng rng(5);
  for (int64_t step = 1; step <= 30; ++step)
    for (int r = 0; r < 16; ++r)
      hub.update(step_of(r, step, 3.0, (r == 11 ? 0.36 : 0.2) * (1.0 + 0.02 * rng.normal())));
  alerts.check_stragglers();
  alerts.check_stragglers();  // still slow: not named twice
  const std::string events = hub.events_json(10);
  EXPECT_EQ(alerts_in(hub), 1u) << events;
  EXPECT_NE(events.find("rank 11 on host h1: backward 1.8x the median"), std::string::npos)
      << events;
}

TEST(AlertTest, AlertsReachTheWebhook) {
  httplib::Server receiver;
  std::mutex mu;
  std::vector<std::string> bodies;
  receiver.Post("/hook", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    bodies.push_back(req.body);
    res.set_content("ok", "text/plain");
  });
  const int port = receiver.bind_to_any_port("127.0.0.1");
  std::thread t([&] { receiver.listen_after_bind(); });
  {
    Hub hub("job-w", 1);
    AlertConfig c;
    c.routes.webhooks = {"http://127.0.0.1:" + std::to_string(port) + "/hook"};
    c.straggler_interval_s = 1e9;
    AlertEngine alerts(hub, "job-w", c);
    hub.set_observer([&](const RankSnapshot& s) { alerts.observe(s); });
    Rng rng(7);
    for (int64_t step = 1; step <= 200; ++step)
      hub.update(step_of(0, step, 3.0 + 0.01 * rng.normal() + (step == 150 ? 2.0 : 0.0), 0.2));
    for (int i = 0; i < 50; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::lock_guard<std::mutex> lock(mu);
      if (!bodies.empty()) break;
    }
  }
  receiver.stop();
  t.join();
  ASSERT_EQ(bodies.size(), 1u);
  const auto j = nlohmann::json::parse(bodies[0]);
  EXPECT_EQ(j["job"], "job-w");
  EXPECT_NE(j["alert"].get<std::string>().find("loss spike at step 150"), std::string::npos)
      << bodies[0];
}

TEST(AlertTest, TensorBoardScalarsFromARealRun) {
  test::TempDir dir;
  test::write_text(dir.file("m.yaml"),
                   "architecture: gpt\nhidden_size: 32\nnum_hidden_layers: 1\n"
                   "num_attention_heads: 2\nvocab_size: 256\nseq_length: 32\n");
  const auto r =
      test::run_cann(test::RunArgs()
                         .model(dir.file("m.yaml"))
                         .steps(5)
                         .batch_size(4)
                         .seq_len(16)
                         .quiet()
                         .sample_tokens(0)
                         .monitor("tensorboard")
                         .flag("--tensorboard-dir", dir.file("tb")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("tb")))
    files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].filename().string().rfind("events.out.tfevents.", 0), 0u);
  const std::string bytes = test::read_text(files[0].string());
  for (const char* tag : {"train/loss", "train/learning_rate", "perf/tokens_per_second",
                          "eval/loss", "perf/compute_utilization", "memory/fragmentation_bytes"})
    EXPECT_NE(bytes.find(tag), std::string::npos) << tag;
}

}  // namespace
}  // namespace cann::monitor
