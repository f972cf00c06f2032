// What `cann-train search --objective` ranks by, and the cost and energy figures it needs.
//
//   throughput  tokens/s (highest): today's ranking, the default
//   cost        $ per million tokens trained (lowest): devices x hourly price / tokens per hour
//   energy      joules per token (lowest): devices x TDP / tokens per second
//   goodput     goodput-adjusted throughput (highest): tokens/s x goodput, the tokens per second
//               that survive failures and checkpoints
//   tei         the training efficiency index (highest, predict.cc and docs/planner.md)
//
// Every candidate a search prices uses all the cluster's devices at their TDP, so cost and
// energy per token are the devices' price and power over the throughput: they rank as
// throughput does, and differ from it only in what the table and the constraints show.
//
// Error bands: the planner's error is on the step time (error_band.h). Tokens/s, cost and
// energy per token are proportional to 1/step or step; goodput-adjusted throughput too; TEI is
// the compute share of the step (GEMM and memory-bound time over step time) times goodput, so
// also about 1/step when the compute time is right and the step is off. Each objective's band
// is therefore its value scaled by the step time's band.
#pragma once

#include <string_view>

#include "core/status.h"
#include "plan/cluster.h"

namespace cann::plan {

enum class Objective { kThroughput, kCost, kEnergy, kGoodput, kTei };

std::string_view objective_name(Objective o);  // "throughput", "cost", ...
// One-line error naming the choices for anything else (InvalidArgument, exit 2).
StatusOr<Objective> parse_objective(std::string_view name);
// What the objective's figure is, for headers: "tokens/s", "$ per million tokens", ...
std::string_view objective_quantity(Objective o);
bool lower_is_better(Objective o);

// The figures an objective reads from one priced strategy.
struct ObjectiveFigures {
  double tokens_per_s = 0;
  double goodput = 0;
  double tei = 0;
  double usd_per_million_tokens = 0;
  double joules_per_token = 0;
  double step_time_s = 0, step_time_s_low = 0, step_time_s_high = 0;
};

// The objective's figure, in objective_quantity's units.
double objective_value(Objective o, const ObjectiveFigures& f);
// Larger is better: the value, negated where lower is better.
double objective_score(Objective o, const ObjectiveFigures& f);
// The score's likely interval, from the step time's band (see above).
struct ScoreBand {
  double low = 0, high = 0;
};
ScoreBand objective_band(Objective o, const ObjectiveFigures& f);

// Devices x hourly price: what the cluster costs an hour (every strategy uses every device).
double usd_per_hour(const ClusterSpec& c);
double usd_per_million_tokens(const ClusterSpec& c, double tokens_per_s);
// Devices x TDP / throughput: device power only, as energy_kwh_per_step.
double joules_per_token(const ClusterSpec& c, double tokens_per_s);

}  // namespace cann::plan
