// Objectives, their figures and bands (see objective.h).
#include "plan/objective.h"

#include <string>

namespace cann::plan {

namespace {

struct ObjectiveText {
  Objective objective;
  const char* name;      // as --objective takes it
  const char* quantity;  // the figure it ranks by
};
constexpr ObjectiveText kObjectives[] = {
    {Objective::kThroughput, "throughput", "tokens/s"},
    {Objective::kCost, "cost", "$ per million tokens"},
    {Objective::kEnergy, "energy", "joules per token"},
    {Objective::kGoodput, "goodput", "tokens/s x goodput"},
    {Objective::kTei, "tei", "TEI"},
};

const ObjectiveText& text_of(Objective o) {
  for (const ObjectiveText& t : kObjectives)
    if (t.objective == o) return t;
  return kObjectives[0];
}

}  // namespace

std::string_view objective_name(Objective o) {
  return text_of(o).name;
}

StatusOr<Objective> parse_objective(std::string_view name) {
  for (const ObjectiveText& t : kObjectives)
    if (name == t.name) return t.objective;
  return InvalidArgument("--objective: unknown objective '" + std::string(name) +
                         "'; hint: use throughput, cost, energy, goodput or tei");
}

std::string_view objective_quantity(Objective o) {
  return text_of(o).quantity;
}

bool lower_is_better(Objective o) {
  return o == Objective::kCost || o == Objective::kEnergy;
}

double objective_value(Objective o, const ObjectiveFigures& f) {
  switch (o) {
    case Objective::kThroughput:
      return f.tokens_per_s;
    case Objective::kCost:
      return f.usd_per_million_tokens;
    case Objective::kEnergy:
      return f.joules_per_token;
    case Objective::kGoodput:
      return f.tokens_per_s * f.goodput;
    case Objective::kTei:
      return f.tei;
  }
  return f.tokens_per_s;
}

double objective_score(Objective o, const ObjectiveFigures& f) {
  const double v = objective_value(o, f);
  return lower_is_better(o) ? -v : v;
}

ScoreBand objective_band(Objective o, const ObjectiveFigures& f) {
  const double s = objective_score(o, f), t = f.step_time_s;
  if (t <= 0 || f.step_time_s_low <= 0) return {s, s};
  // Proportional to 1/step: a slower step lowers it. Proportional to step (cost and energy,
  // negated): a slower step makes the score more negative. Either way the factors are the same.
  if (lower_is_better(o)) return {s * f.step_time_s_high / t, s * f.step_time_s_low / t};
  return {s * t / f.step_time_s_high, s * t / f.step_time_s_low};
}

double usd_per_hour(const ClusterSpec& c) {
  return c.num_devices() * c.device.hourly_cost_usd;
}

double usd_per_million_tokens(const ClusterSpec& c, double tokens_per_s) {
  return tokens_per_s > 0 ? usd_per_hour(c) / (tokens_per_s * 3600 / 1e6) : 0;
}

double joules_per_token(const ClusterSpec& c, double tokens_per_s) {
  return tokens_per_s > 0 ? c.num_devices() * c.device.tdp_watts / tokens_per_s : 0;
}

}  // namespace cann::plan
