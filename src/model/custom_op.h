// Activations a user's program brings to the engine's MLP: a forward, a hand-written backward
// and a distribution rule saying what the op needs when tensor parallelism splits the MLP's
// hidden units over the ranks (Megatron's column-parallel first projection leaves each rank a
// slice of every row):
//   kElementwise  y_i depends on x_i alone (GeLU, squared ReLU): each rank applies the op to
//                 its own slice, and no collective is needed, forward or backward;
//   kFullRow      y depends on the whole row of hidden units (an op that normalizes or mixes
//                 across them): the engine all-gathers the row over the tp ranks before the
//                 forward and the row's output gradient before the backward, runs the op on the
//                 whole row, and each rank keeps its slice of the result.
// A registered name is then a value of hidden_act (non-gated MLPs) in model specs read
// afterwards. Register at start-up, before any spec is read, in every process of the job
// (the agent's workers are the same program, so registering in main() does both).
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace cann::model {

enum class DistributionRule { kElementwise, kFullRow };

struct ActivationOp {
  std::string name;
  // x and y are (N,F); y is overwritten.
  std::function<void(float* y, const float* x, int N, int F)> forward;
  // dy and dx are (N,F); dx is overwritten with dy's gradient through the op at x.
  std::function<void(float* dx, const float* x, const float* dy, int N, int F)> backward;
  DistributionRule rule = DistributionRule::kElementwise;
};

// Fails (InvalidArgument) for an empty or taken name (the built-in activations' too) or a
// missing forward or backward.
Status register_activation(ActivationOp op);
// The registered op of that name, or null.
const ActivationOp* find_activation(std::string_view name);

}  // namespace cann::model
