// `run --dump-grads FILE`: one step's gradient, as the optimizer is about to take it (after the
// data-parallel reduction and the tied embedding's sum over the pipeline, before clipping), in
// the single-process layout whatever the strategy, so that runs under different strategies
// compare tensor by tensor (`debug grads FILE --compare REF`).
#pragma once

#include <string>

#include "core/status.h"
#include "train/config.h"
#include "train/model_parts.h"
#include "train/run_layout.h"
#include "train/step_optimizer.h"

namespace cann::train {

// A collective under ZeRO (the shards are assembled) and under model parallelism (the model's
// shards are gathered); rank 0 writes the file. Returns rank 0's line for the log, else "".
StatusOr<std::string> dump_gradients(const TrainConfig& config, const RunLayout& layout,
                                     ModelParts& parts, StepOptimizer& opt, int done,
                                     const CommFailure& on_comm_failure);

}  // namespace cann::train
