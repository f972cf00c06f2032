// How a training run becomes a checkpoint and back: parameters and AdamW moments as sections,
// and in the metadata the model spec, the ParamTable, the optimizer step, the sampler position
// and the RNG state, everything exact resume needs.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "ckpt/checkpoint.h"
#include "core/status.h"
#include "data/sampler.h"
#include "model/model.h"
#include "optim/adamw.h"
#include "train/config.h"

namespace cann::train {

struct ResumeState {
  int step = 0;  // optimizer steps completed
  data::SamplerState sampler;
  std::array<uint64_t, 4> rng{};
};

StatusOr<std::string> save_training_checkpoint(const std::string& dir, int keep_last,
                                               const model::Model& model, const optim::AdamW& opt,
                                               const ResumeState& state, const TrainConfig& config);

// Restores model parameters, optimizer moments and step, and fills `state`. Fails with a clear
// message when the checkpoint's parameter layout differs from `model`'s.
Status restore_training_checkpoint(const ckpt::LoadedCheckpoint& ck, model::Model& model,
                                   optim::AdamW& opt, ResumeState* state);

}  // namespace cann::train
