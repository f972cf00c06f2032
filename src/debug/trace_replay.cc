// Reading the collective sequence out of a profile trace (see trace_replay.h).
#include "debug/trace_replay.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

namespace cann::debug {

double bus_bandwidth_factor(const std::string& op, int n) {
  if (n <= 1) return 1.0;
  if (op == "allreduce") return 2.0 * (n - 1) / n;
  if (op == "allgather" || op == "reduce_scatter" || op == "alltoall") return n - 1.0;
  if (op == "allgatherv") return (n - 1.0) / n;
  return 1.0;
}

StatusOr<ReplayPlan> parse_replay_plan(const std::string& text, const std::string& name, int rank) {
  const auto doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("traceEvents") ||
      !doc["traceEvents"].is_array())
    return InvalidArgument(name +
                           ": not a Chrome trace (expected a JSON object with a traceEvents "
                           "array); hint: pass a trace written by `cann-train run --profile`");
  std::set<int> ranks;
  for (const auto& e : doc["traceEvents"])
    if (e.is_object() && e.value("ph", "") == "X" && e.contains("pid") &&
        e["pid"].is_number_integer() &&
        (e.value("cat", "") == "collective" || e.value("cat", "") == "p2p"))
      ranks.insert(e["pid"].get<int>());
  if (ranks.empty())
    return InvalidArgument(name +
                           ": no collective events; hint: profile a run with several processes "
                           "(--nproc-per-node 2 or more) and steps inside the --profile window");
  ReplayPlan plan;
  plan.ranks_in_file.assign(ranks.begin(), ranks.end());
  plan.rank = rank < 0 ? *ranks.begin() : rank;
  if (!ranks.count(plan.rank))
    return InvalidArgument(name + ": rank " + std::to_string(plan.rank) +
                           " has no events in this trace");
  for (const auto& e : doc["traceEvents"]) {
    if (!e.is_object() || e.value("ph", "") != "X" || !e.contains("pid") ||
        !e["pid"].is_number_integer() || e["pid"].get<int>() != plan.rank)
      continue;
    const std::string cat = e.value("cat", "");
    if (cat == "p2p") {
      ++plan.skipped;
      continue;
    }
    if (cat != "collective") continue;
    const auto args = e.contains("args") && e["args"].is_object() ? e["args"] : nlohmann::json();
    ReplayOp op;
    op.op = e.value("name", "");
    if (op.op == "alltoallv") {
      ++plan.skipped;
      continue;
    }
    static const std::set<std::string> kKnown = {"allreduce",      "allgather", "allgatherv",
                                                 "reduce_scatter", "broadcast", "alltoall",
                                                 "barrier"};
    if (!kKnown.count(op.op))
      return InvalidArgument(name + ": unknown collective '" + op.op + "' on rank " +
                             std::to_string(plan.rank));
    if (!args.contains("bytes") || !args["bytes"].is_number() || args["bytes"].get<double>() < 0)
      return InvalidArgument(name + ": a " + op.op + " event without a byte count in args");
    op.bytes = static_cast<uint64_t>(args["bytes"].get<double>());
    if (args.contains("tag") && args["tag"].is_string()) op.tag = args["tag"];
    op.group = "world";
    if (args.contains("group") && args["group"].is_string()) op.group = args["group"];
    if (args.contains("seq") && args["seq"].is_number() && args["seq"].get<double>() >= 0)
      op.seq = static_cast<uint64_t>(args["seq"].get<double>());
    if (args.contains("group_size") && args["group_size"].is_number())
      plan.group_size = static_cast<int>(args["group_size"].get<double>());
    if (e.contains("dur") && e["dur"].is_number()) op.recorded_s = e["dur"].get<double>() / 1e6;
    if (args.contains("step") && args["step"].is_number())
      op.step = static_cast<int>(args["step"].get<double>());
    plan.ops.push_back(std::move(op));
  }
  if (plan.ops.empty())
    return InvalidArgument(name + ": rank " + std::to_string(plan.rank) +
                           " recorded no collective a replay can issue");
  // Issue order: the group's sequence numbers (what every rank agreed on).
  std::stable_sort(plan.ops.begin(), plan.ops.end(),
                   [](const ReplayOp& a, const ReplayOp& b) { return a.seq < b.seq; });
  return plan;
}

}  // namespace cann::debug
