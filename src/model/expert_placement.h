// Where the experts of a MoE layer live under expert parallelism. Each of the ep ranks holds
// El = E/ep expert slots; global slot s = rank*El + j is rank's local slot j, and a layer's
// placement lists the expert each global slot holds (a permutation of 0..E-1). The identity is
// GShard's contiguous blocks (rank r holds experts [r*El, (r+1)*El)); a rebalanced layer moves
// hot experts apart so that every rank computes about the same number of routed rows.
#pragma once

#include <vector>

namespace cann::model {

// expert_at[s]: the expert held in global slot s.
using ExpertSlots = std::vector<int>;

ExpertSlots identity_slots(int E);
// slot_of[e]: the global slot holding expert e (the inverse permutation).
std::vector<int> slot_of(const ExpertSlots& expert_at);

// Routed rows per rank under a placement: the sum of the load of the experts in its slots.
std::vector<double> rank_loads(const std::vector<double>& expert_load, const ExpertSlots& at,
                               int ep);

// A placement of El experts per rank that makes the largest rank load small and moves few
// experts: swaps between the most and the least loaded rank while one lowers the larger of the
// two, unless longest-processing-time-first (experts by falling load onto the least loaded rank
// with a free slot) ends clearly lower. Experts that stay on their rank keep their slot.
ExpertSlots balanced_slots(const std::vector<double>& expert_load, const ExpertSlots& now, int ep);

// Experts whose rank differs between two placements, and the most that one rank sends or
// receives of them.
int experts_moved(const ExpertSlots& from, const ExpertSlots& to, int ep);
int busiest_rank_moves(const ExpertSlots& from, const ExpertSlots& to, int ep);

}  // namespace cann::model
