// Layer-to-stage partition: split the model's layers into contiguous pipeline stages so that
// the slowest stage (which sets the pipeline's pace) is as fast as possible. Stages are uneven
// on purpose: the first carries the embedding, the last the head and loss, MoE layers cost more
// than dense ones, so equal layer counts leave some stages idle.
//
// Two exact algorithms for the same problem (minimize the largest part sum):
//  - partition_dp: dynamic programming over (stages, layers), O(stages * layers^2); the
//    reference, used for the strategies the planner reports.
//  - partition_bisect: bisection on the bottleneck with a greedy feasibility check,
//    O(layers * log(1/eps)); used inside the search where it runs hundreds of thousands of
//    times. The tests check both find the same bottleneck.
//
// Worked example: per-layer costs {4, 1, 1, 1, 1, 1, 1, 4} (the ends carry embedding and head)
// in 4 stages. Equal layer counts {4,1} {1,1} {1,1} {1,4} give stage costs 5, 2, 2, 5; the
// balanced partition {4} {1,1,1} {1,1,1} {4} gives 4, 3, 3, 4, a 20% faster pipeline.
#pragma once

#include <vector>

namespace cann::plan {

// Returns parts+1 boundaries b with b[0] = 0, b[parts] = costs.size(), every part non-empty;
// part i holds layers [b[i], b[i+1]). Requires 1 <= parts <= costs.size().
std::vector<int> partition_dp(const std::vector<double>& costs, int parts);
std::vector<int> partition_bisect(const std::vector<double>& costs, int parts);
// Largest part sum of a partition.
double bottleneck(const std::vector<double>& costs, const std::vector<int>& bounds);

}  // namespace cann::plan
