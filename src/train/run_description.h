// The lines a run starts with: the model, batch, ranks and steps; the data; the memory per
// rank (the engine's own accounting beside the planner's figure for the same layout); the
// process mesh, the pipeline and the data-parallel reduction where the run has them.
#pragma once

#include <string>
#include <vector>

#include "data/dataset.h"
#include "model/spec.h"
#include "train/model_parts.h"
#include "train/run_layout.h"
#include "train/step_optimizer.h"

namespace cann::train {

// Bytes this rank holds: parameters, gradients, optimizer state and the activation arena.
size_t memory_bytes(const ModelParts& parts, const StepOptimizer& opt);

std::vector<std::string> describe_run(const model::ModelSpec& spec, const RunLayout& layout,
                                      const ModelParts& parts, const StepOptimizer& opt,
                                      const data::Dataset& data, int first_step, int steps);

}  // namespace cann::train
