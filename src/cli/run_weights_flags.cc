// The Hugging Face weight flags of `cann-train run` (--init-from, --export-hf), and the model
// --init-from implies, kept apart from run_command.cc.
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "core/fs.h"
#include "model/spec.h"
#include "train/config.h"
#include "train/hf_weights.h"

namespace cann::cli {

void add_run_weights_flags(CLI::App* run, train::TrainConfig* config) {
  const char* kWeights = "Hugging Face weights";
  run->add_option("--init-from", config->init_from,
                  "Start from the weights of a Hugging Face model directory (config.json and "
                  "*.safetensors, sharded or not; F32, BF16 or F16), under any --strategy; the "
                  "model is DIR's config.json (--model, if given, must be the same model)")
      ->group(kWeights);
  run->add_option("--export-hf", config->export_hf,
                  "At the end of the run, write the model to DIR as config.json and F32 "
                  "safetensors (2 GiB shards with model.safetensors.index.json past that), "
                  "which --init-from and transformers load; with --resume and --steps at the "
                  "checkpoint's step it converts a checkpoint without training")
      ->group(kWeights);
}

Status resolve_init_model(const CLI::App* run, train::TrainConfig* config) {
  if (config->init_from.empty()) return OkStatus();
  CANN_ASSIGN_OR_RETURN(const model::ModelSpec in_dir, train::hf_dir_spec(config->init_from));
  if (run->get_option("--model")->count() == 0) {
    config->model = join_path(config->init_from, "config.json");
    return OkStatus();
  }
  CANN_ASSIGN_OR_RETURN(const model::ModelSpec given, model::load_model_spec(config->model));
  return train::check_same_model(given, in_dir, config->init_from);
}

}  // namespace cann::cli
