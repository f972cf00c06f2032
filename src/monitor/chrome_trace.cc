// Chrome trace writing and merging (see chrome_trace.h).
#include "monitor/chrome_trace.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/fs.h"

namespace cann::monitor {
namespace {

constexpr TraceTrack kTracks[] = {TraceTrack::kCompute, TraceTrack::kCollective, TraceTrack::kSend,
                                  TraceTrack::kRecv, TraceTrack::kCheckpoint};

nlohmann::json metadata(const char* what, int pid, int tid, const std::string& name) {
  return {{"ph", "M"}, {"name", what}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}};
}

nlohmann::json arg_value(const TraceArg& a) {
  if (!a.text.empty()) return a.text;
  if (!std::isfinite(a.number)) return nullptr;
  return a.number;
}

}  // namespace

const char* trace_track_name(TraceTrack track) {
  switch (track) {
    case TraceTrack::kCompute:
      return "compute";
    case TraceTrack::kCollective:
      return "collectives";
    case TraceTrack::kSend:
      return "p2p send";
    case TraceTrack::kRecv:
      return "p2p recv";
    case TraceTrack::kCheckpoint:
      return "checkpoint";
  }
  return "?";
}

std::string RankTrace::to_json(const std::vector<TraceArg>& other) const {
  nlohmann::json events = nlohmann::json::array();
  std::string process = "rank " + std::to_string(rank_);
  if (!host_.empty()) process += " (host " + host_ + ")";
  events.push_back(metadata("process_name", rank_, 0, process));
  events.push_back({{"ph", "M"},
                    {"name", "process_sort_index"},
                    {"pid", rank_},
                    {"tid", 0},
                    {"args", {{"sort_index", rank_}}}});
  for (TraceTrack t : kTracks)
    events.push_back(metadata("thread_name", rank_, static_cast<int>(t), trace_track_name(t)));
  // In time order per track, enclosing spans first (a step before its forward), which is how
  // viewers nest them and how a reader of the file expects them.
  std::vector<const TraceEvent*> order;
  for (const TraceEvent& e : events_) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(), [](const TraceEvent* a, const TraceEvent* b) {
    if (a->track != b->track) return a->track < b->track;
    if (a->start_s != b->start_s) return a->start_s < b->start_s;
    return a->duration_s > b->duration_s;
  });
  for (const TraceEvent* ep : order) {
    const TraceEvent& e = *ep;
    nlohmann::json args = nlohmann::json::object();
    for (const TraceArg& a : e.args) args[a.key] = arg_value(a);
    // Microseconds with a fractional part: Unix time in us needs 16 digits, which a double
    // holds to about 0.2 us, finer than the clocks we read.
    events.push_back({{"ph", "X"},
                      {"name", e.name},
                      {"cat", e.category},
                      {"pid", rank_},
                      {"tid", static_cast<int>(e.track)},
                      {"ts", e.start_s * 1e6},
                      {"dur", std::max(0.0, e.duration_s) * 1e6},
                      {"args", args}});
  }
  nlohmann::json other_data = nlohmann::json::object();
  other_data["format"] = "cann-train profile";
  other_data["version"] = 1;
  other_data["rank"] = rank_;
  for (const TraceArg& a : other) other_data[a.key] = arg_value(a);
  nlohmann::json doc = {
      {"displayTimeUnit", "ms"}, {"otherData", other_data}, {"traceEvents", events}};
  return doc.dump();
}

Status RankTrace::write(const std::string& path, const std::vector<TraceArg>& other) const {
  return write_file_atomic(path, to_json(other));
}

Status merge_chrome_traces(const std::vector<std::string>& inputs, const std::string& output) {
  nlohmann::json events = nlohmann::json::array();
  nlohmann::json ranks = nlohmann::json::array();
  for (const std::string& path : inputs) {
    CANN_ASSIGN_OR_RETURN(std::string text, read_file(path));
    nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded() || !doc.is_object() || !doc.contains("traceEvents") ||
        !doc["traceEvents"].is_array())
      return InvalidArgument(path +
                             ": not a Chrome trace (expected a JSON object with a traceEvents "
                             "array); hint: pass the trace-rank*.json files `run --profile` "
                             "wrote");
    for (auto& e : doc["traceEvents"]) events.push_back(std::move(e));
    if (doc.contains("otherData") && doc["otherData"].is_object() &&
        doc["otherData"].contains("rank"))
      ranks.push_back(doc["otherData"]["rank"]);
  }
  nlohmann::json doc = {
      {"displayTimeUnit", "ms"},
      {"otherData", {{"format", "cann-train profile"}, {"version", 1}, {"merged_ranks", ranks}}},
      {"traceEvents", events}};
  return write_file_atomic(output, doc.dump());
}

}  // namespace cann::monitor
