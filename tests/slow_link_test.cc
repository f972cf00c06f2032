// Slow-link localization on the live path: the pairwise probe measures a link made slow (a
// group whose sends between ranks 2 and 3 are held back), the alert engine names the pair from
// the ranks' snapshots, and a real 3-rank run with --link-probe-every publishes the
// measurements to the agent's hub.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "comm_test_util.h"
#include "monitor/alerts.h"
#include "monitor/hub.h"
#include "monitor/stragglers.h"
#include "run_args.h"
#include "test_util.h"
#include "train/link_probe.h"

namespace cann {
namespace {

// A receive that completes no earlier than `delay` after it was issued.
class DelayedWork : public comm::Work {
 public:
  DelayedWork(std::shared_ptr<comm::Work> inner, std::chrono::milliseconds delay)
      : inner_(std::move(inner)), ready_(std::chrono::steady_clock::now() + delay) {}
  Status wait(std::chrono::milliseconds timeout) override {
    Status s = inner_->wait(timeout);
    std::this_thread::sleep_until(ready_);
    return s;
  }
  bool is_completed() const override {
    return inner_->is_completed() && std::chrono::steady_clock::now() >= ready_;
  }
  uint64_t sequence() const override { return inner_->sequence(); }

 private:
  std::shared_ptr<comm::Work> inner_;
  std::chrono::steady_clock::time_point ready_;
};

// A group whose transfers between ranks 2 and 3 (either way) take at least `delay`: a slow
// link between them, whatever the backend underneath.
class SlowPairGroup : public comm::Group {
 public:
  SlowPairGroup(comm::Group& inner, std::chrono::milliseconds delay)
      : inner_(inner), delay_(delay) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string backend() const override { return inner_.backend(); }
  std::shared_ptr<comm::Work> allreduce(void* d, size_t n, comm::DataType t, comm::ReduceOp op,
                                        const comm::Options& o) override {
    return inner_.allreduce(d, n, t, op, o);
  }
  std::shared_ptr<comm::Work> reduce_scatter(void* out, const void* in, size_t n, comm::DataType t,
                                             comm::ReduceOp op, const comm::Options& o) override {
    return inner_.reduce_scatter(out, in, n, t, op, o);
  }
  std::shared_ptr<comm::Work> allgather(void* out, const void* in, size_t n, comm::DataType t,
                                        const comm::Options& o) override {
    return inner_.allgather(out, in, n, t, o);
  }
  std::shared_ptr<comm::Work> allgatherv(void* out, const void* in, std::span<const size_t> c,
                                         comm::DataType t, const comm::Options& o) override {
    return inner_.allgatherv(out, in, c, t, o);
  }
  std::shared_ptr<comm::Work> broadcast(void* d, size_t n, comm::DataType t, int root,
                                        const comm::Options& o) override {
    return inner_.broadcast(d, n, t, root, o);
  }
  std::shared_ptr<comm::Work> alltoall(void* out, const void* in, size_t n, comm::DataType t,
                                       const comm::Options& o) override {
    return inner_.alltoall(out, in, n, t, o);
  }
  std::shared_ptr<comm::Work> alltoallv(void* out, std::span<const size_t> oc, const void* in,
                                        std::span<const size_t> ic, comm::DataType t,
                                        const comm::Options& o) override {
    return inner_.alltoallv(out, oc, in, ic, t, o);
  }
  std::shared_ptr<comm::Work> send(const void* d, size_t n, comm::DataType t, int dst, uint32_t tag,
                                   const comm::Options& o) override {
    return inner_.send(d, n, t, dst, tag, o);
  }
  std::shared_ptr<comm::Work> recv(void* d, size_t n, comm::DataType t, int src, uint32_t tag,
                                   const comm::Options& o) override {
    const int me = rank();
    auto w = inner_.recv(d, n, t, src, tag, o);
    if ((me == 2 && src == 3) || (me == 3 && src == 2))
      return std::make_shared<DelayedWork>(std::move(w), delay_);
    return w;
  }
  std::shared_ptr<comm::Work> barrier(const comm::Options& o) override { return inner_.barrier(o); }
  StatusOr<std::unique_ptr<comm::Group>> new_subgroup(const std::vector<int>& ranks,
                                                      const std::string& name) override {
    return inner_.new_subgroup(ranks, name);
  }
  comm::GroupStats stats() const override { return inner_.stats(); }
  void set_name(const std::string& name) override { inner_.set_name(name); }
  void set_default_timeout(std::chrono::milliseconds t) override { inner_.set_default_timeout(t); }
  const comm::FlightRecorder& flight_recorder() const override { return inner_.flight_recorder(); }

