// Alert evaluation and delivery.
#include "monitor/alerts.h"

#include <algorithm>
#include <cstdlib>

#include "core/log.h"
#include "core/timer.h"
#include "monitor/alert_delivery.h"
#include "monitor/stragglers.h"

namespace cann::monitor {
namespace {

constexpr int64_t kQuietSteps = 50;
constexpr size_t kStragglerWindow = 20;

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

SeriesMonitor::Options series_options(double sensitivity) {
  SeriesMonitor::Options o;
  o.loss_sensitivity = o.grad_norm_sensitivity = o.step_time_sensitivity = sensitivity;
  return o;
}

}  // namespace

AlertEngine::AlertEngine(Hub& hub, std::string job, AlertConfig config)
    : hub_(hub),
      job_(std::move(job)),
      config_(std::move(config)),
      series_(series_options(config_.sensitivity)),
      last_straggler_check_(now_seconds()) {
  auto routes = make_alert_routes(config_.routes);
  if (!routes.empty()) delivery_ = std::make_unique<AlertDelivery>(std::move(routes));
  if (const char* step = std::getenv("CANN_TRAIN_FAULT_ALERT")) injected_step_ = std::atoll(step);
}

// The delivery threads finish (within their drain time) before the engine goes.
AlertEngine::~AlertEngine() = default;

void AlertEngine::observe(const RankSnapshot& s) {
  std::vector<Alarm> alarms;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (s.rank == 0 && s.step > last_rank0_step_) {
      last_rank0_step_ = s.step;
      if (injected_step_ > 0 && s.step >= injected_step_) {
        alarms.push_back({});
        alarms.back().message =
            "injected alert at step " + std::to_string(s.step) + " (CANN_TRAIN_FAULT_ALERT)";
        injected_step_ = -1;
      }
      for (Alarm& a : series_.observe_step(s.step, s.loss, s.grad_norm, s.step_time_s)) {
        if (s.step < quiet_until_[a.series]) continue;
        quiet_until_[a.series] = s.step + kQuietSteps;
        alarms.push_back(std::move(a));
      }
    }
  }
  for (const Alarm& a : alarms) raise(a.message, 0);
  bool check = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (now_seconds() - last_straggler_check_ >= config_.straggler_interval_s) {
      last_straggler_check_ = now_seconds();
      check = true;
    }
  }
  if (check) {
    check_stragglers();
    check_links();
  }
}

void AlertEngine::check_links() {
  std::vector<LinkBandwidth> measured;
  for (const RankSnapshot& s : hub_.latest())
    for (size_t peer = 0; peer < s.link_gbps.size(); ++peer)
      if (static_cast<int>(peer) != s.rank && s.link_gbps[peer] > 0)
        measured.push_back({static_cast<int>(peer), s.rank, s.link_gbps[peer]});
  // One pair has no median to fall below; three ranks (three pairs) are the least that can
  // single one out.
  if (measured.size() < 3) return;
  const SlowLinkReport report = find_slow_links(measured);
  std::set<std::string> now;
  std::vector<std::pair<std::string, int>> fresh;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const SlowLink& l : report.links) {
      const std::string key = std::to_string(l.a) + "-" + std::to_string(l.b);
      now.insert(key);
      if (!flagged_links_.count(key)) fresh.push_back({"slow link: " + l.message, l.a});
    }
    for (const SlowRank& r : report.ranks) {
      const std::string key = "rank " + std::to_string(r.rank);
      now.insert(key);
      if (!flagged_links_.count(key)) fresh.push_back({"slow link: " + r.message, r.rank});
    }
    flagged_links_ = now;
  }
  for (const auto& [message, rank] : fresh) raise(message, rank);
}

void AlertEngine::check_stragglers() {
  const std::vector<RankSnapshot> latest = hub_.latest();
  if (latest.size() < 2) return;
  std::vector<std::vector<double>> rows;
  std::vector<int> ranks;
  std::vector<std::string> hosts;
  for (const RankSnapshot& s : latest) {
    const std::vector<RankSnapshot> h = hub_.history(s.rank);
    const size_t from = h.size() > kStragglerWindow ? h.size() - kStragglerWindow : 0;
    std::vector<double> fwd, bwd, comm;
    for (size_t i = from; i < h.size(); ++i) {
      fwd.push_back(h[i].forward_s);
      bwd.push_back(h[i].backward_s);
      comm.push_back(h[i].comm_exposed_s);
    }
    rows.push_back({median(fwd), median(bwd), median(comm)});
    ranks.push_back(s.rank);
    hosts.push_back(s.host);
  }
  auto found =
      find_stragglers(rows, {"forward", "backward", "exposed communication"}, ranks, hosts);
  if (!found.ok()) return;
  std::set<int> now_flagged;
  std::vector<Straggler> fresh;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Straggler& s : *found) {
      now_flagged.insert(s.rank);
      if (!flagged_.count(s.rank)) fresh.push_back(s);
    }
    flagged_ = now_flagged;
  }
  for (const Straggler& s : fresh) raise("straggler: " + s.message, s.rank);
}

void AlertEngine::raise(const std::string& message, int rank) {
  log_warning("alert: " + message);
  const double now = unix_seconds();
  hub_.add_event({now, "alert", rank, message});
  if (delivery_) delivery_->send({message, rank, now, job_});
}

}  // namespace cann::monitor
