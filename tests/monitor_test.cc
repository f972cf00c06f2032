// Monitoring: the Hub's Prometheus exposition (checked by promtool when installed, which the
// setup script does), the alert rules, the HTTP API with its token rule, snapshot round trips,
// and a live multi-process run whose agent gathers every rank.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "monitor/hub.h"
#include "monitor/server.h"
#include "monitor/snapshot.h"
#include "run_args.h"
#include "test_util.h"

namespace cann::monitor {
namespace {

RankSnapshot snapshot(int rank, int64_t step) {
  RankSnapshot s;
  s.rank = rank;
  s.host = "host\"" + std::to_string(rank);  // a quote that must be escaped in labels
  s.time = 1796230000.125 + step;
  s.step = step;
  s.total_steps = 100;
  s.samples = step * 16;
  s.loss = 3.5 - 0.01 * step;
  s.lr = 1e-3;
  s.grad_norm = 0.7;
  s.step_time_s = 0.2 + 0.1 * rank;
  s.forward_backward_s = 0.18;
  s.tokens_per_s = 10000;
  s.tflops_per_device = 0.05;
  s.comm_time_s = 0.05;
  s.comm_exposed_s = 0.01;
  s.comm_bytes_total = 1 << 20;
  s.memory_bytes = 123456789;
  s.resident_bytes = 223456789;
  s.compute_utilization = 0.625;
  s.nic_errors = {{"eth0", "rx_errors", 3}, {"mlx5_0/1", "symbol_error", 0}};
  s.expert_tokens = {10, 20, 30};
  s.expert_rows = 1000 + rank;
  return s;
}

bool have(const char* tool) {
  return std::system((std::string("command -v ") + tool + " >/dev/null 2>&1").c_str()) == 0;
}

TEST(MonitorTest, SnapshotRoundTripKeepsTimePrecision) {
  const RankSnapshot s = snapshot(3, 42);
  auto back = RankSnapshot::from_json(s.to_json());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->rank, 3);
  EXPECT_EQ(back->host, s.host);
  EXPECT_DOUBLE_EQ(back->time, s.time);  // millisecond resolution survives the text form
  EXPECT_EQ(back->expert_tokens, s.expert_tokens);
  EXPECT_EQ(back->expert_rows, 1003);
  EXPECT_EQ(back->resident_bytes, s.resident_bytes);
  EXPECT_EQ(back->compute_utilization, s.compute_utilization);
  ASSERT_EQ(back->nic_errors.size(), 2u);
  EXPECT_EQ(back->nic_errors[1].device, "mlx5_0/1");
  EXPECT_EQ(back->nic_errors[0].value, 3);
  EXPECT_FALSE(RankSnapshot::from_json("{not json").ok());
}

TEST(MonitorTest, PrometheusExpositionIsValid) {
  Hub hub("job-1", 2);
  hub.update(snapshot(0, 10));
  hub.update(snapshot(1, 10));
  hub.add_event({1796230000.0, "worker_exited", 1, "killed by signal 9"});
  const std::string text = hub.prometheus_text();
  EXPECT_NE(text.find("cann_train_step_seconds{job=\"job-1\",rank=\"1\",host=\"host\\\"1\"} 0.3"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("cann_train_tokens_per_second"), std::string::npos);
  EXPECT_NE(text.find("cann_train_comm_exposed_ratio"), std::string::npos);
  EXPECT_NE(text.find("cann_train_expert_tokens_total{job=\"job-1\",rank=\"0\",expert=\"2\"} 30"),
            std::string::npos);
  EXPECT_NE(text.find("cann_train_expert_rows_total{job=\"job-1\",rank=\"1\"} 1001"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("cann_train_events_total{job=\"job-1\",kind=\"worker_exited\"} 1"),
            std::string::npos);
  EXPECT_NE(text.find("cann_train_compute_utilization{job=\"job-1\",rank=\"1\",host=\"host\\\"1\"} "
                      "0.625"),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find(
          "cann_train_memory_fragmentation_bytes{job=\"job-1\",rank=\"0\",host=\"host\\\"0\"} "
          "100000000"),
      std::string::npos);
  // NIC counters are the host's: once per host, not once per rank.
  EXPECT_NE(
      text.find("cann_train_nic_errors_total{job=\"job-1\",host=\"host\\\"1\",device=\"eth0\","
                "counter=\"rx_errors\"} 3"),
      std::string::npos)
      << text;
  if (!have("promtool")) GTEST_SKIP() << "promtool (Debian package prometheus) not installed";
  test::TempDir dir;
  test::write_text(dir.file("metrics.txt"), text);
  const auto r =
      test::run_command({"/bin/sh", "-c", "promtool check metrics < " + dir.file("metrics.txt")});
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// promtool checks the rules, then runs their unit tests (alerts_test.yml), which must make every
// rule of alerts.yml fire.
TEST(MonitorTest, AlertRulesAreValidAndEachFires) {
  const std::string dir = std::string(CANN_SOURCE_DIR) + "/configs/prometheus/";
  const std::string rules = test::read_text(dir + "alerts.yml");
  const std::string tests = test::read_text(dir + "alerts_test.yml");
  int named = 0;
  for (size_t at = rules.find("- alert: "); at != std::string::npos;
       at = rules.find("- alert: ", at + 1), ++named) {
    const std::string name = rules.substr(at + 9, rules.find('\n', at) - at - 9);
    const size_t test = tests.find("alertname: " + name + "\n        exp_alerts:");
    EXPECT_NE(test, std::string::npos) << name << " has no test that fires it";
  }
  EXPECT_EQ(named, 8);
  if (!have("promtool")) GTEST_SKIP() << "promtool (Debian package prometheus) not installed";
  const auto check =
      test::run_command({"/bin/sh", "-c", "promtool check rules " + dir + "alerts.yml"});
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_NE(check.output.find("SUCCESS: 8 rules found"), std::string::npos) << check.output;
  const auto fire =
      test::run_command({"/bin/sh", "-c", "promtool test rules " + dir + "alerts_test.yml"});
  EXPECT_EQ(fire.exit_code, 0) << fire.output;
  EXPECT_NE(fire.output.find("SUCCESS"), std::string::npos) << fire.output;
}

TEST(MonitorTest, ServerRoutesAndToken) {
  Hub hub("job-2", 1);
  hub.update(snapshot(0, 7));
  ServerConfig c;
  c.port = 0;
  c.token = "sesame";
  MonitorServer server(hub, c);
  ASSERT_TRUE(server.start().ok());
  httplib::Client client("127.0.0.1", server.port());
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->get_header_value("Content-Type").find("version=0.0.4"), std::string::npos);
  auto status = client.Get("/api/status");
  ASSERT_TRUE(status);
  const auto j = nlohmann::json::parse(status->body);
  EXPECT_EQ(j["ranks"][0]["step"], 7);
  auto page = client.Get("/");
  ASSERT_TRUE(page);
  EXPECT_NE(page->body.find("<svg id=\"loss\""), std::string::npos);
  EXPECT_EQ(client.Get("/../CMakeLists.txt")->status, 404);
  // Changing anything needs the token.
  EXPECT_EQ(client.Post("/api/stop", "", "application/json")->status, 401);
  EXPECT_FALSE(server.stop_requested());
  httplib::Headers auth = {{"Authorization", "Bearer sesame"}};
  EXPECT_EQ(client.Post("/api/stop", auth, "", "application/json")->status, 200);
  EXPECT_TRUE(server.stop_requested());
}

// A kept-alive connection would keep a server thread waking every 11 ms on the training cores
// until the client went away: every answer closes its connection, even when asked to keep it.
TEST(MonitorTest, ServerClosesEachConnectionAfterItsAnswer) {
  Hub hub("job-3", 1);
  hub.update(snapshot(0, 3));
  ServerConfig c;
  c.port = 0;
  MonitorServer server(hub, c);
  ASSERT_TRUE(server.start().ok());
  httplib::Client client("127.0.0.1", server.port());
  client.set_keep_alive(true);
  for (const char* path : {"/metrics", "/api/status", "/api/series?since=0"}) {
    auto res = client.Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 200) << path;
    EXPECT_EQ(res->get_header_value("Connection"), "close") << path;
  }
}

TEST(MonitorTest, TakenPortIsAnErrorUnlessFallbackAllowed) {
  Hub hub("job-3", 1);
  ServerConfig c;
  c.port = 0;
  MonitorServer first(hub, c);
  ASSERT_TRUE(first.start().ok());
  ServerConfig same;
  same.port = first.port();
  MonitorServer second(hub, same);
  const Status s = second.start();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--monitor-port"), std::string::npos);
  same.try_next_ports = true;
  MonitorServer third(hub, same);
  ASSERT_TRUE(third.start().ok());
  EXPECT_GT(third.port(), first.port());
}

// A live job: two workers under the agent; the agent's /api/status shows both ranks stepping.
TEST(MultiProcMonitorTest, AgentGathersEveryRank) {
  test::TempDir dir;
  test::write_text(dir.file("m.yaml"),
                   "architecture: gpt\nhidden_size: 32\nnum_hidden_layers: 1\n"
                   "num_attention_heads: 2\nvocab_size: 256\nseq_length: 32\n");
  const int port = test::free_tcp_port();
  auto run = std::async(std::launch::async, [&] {
    test::RunArgs args;
    args.monitor("dashboard,prometheus").model(dir.file("m.yaml")).steps(100000).batch_size(8);
    args.seq_len(16).quiet().sample_tokens(0).nproc(2);
    return test::run_cann(
        args.flag("--monitor-port", port).flag("--monitor-token", "t0k"), 120);
  });
  httplib::Client client("127.0.0.1", port);
  nlohmann::json status;
  for (int i = 0; i < 100; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto r = client.Get("/api/status");
    if (!r || r->status != 200) continue;
    status = nlohmann::json::parse(r->body);
    if (status["ranks"].size() == 2 && status["ranks"][1]["step"].get<int>() > 5) break;
  }
  ASSERT_EQ(status["ranks"].size(), 2u) << status.dump();
  EXPECT_EQ(status["world_size"], 2);
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("rank=\"1\""), std::string::npos);
  httplib::Headers auth = {{"Authorization", "Bearer t0k"}};
  ASSERT_EQ(client.Post("/api/stop", auth, "", "application/json")->status, 200);
  const auto result = run.get();
  EXPECT_EQ(result.exit_code, 130) << result.output;
  EXPECT_NE(result.output.find("stop requested"), std::string::npos) << result.output;
}

// The dashboard in headless Chromium against a live job: the page renders data (the ranks
// table and the summary line are filled in), the screenshot is written for people to look at,
// and the page logs no console errors.
TEST(MultiProcMonitorTest, DashboardShowsALiveJobInChromium) {
  if (!have("chromium")) GTEST_SKIP() << "chromium (Debian package chromium) not installed";
  test::TempDir dir;
  test::write_text(dir.file("m.yaml"),
                   "architecture: bert\nhidden_size: 32\nnum_hidden_layers: 2\n"
                   "num_attention_heads: 2\nvocab_size: 257\nseq_length: 32\n"
                   "num_local_experts: 4\nnum_experts_per_tok: 2\n");
  const int port = test::free_tcp_port();
  auto run = std::async(std::launch::async, [&] {
    test::RunArgs args;
    args.monitor("dashboard,prometheus").model(dir.file("m.yaml")).steps(100000).batch_size(8);
    args.seq_len(32).quiet().sample_tokens(0).eval_every(10).nproc(2);
    return test::run_cann(
        args.flag("--monitor-port", port).flag("--monitor-token", "t0k"), 180);
  });
  httplib::Client client("127.0.0.1", port);
  for (int i = 0; i < 150; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto r = client.Get("/api/status");
    if (!r || r->status != 200) continue;
    const auto status = nlohmann::json::parse(r->body);
    if (status["ranks"].size() == 2 && status["ranks"][0]["step"].get<int>() >= 12) break;
  }
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/";
  const std::vector<std::string> chromium = {"/usr/bin/chromium",
                                             "--headless",
                                             "--no-sandbox",
                                             "--disable-gpu",
                                             "--disable-quic",
                                             "--no-first-run",
                                             "--disable-background-networking",
                                             "--disable-component-update",
                                             "--disable-sync",
                                             "--user-data-dir=" + dir.file("profile"),
                                             "--window-size=1400,1100",
                                             "--virtual-time-budget=5000",
                                             "--enable-logging=stderr",
                                             "--v=0"};
  auto dom_args = chromium;
  dom_args.insert(dom_args.end(), {"--dump-dom", url});
  const auto dom = test::run_command(dom_args, 90);
  // Screenshot next to the test binary, where it stays for a person to open.
  const std::string shot = (std::filesystem::current_path() / "dashboard_screenshot.png").string();
  auto shot_args = chromium;
  shot_args.insert(shot_args.end(), {"--screenshot=" + shot, url});
  const auto png = test::run_command(shot_args, 90);
  httplib::Headers auth = {{"Authorization", "Bearer t0k"}};
  client.Post("/api/stop", auth, "", "application/json");
  run.get();

  EXPECT_EQ(dom.exit_code, 0) << dom.output;
  EXPECT_NE(dom.output.find("2 ranks | step"), std::string::npos) << dom.output;
  EXPECT_NE(dom.output.find("<td>1</td>"), std::string::npos) << "ranks table not filled";
  EXPECT_EQ(dom.output.find("agent unreachable"), std::string::npos);
  EXPECT_EQ(dom.output.find("no data yet"), std::string::npos) << "a chart stayed empty";
  for (const auto* out : {&dom.output, &png.output}) {
    EXPECT_EQ(out->find("Uncaught"), std::string::npos) << *out;
    EXPECT_EQ(out->find(":CONSOLE("), std::string::npos) << "the page logged to the console";
  }
  ASSERT_EQ(png.exit_code, 0) << png.output;
  std::ifstream f(shot, std::ios::binary | std::ios::ate);
  ASSERT_TRUE(f.good()) << shot;
  // An empty page of this size compresses to a few KB; charts and tables are tens of KB.
  EXPECT_GT(static_cast<long>(f.tellg()), 30000L) << shot;
  std::printf("dashboard screenshot: %s\n", shot.c_str());
}

}  // namespace
}  // namespace cann::monitor
