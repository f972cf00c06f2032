// What `run` makes of a strategy string, for the tests of its refusals: the strategy as a
// worker of `world` processes resolves it (dp derived), and the launcher's check, both through
// plan::engine_supports.
#pragma once

#include <string>

#include "core/status.h"
#include "model/spec.h"
#include "plan/engine_support.h"
#include "plan/strategy.h"
#include "train/config.h"
#include "train/run_layout.h"

namespace cann::test {

// The strategy `text` on `world` processes of `model`: refused as `run` refuses it, else with
// dp derived.
inline StatusOr<plan::Strategy> run_strategy(const std::string& text, int world,
                                             const std::string& model = "gpt_tiny") {
  CANN_ASSIGN_OR_RETURN(plan::Strategy s, plan::parse_strategy(text));
  CANN_ASSIGN_OR_RETURN(model::ModelSpec spec, model::load_model_spec(model));
  plan::EngineShape shape;
  shape.world = world;
  CANN_RETURN_IF_ERROR(plan::engine_supports(s, spec, shape));
  s.dp = plan::engine_data_parallel(s, world);
  return s;
}

// The launcher's check of `text` for `world` workers of `model`, with the run's --batch-size,
// --grad-accum, --pipeline-schedule and --seq-len (0 / empty: not given).
struct LaunchFlags {
  int batch_size = 0;
  int grad_accum = 0;
  std::string pipeline_schedule;
  int seq_len = 0;
};
inline Status check_launch(const std::string& text, const std::string& model, int world,
                           const LaunchFlags& flags = {}) {
  CANN_ASSIGN_OR_RETURN(plan::Strategy s, plan::parse_strategy(text));
  CANN_ASSIGN_OR_RETURN(model::ModelSpec spec, model::load_model_spec(model));
  train::TrainConfig config;
  config.strategy = s;
  config.batch_size = flags.batch_size;
  config.grad_accum = flags.grad_accum;
  config.pipeline_schedule = flags.pipeline_schedule;
  config.seq_len = flags.seq_len;
  return train::check_launch(config, spec, world, false);
}

}  // namespace cann::test
