// How a training run becomes a checkpoint and back: parameters and AdamW moments as sections,
// and in the metadata the model spec, the ParamTable, the optimizer step, the sampler position
// and the RNG state, everything exact resume needs.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

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
  // The step's line of the step log as the writing rank formed it (an in-memory snapshot
  // carries it: see StepReporter::recover_step_line); empty when not carried.
  std::string step_log;
};

// The optimizer as a checkpoint sees it: full (unsharded) AdamW moments in the ParamTable
// layout, the optimizer's step count, and any further state (error-feedback buffers, ...) as
// named sections with a JSON object describing them.
struct OptimizerSnapshot {
  // Full parameters when the model's own buffer does not hold them (ZeRO stage 3); null: the
  // model's.
  const float* params = nullptr;
  const float* m = nullptr;
  const float* v = nullptr;
  int step = 0;
  std::vector<ckpt::SectionView> extra_sections;
  std::string extra_meta_json = "{}";
  // A snapshot of one rank's own state (StepOptimizer::snapshot_own): m and v null, the
  // sharded state in extra_sections, and params null when the model's buffer does not hold
  // them (ZeRO stage 3's are in its shard): sections left out, not taken from the model.
  bool own_part = false;
};

// The checkpoint of a training run as sections over the live buffers (no copy) and metadata.
// The views stay valid while model and opt do.
ckpt::CheckpointWrite training_checkpoint(const model::Model& model, const OptimizerSnapshot& opt,
                                          const ResumeState& state, const TrainConfig& config);
// The same for buffers laid out as `table` (a model-parallel run's whole model, gathered):
// opt.params must be set.
ckpt::CheckpointWrite training_checkpoint(const model::ModelSpec& spec,
                                          const model::ParamTable& table,
                                          const OptimizerSnapshot& opt, const ResumeState& state,
                                          const TrainConfig& config);
// The metadata every checkpoint of one layout shares (the model's name, spec and parameter
// table) as the members of a JSON object without its braces, and a checkpoint that splices
// them in: a caller that writes every step (the in-memory snapshots) serializes them once.
std::string model_meta_members(const model::ModelSpec& spec, const model::ParamTable& table);
// Expert parallelism, for a snapshot of a rank's own buffers: `,"expert_slots":{"1":[...]}`,
// the placement of every MoE layer whose experts moved (model/expert_placement.h); empty when
// none did. restore_expert_slots sets a restored snapshot's placement on the model (the
// contiguous one for the layers it does not list).
std::string expert_slots_member(const model::Model& model);
Status restore_expert_slots(const std::string& meta_json, const std::string& path,
                            model::Model* model);
ckpt::CheckpointWrite training_checkpoint(const std::string& model_members,
                                          const model::ParamTable& table,
                                          const OptimizerSnapshot& opt, const ResumeState& state,
                                          const TrainConfig& config);

// A rank that holds part of the model (tensor, pipeline or expert parallelism) reads the
// checkpoint's whole-model layout `full` and takes its own part (model::slice_from_full).
struct CheckpointShards {
  const model::ParamTable* full = nullptr;
  model::ShardPlace at;
};

StatusOr<std::string> save_training_checkpoint(const std::string& dir, int keep_last,
                                               const model::Model& model,
                                               const OptimizerSnapshot& opt,
                                               const ResumeState& state, const TrainConfig& config);

// Restores model parameters, the moments into m and v (the model's layout), the optimizer
// step, and fills `state`. Fails with a clear message when the checkpoint's parameter layout
// differs from `model`'s (or, with `shards`, from the whole model's). A null m or v is not
// loaded; with `params` false neither are the parameters (a rank's own ZeRO-3 snapshot).
Status restore_training_checkpoint(const ckpt::LoadedCheckpoint& ck, model::Model& model, float* m,
                                   float* v, int* opt_step, ResumeState* state,
                                   const CheckpointShards* shards = nullptr, bool params = true);
// The "optimizer_extra" object saved with the checkpoint ("{}" when absent).
std::string checkpoint_optimizer_extra(const ckpt::LoadedCheckpoint& ck);

}  // namespace cann::train
