// The gauges the alert rules watch: compute utilisation, memory fragmentation and NIC error
// counters, read from /metrics while a run trains in this process (so the test reads the same
// process's VmRSS), plus the NIC reader on this host and on a made-up InfiniBand tree.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <sstream>
#include <thread>

#include "core/pages.h"
#include "monitor/nic_counters.h"
#include "test_util.h"
#include "train/trainer.h"

namespace cann {
namespace {

// name{labels} -> value, for the samples of /metrics whose line starts with `prefix`.
std::map<std::string, double> samples(const std::string& text, const std::string& prefix) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    const size_t space = line.rfind(' ');
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

TEST(NicCountersTest, LoopbackIsPresent) {
  std::map<std::string, int64_t> lo;
  for (const auto& c : monitor::read_nic_counters())
    if (c.device == "lo") lo[c.counter] = c.value;
  ASSERT_EQ(lo.size(), 4u);
  for (const char* name : {"rx_errors", "tx_errors", "rx_dropped", "tx_dropped"}) {
    ASSERT_TRUE(lo.count(name)) << name;
    EXPECT_GE(lo[name], 0);
  }
}

TEST(NicCountersTest, InfinibandPortsAndMissingCounters) {
  test::TempDir dir;
  namespace fs = std::filesystem;
  const fs::path port = fs::path(dir.file("class/infiniband/mlx5_0/ports/1/counters"));
  fs::create_directories(port);
  test::write_text((port / "symbol_error").string(), "7\n");
  test::write_text((port / "link_downed").string(), "2\n");
  test::write_text((port / "port_rcv_errors").string(), "not a number\n");
  fs::create_directories(dir.file("class/net/eth9/statistics"));
  test::write_text(dir.file("class/net/eth9/statistics/rx_errors"), "3\n");
  std::map<std::string, int64_t> got;
  for (const auto& c : monitor::read_nic_counters(dir.file("")))
    got[c.device + " " + c.counter] = c.value;
  const std::map<std::string, int64_t> want = {
      {"eth9 rx_errors", 3}, {"mlx5_0/1 symbol_error", 7}, {"mlx5_0/1 link_downed", 2}};
  EXPECT_EQ(got, want);
  EXPECT_TRUE(monitor::read_nic_counters(dir.file("absent")).empty());
}

TEST(GaugesTest, ExposedAndPlausibleInARealRun) {
  test::TempDir dir;
  test::write_text(dir.file("m.yaml"),
                   "architecture: gpt\nhidden_size: 64\nnum_hidden_layers: 2\n"
                   "num_attention_heads: 2\nvocab_size: 256\nseq_length: 32\n");
  train::TrainConfig config;
  config.model = dir.file("m.yaml");
  config.steps = 100000;
  config.batch_size = 4;
  config.seq_len = 32;
  config.eval_every = 0;
  config.sample_tokens = 0;
  config.quiet = true;
  config.threads = 2;
  config.monitor_server.port = test::free_tcp_port();
  config.monitor_server.try_next_ports = false;
  config.monitor_server.dashboard = true;
  config.monitor_server.token = "t0k";
  auto trainer = train::Trainer::create(config, nullptr, train::CommConfig{});
  ASSERT_TRUE(trainer.ok()) << trainer.status().message();
  Status trained;
  std::thread run([&] {
    train::RunSummary summary;
    trained = (*trainer)->run(&summary);
  });
  httplib::Client client("127.0.0.1", config.monitor_server.port);
  std::string text;
  int64_t vm_rss = 0;
  for (int i = 0; i < 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto r = client.Get("/metrics");
    if (!r || r->status != 200) continue;
    vm_rss = process_resident_bytes();  // as close to the scrape as this process can read it
    text = r->body;
    auto step = samples(text, "cann_train_step{");
    if (!step.empty() && step.begin()->second >= 20) break;
  }
  client.Post("/api/stop", {{"Authorization", "Bearer t0k"}}, "", "application/json");
  run.join();
  ASSERT_TRUE(trained.ok()) << trained.message();
  const auto util = samples(text, "cann_train_compute_utilization{");
  const auto resident = samples(text, "cann_train_resident_memory_bytes{");
  const auto live = samples(text, "cann_train_memory_bytes{");
  const auto frag = samples(text, "cann_train_memory_fragmentation_bytes{");
  ASSERT_EQ(util.size(), 1u) << text;
  ASSERT_EQ(frag.size(), 1u) << text;
  const double u = util.begin()->second;
  EXPECT_GT(u, 0.0);
  EXPECT_LE(u, 1.0);
  // Fragmentation is the resident set minus the engine's live bytes of the same step.
  EXPECT_EQ(frag.begin()->second, resident.begin()->second - live.begin()->second);
  EXPECT_GT(live.begin()->second, 0);
  // The resident set the rank read is this process's, give or take what moved since the step.
  EXPECT_NEAR(resident.begin()->second, static_cast<double>(vm_rss), 0.1 * vm_rss) << text;
  EXPECT_NE(text.find("cann_train_nic_errors_total{job=\"local\",host="), std::string::npos);
  EXPECT_NE(text.find("device=\"lo\",counter=\"rx_errors\"}"), std::string::npos) << text;
  std::printf(
      "compute utilisation %.3f, resident %.1f MiB, live %.2f MiB, fragmentation %.1f MiB\n", u,
      resident.begin()->second / (1 << 20), live.begin()->second / (1 << 20),
      frag.begin()->second / (1 << 20));
}

}  // namespace
}  // namespace cann