 private:
  comm::Group& inner_;
  std::chrono::milliseconds delay_;
};

TEST(SlowLinkTest, ProbeMeasuresEveryPeerAndFindsTheSlowPair) {
  constexpr int kRanks = 4;
  // Four rank threads on two busy cores measure scheduling as much as memory: a thread left
  // waiting for a core for 10 ms makes every link of its rank look slow, and the detector then
  // (rightly, for what it was shown) blames the rank. So the probe is taken up to three times,
  // as a user on a loaded machine would repeat it, and one of them must name the injected pair.
  std::string last;
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::vector<std::vector<double>> measured(kRanks);
    test::run_group("shm", kRanks, [&](int rank, comm::Group& g) {
      SlowPairGroup slow(g, std::chrono::milliseconds(30));
      auto links = train::probe_links(slow, 256 << 10);
      ASSERT_TRUE(links.ok()) << links.status().message();
      measured[rank] = *links;
    });
    std::vector<monitor::LinkBandwidth> pairs;
    for (int r = 0; r < kRanks; ++r) {
      ASSERT_EQ(measured[r].size(), static_cast<size_t>(kRanks));
      EXPECT_EQ(measured[r][r], 0.0);
      for (int peer = 0; peer < kRanks; ++peer) {
        if (peer == r) continue;
        EXPECT_GT(measured[r][peer], 0.0) << r << " from " << peer;
        pairs.push_back({peer, r, measured[r][peer]});
      }
    }
    // 256 KiB in 30 ms is under 0.01 GB/s; shared memory moves it in well under a millisecond.
    // The injected pair must come first, far below the median (under half the detector's own
    // bound: another pair can look slow too, and load slows the median down).
    const monitor::SlowLinkReport report = monitor::find_slow_links(pairs);
    if (!report.links.empty() && report.links[0].a == 2 && report.links[0].b == 3 &&
        report.links[0].ratio < 0.25)
      return;
    last = "median " + std::to_string(report.median_gbps) + " GB/s;";
    for (const auto& p : pairs)
      last += " " + std::to_string(p.a) + ">" + std::to_string(p.b) + " " + std::to_string(p.gbps);
    for (const auto& l : report.links) last += " | " + l.message;
    for (const auto& r : report.ranks) last += " | " + r.message;
  }
  ADD_FAILURE() << "three probes did not name pair 2-3; the last: " << last;
}

monitor::RankSnapshot with_links(int rank, std::vector<double> gbps) {
  monitor::RankSnapshot s;
  s.rank = rank;
  s.step = 10;
  s.time = 1796230000.0 + rank;
  s.link_gbps = std::move(gbps);
  return s;
}

size_t alerts_in(const monitor::Hub& hub) {
  size_t n = 0;
  for (const auto& e : nlohmann::json::parse(hub.events_json(1000))) n += e["event"] == "alert";
  return n;
}

TEST(SlowLinkTest, AlertEngineNamesTheSlowPairOnce) {
  monitor::Hub hub("job", 4);
  monitor::AlertConfig c;
  c.straggler_interval_s = 1e9;
  monitor::AlertEngine alerts(hub, "job", c);
  // Every link 10 GB/s but 2-3, 3 GB/s both ways. The snapshot round trip through JSON is the
  // path the agent's hub sees.
  for (int r = 0; r < 4; ++r) {
    std::vector<double> g(4, 10.0);
    g[r] = 0.0;
    if (r == 2) g[3] = 3.0;
    if (r == 3) g[2] = 3.0;
    auto s = monitor::RankSnapshot::from_json(with_links(r, g).to_json());
    ASSERT_TRUE(s.ok()) << s.status().message();
    ASSERT_EQ(s->link_gbps, g);
    hub.update(*s);
  }
  alerts.check_links();
  alerts.check_links();  // still slow: named once
  const std::string events = hub.events_json(10);
  EXPECT_EQ(alerts_in(hub), 1u) << events;
  EXPECT_NE(events.find("slow link: pair 2-3 at 0.3x the median bandwidth"), std::string::npos)
      << events;
}

TEST(SlowLinkTest, EvenLinksRaiseNothing) {
  monitor::Hub hub("job", 4);
  monitor::AlertConfig c;
  c.straggler_interval_s = 1e9;
  monitor::AlertEngine alerts(hub, "job", c);
  for (int r = 0; r < 4; ++r) {
    std::vector<double> g = {9.0, 10.0, 11.0, 10.5};
    g[r] = 0.0;
    hub.update(with_links(r, g));
  }
  alerts.check_links();
  EXPECT_EQ(alerts_in(hub), 0u) << hub.events_json(10);
}

// The probe's figures reach the agent's hub from every worker of a real job.
TEST(MultiProcSlowLinkTest, ProbeResultsReachTheAgentsHub) {
  test::TempDir dir;
  test::write_text(dir.file("m.yaml"),
                   "architecture: gpt\nhidden_size: 32\nnum_hidden_layers: 1\n"
                   "num_attention_heads: 2\nvocab_size: 256\nseq_length: 32\n");
  const int port = test::free_tcp_port();
  auto run = std::async(std::launch::async, [&] {
    test::RunArgs args;
    args.monitor("dashboard,prometheus").model(dir.file("m.yaml")).steps(100000).batch_size(6);
    args.seq_len(16).quiet().sample_tokens(0).eval_every(0).nproc(3);
    args.flag("--link-probe-every", 2).flag("--monitor-port", port).flag("--monitor-token", "t0k");
    return test::run_cann(args, 120);
  });
  httplib::Client client("127.0.0.1", port);
  nlohmann::json status;
  bool all = false;
  for (int i = 0; i < 150 && !all; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto r = client.Get("/api/status");
    if (!r || r->status != 200) continue;
    status = nlohmann::json::parse(r->body);
    if (status["ranks"].size() != 3) continue;
    all = true;
    for (const auto& rank : status["ranks"]) {
      if (!rank.contains("link_gbps") || rank["link_gbps"].size() != 3) {
        all = false;
        continue;
      }
      const int me = rank["rank"];
      for (int peer = 0; peer < 3; ++peer)
        if (peer != me && !(rank["link_gbps"][peer].get<double>() > 0)) all = false;
    }
  }
  EXPECT_TRUE(all) << status.dump();
  httplib::Headers auth = {{"Authorization", "Bearer t0k"}};
  auto stop = client.Post("/api/stop", auth, "", "application/json");
  ASSERT_TRUE(stop);
  const auto result = run.get();
  EXPECT_EQ(result.exit_code, 130) << result.output;
}

}  // namespace
}  // namespace cann
