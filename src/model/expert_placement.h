// Where the experts of a MoE layer live under expert parallelism. Each of the ep ranks holds
// El = ceil(E/ep) expert slots; global slot s = rank*El + j is rank's local slot j, and a
// layer's placement lists the expert each global slot holds: every expert 0..E-1 once, and
// kNoExpert in the ep*El - E slots left over when ep does not divide E (8 experts over 3 ranks:
// 3, 3 and 2, the third rank's last slot empty), so one rank may hold more experts than another.
// The identity is GShard's contiguous blocks (rank r holds experts [r*El, min(E, (r+1)*El))); a
// rebalanced layer moves hot experts apart so that every rank computes about the same number
// of routed rows.
#pragma once

#include <string>
#include <vector>

namespace cann::model {

// expert_at[s]: the expert held in global slot s, or kNoExpert.
using ExpertSlots = std::vector<int>;
inline constexpr int kNoExpert = -1;

// Slots per rank: ceil(E / ep).
int slots_per_rank(int E, int ep);
ExpertSlots identity_slots(int E, int ep = 1);
// identity_slots(E, ep)[rank * slots_per_rank(E, ep) + j] without building it.
int identity_expert(int E, int ep, int rank, int j);
// How many experts each rank holds in identity_slots(E, ep), for logs: "3, 3, 2" ("2" when ep
// divides E; over more than 8 ranks "3 on the first 2, 2 on the other 62").
std::string experts_per_rank(int E, int ep);
// The experts a placement holds (its slots that are not empty).
int experts_in(const ExpertSlots& expert_at);
// Whether `at` is a placement of E experts over ep ranks: ep*slots_per_rank(E, ep) slots, each
// expert in exactly one.
bool is_placement(const ExpertSlots& at, int E, int ep);
// slot_of[e]: the global slot holding expert e (the inverse), experts_in(expert_at) entries.
std::vector<int> slot_of(const ExpertSlots& expert_at);

// Routed rows per rank under a placement: the sum of the load of the experts in its slots.
std::vector<double> rank_loads(const std::vector<double>& expert_load, const ExpertSlots& at,
                               int ep);

// A placement of at most El experts per rank that makes the largest rank load small and moves few
// experts: swaps between the most and the least loaded rank while one lowers the larger of the
// two, unless longest-processing-time-first (experts by falling load onto the least loaded rank
// with a free slot) ends clearly lower. Experts that stay on their rank keep their slot.
ExpertSlots balanced_slots(const std::vector<double>& expert_load, const ExpertSlots& now, int ep);

// Experts whose rank differs between two placements, and the most that one rank sends or
// receives of them.
int experts_moved(const ExpertSlots& from, const ExpertSlots& to, int ep);
int busiest_rank_moves(const ExpertSlots& from, const ExpertSlots& to, int ep);

}  // namespace cann::model
