// Hub: the rank-0 agent's view of the whole job. It keeps every rank's latest snapshot and a
// bounded history per rank (for the dashboard's charts and the detectors), the job's events
// (failures, restarts, scaling, alerts), and renders them as Prometheus text and JSON.
//
// Thread safety: every method may be called from any thread (one mutex, mutex_): the store
// poller updates, HTTP handlers read.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "monitor/snapshot.h"

namespace cann::monitor {

struct Event {
  double time = 0.0;  // Unix seconds
  std::string kind;   // "failure_detected", "alert", "scaled", ...
  int rank = -1;
  std::string detail;
};

class Hub {
 public:
  explicit Hub(std::string job, int world_size, size_t history = 4096);

  void update(const RankSnapshot& s);
  // Called after every update that added a snapshot (outside the Hub's lock): the detectors.
  void set_observer(std::function<void(const RankSnapshot&)> observer);
  void add_event(Event e);
  void set_world_size(int n);
  void count_restart();

  // Prometheus text exposition format 0.0.4.
  std::string prometheus_text() const;
  // {"job", "world_size", "ranks": [latest snapshots], "started", "restarts"}
  std::string status_json() const;
  // {"rank": r, "points": [{"step", "time", "loss", "step_time_s", ...}]} for points with
  // step > since; rank -1: every rank, as {"ranks": [...]}.
  std::string series_json(int rank, int64_t since) const;
  std::string events_json(size_t last) const;

  // Latest snapshot of every rank that reported (for detectors).
  std::vector<RankSnapshot> latest() const;
  std::vector<RankSnapshot> history(int rank) const;

 private:
  const std::string job_;
  const size_t history_limit_;
  const double started_;
  mutable std::mutex mutex_;
  int world_size_;
  int restarts_ = 0;
  std::map<int, RankSnapshot> latest_;
  std::map<int, std::deque<RankSnapshot>> history_;
  std::deque<Event> events_;
  std::function<void(const RankSnapshot&)> observer_;
};

}  // namespace cann::monitor
