// Beacon parsing and the hang analysis.
#include "debug/hang_analysis.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <map>

namespace cann::debug {
namespace {

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) {
    if (!out.empty()) out += ",";
    out += std::to_string(r);
  }
  return out;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", s);
  return buf;
}

}  // namespace

StatusOr<RankBeacon> parse_beacon(const std::string& text) {
  RankBeacon b;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    b.rank = j.at("rank").get<int>();
    b.host = j.value("host", std::string());
    b.pid = j.value("pid", 0);
    b.time = j.value("time", 0.0);
    b.step = j.value("step", int64_t{0});
    for (const auto& g : j.at("groups")) {
      GroupFlight f;
      f.group = g.at("group").get<std::string>();
      f.last_enqueued = g.at("last_enqueued").get<int64_t>();
      f.last_started = g.at("last_started").get<int64_t>();
      f.last_completed = g.at("last_completed").get<int64_t>();
      for (const auto& e : g.at("in_flight")) {
        InFlightOp op;
        op.seq = e.at("seq").get<int64_t>();
        op.op = e.value("op", std::string());
        op.tag = e.value("tag", std::string());
        op.bytes = e.value("bytes", int64_t{0});
        op.enqueued = e.value("enqueued", 0.0);
        op.started = e.value("started", 0.0);
        f.in_flight.push_back(op);
      }
      b.groups.push_back(std::move(f));
    }
  } catch (const std::exception& e) {
    return DataLoss(std::string("malformed beacon: ") + e.what());
  }
  return b;
}

std::vector<std::string> analyze_hang(const std::vector<std::optional<RankBeacon>>& beacons,
                                      double now, double stale_after_s) {
  std::vector<std::string> lines;
  const int world = static_cast<int>(beacons.size());
  std::vector<int> silent;
  for (int r = 0; r < world; ++r)
    if (!beacons[r]) silent.push_back(r);
  // Groups by name, each with every rank's view.
  std::map<std::string, std::map<int, const GroupFlight*>> groups;
  for (int r = 0; r < world; ++r)
    if (beacons[r])
      for (const GroupFlight& g : beacons[r]->groups) groups[g.group][r] = &g;
  auto age = [&](int r) { return now - beacons[r]->time; };
  auto stale = [&](int r) { return age(r) > stale_after_s; };
  auto staleness = [&](int r) {
    return stale(r) ? " in its last report " + seconds(age(r)) + " ago: stopped, hung or dead"
                    : std::string();
  };
  for (const auto& [name, views] : groups) {
    // The oldest operation a rank that still reports has started and not finished; ranks that
    // stopped reporting show where they were, which is older news.
    const InFlightOp* stuck = nullptr;
    for (int pass = 0; pass < 2 && stuck == nullptr; ++pass)
      for (const auto& [r, g] : views) {
        if (pass == 0 && stale(r)) continue;
        for (const InFlightOp& op : g->in_flight)
          if (op.started > 0 && (stuck == nullptr || op.seq < stuck->seq)) stuck = &op;
      }
    if (stuck == nullptr) continue;
    std::vector<int> waiting, passed;
    std::vector<std::string> others;
    double since = now;
    for (const auto& [r, g] : views) {
      bool in = false;
      for (const InFlightOp& op : g->in_flight)
        if (op.seq == stuck->seq && op.started > 0) {
          in = true;
          since = std::min(since, op.started);
        }
      if (in && !stale(r)) {
        waiting.push_back(r);
      } else if (in) {
        others.push_back("rank " + std::to_string(r) + " was inside it" + staleness(r));
      } else if (g->last_completed >= stuck->seq) {
        passed.push_back(r);
      } else {
        others.push_back("rank " + std::to_string(r) + " never entered (last completed #" +
                         std::to_string(g->last_completed) + staleness(r) + ")");
      }
    }
    std::string line = stuck->op + " #" + std::to_string(stuck->seq) + " in group " + name + ": ";
    if (!waiting.empty())
      line += std::string(waiting.size() == 1 ? "rank " : "ranks ") + rank_list(waiting) +
              " waiting since " + seconds(now - since);
    for (const std::string& o : others) line += (line.ends_with(": ") ? "" : "; ") + o;
    if (!passed.empty()) line += "; ranks " + rank_list(passed) + " already past it";
    lines.push_back(line);
  }
  if (lines.empty()) {
    std::string line = "no collective is in flight";
    for (int r = 0; r < world; ++r)
      if (beacons[r])
        line += "; rank " + std::to_string(r) + " at step " + std::to_string(beacons[r]->step) +
                (stale(r) ? ", last report " + seconds(age(r)) + " ago: stopped, hung or dead"
                          : std::string());
    lines.push_back(line);
  }
  if (!silent.empty())
    lines.push_back("ranks " + rank_list(silent) + " never reported (not started, or died early)");
  return lines;
}

}  // namespace cann::debug
