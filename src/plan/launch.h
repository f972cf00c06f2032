// Launch arguments for a planned strategy, in three dialects: cann-train's own --strategy
// string, Megatron-LM's command-line flags, and a DeepSpeed JSON config. They say the same
// thing; where a framework cannot express part of the plan (Megatron-LM has no ZeRO-2/3,
// DeepSpeed's pipeline engine has no interleaving), the output says so instead of dropping it.
#pragma once

#include <string>

#include "plan/predict.h"

namespace cann::plan {

std::string cann_train_args(const PlanInput& in, const Prediction& p);
std::string megatron_args(const PlanInput& in, const Prediction& p);
std::string deepspeed_config(const PlanInput& in, const Prediction& p);

}  // namespace cann::plan
