// `cann-train search --report FILE.html`: one self-contained page (inline SVG and plain
// JavaScript, nothing fetched when it is viewed) with
//  - a scatter of every feasible candidate, step time against memory peak, the Pareto front
//    over step time, memory and goodput marked, and the strategy shown on hover;
//  - the table of the best strategies;
//  - the objectives: the Pareto front's tokens/s against $ per million tokens, joules per
//    token and TEI (scatters), and the best strategies' TEI, cost, energy and speed-up
//    against the baseline (bars);
//  - the winner's per-stage layer allocation with its time and memory breakdown, the plain
//    words explanation and the launch arguments.
// Scatters above kMaxPoints candidates keep every Pareto point and the best of the rest on
// the objective.
#pragma once

#include <string>

#include "plan/predict.h"
#include "plan/search.h"

namespace cann::plan {

inline constexpr size_t kMaxPoints = 20000;

// `explanation` and `launch` are the texts the terminal shows, repeated in the page; `baseline`
// (may be null) is what the speed-ups are stated against.
std::string html_report(const PlanInput& in, const SearchResult& r, const std::string& explanation,
                        const std::string& launch, const Prediction* baseline = nullptr);

}  // namespace cann::plan
