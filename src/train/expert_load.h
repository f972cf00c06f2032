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

}  // namespace cann::train
