// The layout of each world size a multi-node elastic job may have (see elastic_layouts.h).
#include "train/elastic_layouts.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "model/expert_placement.h"
#include "plan/strategy.h"
#include "train/engine_search.h"
#include "train/run_layout.h"

namespace cann::train {
namespace {

// `s` checked by every rule a worker of a `world`-rank generation applies; its resolved
// strategy (dp, mbs, gbs filled in) or why not. With its micro-batch first, then, where that
// does not divide this world's share of the batch, with `fallback_mbs`.
StatusOr<plan::Strategy> admitted(const TrainConfig& config, const model::ModelSpec& spec,
                                  plan::Strategy s, int world, int fallback_mbs) {
  TrainConfig c = config;
  c.strategy = s;
  StatusOr<RunLayout> l = resolve_run_layout(c, spec, world, 0, {true, true, 0});
  if (!l.ok() && s.mbs != fallback_mbs) {
    c.strategy.mbs = fallback_mbs;
    if (StatusOr<RunLayout> one = resolve_run_layout(c, spec, world, 0, {true, true, 0}); one.ok())
      return one->strategy;
  }
  if (!l.ok()) return l.status();
  return l->strategy;
}

// The launch's split (`kept`) with ep lowered to the largest value that divides this world's
// data-parallel ranks and admits the layout; its resolved strategy, or nothing.
std::optional<plan::Strategy> spread_experts(const TrainConfig& config,
                                             const model::ModelSpec& spec, plan::Strategy kept,
                                             int world, int fallback_mbs) {
  const int split = kept.tp * kept.pp * kept.cp;
  if (kept.ep <= 1 || world % split != 0) return std::nullopt;
  const int dp = world / split;
  for (int ep = std::min(kept.ep - 1, dp); ep >= 2; --ep) {
    if (dp % ep != 0) continue;
    kept.ep = ep;
    if (StatusOr<plan::Strategy> s = admitted(config, spec, kept, world, fallback_mbs); s.ok())
      return *s;
  }
  return std::nullopt;
}

std::string first_line(const Status& s) {
  const std::string& m = s.message();
  return m.substr(0, m.find('\n'));
}

}  // namespace

ElasticLayouts plan_elastic_layouts(
    const TrainConfig& config, const model::ModelSpec& spec, int nproc_per_node, int min_nodes,
    int max_nodes, const std::function<StatusOr<plan::ClusterSpec>(int nodes)>& cluster) {
  ElasticLayouts out;
  const plan::Strategy& launch = config.strategy;
  const int gbs = launch.gbs > 0 ? launch.gbs : config.batch_size;
  const int split = launch.tp * launch.pp * launch.cp;
  const int max_world = max_nodes * nproc_per_node;
  // The micro-batch of the largest world: one micro-step per rank there.
  int micro = launch.mbs;
  if (micro == 0 && launch.pp > 1) micro = 1;
  if (micro == 0 && config.grad_accum == 0 && max_world % split == 0 &&
      gbs % (max_world / split) == 0)
    micro = gbs / (max_world / split);
  for (int n = min_nodes; n <= max_nodes; ++n) {
    const int world = n * nproc_per_node;
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%d node%s (world %d): ", n, n == 1 ? "" : "s", world);
    const std::string head = buf;
    plan::Strategy kept = launch;
    kept.dp = 0;
    kept.mbs = micro;
    kept.gbs = gbs;
    StatusOr<plan::Strategy> s = admitted(config, spec, kept, world, launch.mbs);
    if (s.ok()) {
      out.layouts[n] = plan::strategy_string(*s);
      out.lines.push_back(head + plan::strategy_brief(*s) + " (the launch's split)");
      continue;
    }
    const std::string why = first_line(s.status());
    // Experts follow the world too: the launch's split with its experts spread over the
    // expert-parallel ranks this world has, as many as divide its data-parallel ranks (a rank
    // may then hold one expert more than another).
    if (std::optional<plan::Strategy> e = spread_experts(config, spec, kept, world, launch.mbs)) {
      out.layouts[n] = plan::strategy_string(*e);
      out.lines.push_back(head + plan::strategy_brief(*e) + " (the launch's split, experts " +
                          model::experts_per_rank(spec.num_local_experts, e->ep) + " a rank)");
      continue;
    }
    // The planner's choice for this many devices.
    std::string replanned;
    StatusOr<plan::ClusterSpec> c = cluster(n);
    if (!c.ok()) {
      out.lines.push_back(head + "none: the launch's split does not fit (" + why +
                          ") and the planner has no spec to price another (" +
                          first_line(c.status()) + ")");
      continue;
    }
    c->nodes = n;
    c->devices_per_node = nproc_per_node;
    if (StatusOr<plan::SearchResult> found = search_engine_layouts(config, spec, *c, true, 16);
        found.ok()) {
      for (const plan::Prediction& p : found->top) {
        if (!p.fits) continue;
        StatusOr<plan::Strategy> chosen = admitted(config, spec, p.strategy, world, p.strategy.mbs);
        if (!chosen.ok()) continue;
        out.layouts[n] = plan::strategy_string(*chosen);
        char tail[96];
        std::snprintf(tail, sizeof(tail), "; the planner predicts %.3f s/step", p.step_time_s);
        replanned = head + plan::strategy_brief(*chosen) +
                    " (re-planned: the launch's split does not fit: " + why + tail + ")";
        break;
      }
    }
    out.lines.push_back(!replanned.empty() ? replanned
                                           : head + "none: the launch's split does not fit (" +
                                                 why + ") and the planner found no layout");
  }
  return out;
}

}  // namespace cann::train
