// Expert load in the step log: how many token-to-expert assignments each expert of an MoE model
// took in one step, summed over the model's MoE layers, micro-steps and data-parallel ranks
// (what the router kept; assignments over capacity are `dropped_assignments`), and one number
// for how even that is.
#pragma once

#include <string>
#include <vector>

namespace cann::train {

// "[120,98,131,107]": the counts as a JSON array of integers.
std::string expert_load_json(const std::vector<double>& load);

// mean / max of the counts: 1.0 when every expert took the same number, 1/E when one expert
// took them all; 1.0 for no assignments at all (nothing is unbalanced).
double expert_balance(const std::vector<double>& load);

// max / mean of the rows each place of the expert groups computed (expert parallelism): 1.0
// when every rank did the same, ep when one did all; 1.0 for no rows at all. The step waits
// for the busiest, so this is how much longer its expert compute takes than a balanced one's.
double expert_imbalance(const std::vector<double>& rank_rows);

}  // namespace cann::train
