// The profiling schedule and the step profiler (see step_profiler.h).
#include "train/step_profiler.h"

#include <chrono>

#include "comm/group.h"
#include "core/fs.h"
#include "core/int_items.h"
#include "core/timer.h"
#include "debug/trace_replay.h"
#include "monitor/chrome_trace.h"

namespace cann::train {

StatusOr<ProfileSchedule> parse_profile_schedule(const std::string& text) {
  ProfileSchedule s;
  s.active = 1;
  const auto bad = [&](const std::string& why) {
    return InvalidArgument("--profile '" + text + "': " + why +
                           "; hint: --profile wait=W,warmup=U,active=A, e.g. "
                           "wait=5,warmup=1,active=3");
  };
  if (text.empty()) return bad("empty");
  auto items = parse_int_items(text, "a step count");
  if (!items.ok()) return bad(items.status().message());
  for (const IntItem& item : *items) {
    if (item.value < 0 || item.value > 1000000)
      return bad("'" + std::to_string(item.value) + "' is not a step count");
    const int n = static_cast<int>(item.value);
    if (item.key == "wait")
      s.wait = n;
    else if (item.key == "warmup")
      s.warmup = n;
    else if (item.key == "active")
      s.active = n;
    else
      return bad("unknown key '" + item.key + "'");
  }
  if (s.active < 1) return bad("active must be at least 1");
  return s;
}

StepProfiler::StepProfiler(ProfileSchedule schedule, std::string dir, int rank, int world_size,
                           std::string host)
    : schedule_(schedule),
      dir_(std::move(dir)),
      rank_(rank),
      world_size_(world_size),
      trace_(std::make_unique<monitor::RankTrace>(rank, std::move(host))) {}

StepProfiler::~StepProfiler() = default;

void StepProfiler::begin_step(int index, int step) {
  index_ = index;
  step_ = step;
  const int first = schedule_.wait;
  const int first_active = first + schedule_.warmup;
  const int end = first_active + schedule_.active;
  recording_ = !finished_ && index >= first && index < end;
  active_ = recording_ && index >= first_active;
  if (recording_) clock_offset_ = unix_seconds() - now_seconds();
  if (recording_ && index == first) window_start_ = unix_seconds();
}

void StepProfiler::compute(const char* name, double t0, double t1) {
  if (!recording_) return;
  monitor::TraceEvent e;
  e.name = name;
  e.category = "compute";
  e.track = monitor::TraceTrack::kCompute;
  e.start_s = to_unix(t0);
  e.duration_s = t1 - t0;
  e.args.push_back({"step", static_cast<double>(step_), ""});
  trace_->add(std::move(e));
}

void StepProfiler::checkpoint(double t0, double t1, const std::string& path) {
  if (!recording_) return;
  monitor::TraceEvent e;
  e.name = "checkpoint write";
  e.category = "checkpoint";
  e.track = monitor::TraceTrack::kCheckpoint;
  e.start_s = to_unix(t0);
  e.duration_s = t1 - t0;
  e.args.push_back({"path", 0.0, path});
  trace_->add(std::move(e));
}

void StepProfiler::collect_comm(const comm::Group& group) {
  if (!recording_) return;
  const int n = group.size();
  for (const comm::FlightEntry& f : group.flight_recorder().entries()) {
    // Only finished calls of this window: earlier ones (before the first recorded step) are
    // left out by time, ones already taken by sequence number.
    if (f.seq <= last_seq_ || f.completed <= 0.0 || f.started <= 0.0) continue;
    if (f.enqueued < window_start_) continue;
    last_seq_ = f.seq;
    const bool p2p = f.op == "send" || f.op == "recv";
    monitor::TraceEvent e;
    e.name = f.op;
    e.category = p2p ? "p2p" : "collective";
    e.track = f.op == "send"   ? monitor::TraceTrack::kSend
              : f.op == "recv" ? monitor::TraceTrack::kRecv
                               : monitor::TraceTrack::kCollective;
    e.start_s = f.started;
    e.duration_s = f.completed - f.started;
    e.args.push_back({"op", 0.0, f.op});
    e.args.push_back({"seq", static_cast<double>(f.seq), ""});
    if (!f.tag.empty()) e.args.push_back({"tag", 0.0, f.tag});
    e.args.push_back({"group", 0.0, "world"});
    e.args.push_back({"group_size", static_cast<double>(n), ""});
    e.args.push_back({"bytes", static_cast<double>(f.bytes), ""});
    e.args.push_back({"queued_ms", (f.started - f.enqueued) * 1e3, ""});
    if (f.bytes > 0 && e.duration_s > 0) {
      const double algbw = static_cast<double>(f.bytes) / e.duration_s / 1e9;
      e.args.push_back({"algbw_GBps", algbw, ""});
      e.args.push_back({"busbw_GBps", algbw * debug::bus_bandwidth_factor(f.op, n), ""});
    }
    if (!f.ok) e.args.push_back({"failed", 0.0, "true"});
    trace_->add(std::move(e));
  }
}

bool StepProfiler::end_step() {
  if (!recording_) return false;
  if (!active_) {
    trace_->clear();  // warmup: recorded, thrown away
    return false;
  }
  ++active_steps_;
  return active_steps_ == schedule_.active;
}

StatusOr<std::string> StepProfiler::finish(comm::Group* world) {
  if (finished_) return std::string();
  finished_ = true;
  recording_ = false;
  CANN_RETURN_IF_ERROR(make_dirs(dir_));
  const std::string mine = join_path(dir_, "trace-rank" + std::to_string(rank_) + ".json");
  CANN_RETURN_IF_ERROR(
      trace_->write(mine, {{"world_size", static_cast<double>(world_size_), ""},
                           {"wait", static_cast<double>(schedule_.wait), ""},
                           {"warmup", static_cast<double>(schedule_.warmup), ""},
                           {"active", static_cast<double>(schedule_.active), ""},
                           {"active_steps", static_cast<double>(active_steps_), ""}}));
  trace_->clear();
  if (world != nullptr && world_size_ > 1) {
    comm::Options opts;
    opts.tag = "profile_written";
    CANN_RETURN_IF_ERROR(world->barrier(opts)->wait(std::chrono::minutes(5)));
  }
  if (rank_ != 0) return std::string();
  std::vector<std::string> inputs;
  std::string missing;
  for (int r = 0; r < world_size_; ++r) {
    const std::string path = join_path(dir_, "trace-rank" + std::to_string(r) + ".json");
    if (path_exists(path))
      inputs.push_back(path);
    else
      missing += (missing.empty() ? std::string(" ") : std::string(", ")) + std::to_string(r);
  }
  const std::string merged = join_path(dir_, "trace.json");
  CANN_RETURN_IF_ERROR(monitor::merge_chrome_traces(inputs, merged));
  std::string line = "profile: " + merged + " (" + std::to_string(inputs.size()) + " of " +
                     std::to_string(world_size_) + " ranks, " + std::to_string(active_steps_) +
                     " steps); open it in https://ui.perfetto.dev or chrome://tracing";
  if (!missing.empty())
    line += "; not merged, their files are not visible here: rank" + missing +
            " (each rank writes its trace into its own " + dir_ + ")";
  return line;
}

}  // namespace cann::train
