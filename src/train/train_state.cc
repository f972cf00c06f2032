// Checkpoint encoding of a training run. The RNG words are stored as hex strings because JSON
// numbers lose precision above 2^53.
#include "train/train_state.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include <cstring>

#include "core/numbers.h"
#include "model/spec_json.h"

namespace cann::train {

ckpt::CheckpointWrite training_checkpoint(const model::Model& model, const OptimizerSnapshot& opt,
                                          const ResumeState& state, const TrainConfig& config) {
  OptimizerSnapshot o = opt;
  if (o.params == nullptr && !o.own_part) o.params = model.params();
  return training_checkpoint(model.spec(), model.table(), o, state, config);
}

ckpt::CheckpointWrite training_checkpoint(const model::ModelSpec& spec,
                                          const model::ParamTable& param_table,
                                          const OptimizerSnapshot& opt, const ResumeState& state,
                                          const TrainConfig& config) {
  return training_checkpoint(model_meta_members(spec, param_table), param_table, opt, state,
                             config);
}

std::string model_meta_members(const model::ModelSpec& spec, const model::ParamTable& table) {
  nlohmann::json meta;
  meta["model_name"] = spec.name;
  meta["model_spec"] = nlohmann::json::parse(model::spec_to_json(spec));
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& t : table.tensors())
    tensors.push_back({{"name", t.name}, {"shape", t.shape}, {"offset", t.offset}});
  meta["param_table"] = tensors;
  meta["param_floats"] = table.total_floats();
  meta["param_fingerprint"] = hex64(table.fingerprint());
  const std::string text = meta.dump();
  return text.substr(1, text.size() - 2);
}

std::string expert_slots_member(const model::Model& model) {
  nlohmann::json slots = nlohmann::json::object();
  for (int layer : model.expert_layers()) {
    const model::ExpertSlots& at = model.expert_slots(layer);
    if (at != model.identity_expert_slots()) slots[std::to_string(layer)] = at;
  }
  if (slots.empty()) return std::string();
  return ",\"expert_slots\":" + slots.dump();
}

Status restore_expert_slots(const std::string& meta_json, const std::string& path,
                            model::Model* model) {
  const std::vector<int> layers = model->expert_layers();
  if (layers.empty()) return OkStatus();
  nlohmann::json slots;
  try {
    slots = nlohmann::json::parse(meta_json).value("expert_slots", nlohmann::json::object());
  } catch (const std::exception& e) {
    return DataLoss(path + ": snapshot metadata is not JSON (" + e.what() + ")");
  }
  const int E = model->spec().num_local_experts;
  const model::ExpertSlots identity = model->identity_expert_slots();
  for (int layer : layers) {
    model::ExpertSlots at = identity;
    if (auto it = slots.find(std::to_string(layer)); it != slots.end()) {
      try {
        at = it->get<model::ExpertSlots>();
      } catch (const std::exception&) {
        at.clear();
      }
      if (!model->is_expert_placement(at))
        return DataLoss(path + ": expert_slots of layer " + std::to_string(layer) +
                        " is not a placement of " + std::to_string(E) +
                        " experts; hint: the snapshot is damaged: resume from a disk "
                        "checkpoint with --resume");
    }
    model->set_expert_slots(layer, at);
  }
  return OkStatus();
}

ckpt::CheckpointWrite training_checkpoint(const std::string& model_members,
                                          const model::ParamTable& param_table,
                                          const OptimizerSnapshot& opt, const ResumeState& state,
                                          const TrainConfig& config) {
  nlohmann::json meta;
  meta["optimizer"] = {{"type", "adamw"},
                       {"step", opt.step},
                       {"weight_decay", config.weight_decay},
                       {"grad_clip", config.grad_clip}};
  meta["optimizer_extra"] = nlohmann::json::parse(opt.extra_meta_json);
  meta["sampler"] = {{"seed", state.sampler.seed}, {"consumed", state.sampler.consumed}};
  meta["rng"] = {hex64(state.rng[0]), hex64(state.rng[1]), hex64(state.rng[2]),
                 hex64(state.rng[3])};
  if (!state.step_log.empty()) meta["step_log"] = state.step_log;
  meta["train"] = {
      {"step", state.step},        {"steps", config.steps}, {"batch_size", config.batch_size},
      {"seq_len", config.seq_len}, {"lr", config.lr},       {"seed", config.seed},
      {"data", config.data}};
  ckpt::CheckpointWrite w;
  w.step = state.step;
  w.meta_json = "{" + model_members + "," + meta.dump().substr(1);
  const size_t bytes = param_table.total_floats() * sizeof(float);
  // A rank's own snapshot leaves out what it does not hold whole (OptimizerSnapshot::own_part).
  for (const auto& [name, data] :
       {std::pair{"params", opt.params}, std::pair{"adam_m", opt.m}, std::pair{"adam_v", opt.v}})
    if (data != nullptr || !opt.own_part) w.sections.push_back({name, data, bytes});
  for (const auto& extra : opt.extra_sections) w.sections.push_back(extra);
  return w;
}

StatusOr<std::string> save_training_checkpoint(const std::string& dir, int keep_last,
                                               const model::Model& model,
                                               const OptimizerSnapshot& opt,
                                               const ResumeState& state,
                                               const TrainConfig& config) {
  return ckpt::write_checkpoint(dir, training_checkpoint(model, opt, state, config), keep_last);
}

std::string checkpoint_optimizer_extra(const ckpt::LoadedCheckpoint& ck) {
  try {
    const nlohmann::json meta = nlohmann::json::parse(ck.meta_json);
    if (meta.contains("optimizer_extra")) return meta.at("optimizer_extra").dump();
  } catch (const std::exception&) {
  }
  return "{}";
}

Status restore_training_checkpoint(const ckpt::LoadedCheckpoint& ck, model::Model& model, float* m,
                                   float* v, int* opt_step, ResumeState* state,
                                   const CheckpointShards* shards, bool params) {
  const model::ParamTable& layout = shards != nullptr ? *shards->full : model.table();
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(ck.meta_json);
    const std::string fp = meta.at("param_fingerprint").get<std::string>();
    if (fp != hex64(layout.fingerprint()))
      return FailedPrecondition(
          ck.path + ": checkpoint was written for model '" +
          meta.value("model_name", std::string("?")) +
          "' whose parameter layout differs from this run's; hint: resume with the same --model, "
          "or use a fresh --checkpoint-dir");
    state->step = meta.at("train").at("step").get<int>();
    state->sampler.seed = meta.at("sampler").at("seed").get<uint64_t>();
    state->sampler.consumed = meta.at("sampler").at("consumed").get<uint64_t>();
    for (int i = 0; i < 4; ++i)
      state->rng[i] = std::stoull(meta.at("rng").at(i).get<std::string>(), nullptr, 16);
    *opt_step = meta.at("optimizer").at("step").get<int>();
    state->step_log = meta.value("step_log", std::string());
  } catch (const std::exception& e) {
    return DataLoss(ck.path + ": checkpoint metadata is incomplete (" + e.what() +
                    "); hint: it was not written by this version of cann-train");
  }
  const size_t bytes = layout.total_floats() * sizeof(float);
  struct Target {
    const char* name;
    float* dst;
  };
  for (const Target& t : {Target{"params", params ? model.params() : nullptr}, Target{"adam_m", m},
                          Target{"adam_v", v}}) {
    if (t.dst == nullptr) continue;
    const ckpt::Section* s = ck.find(t.name);
    if (s == nullptr) return DataLoss(ck.path + ": checkpoint has no '" + t.name + "' section");
    if (s->data.size() != bytes)
      return DataLoss(ck.path + ": section '" + t.name + "' holds " +
                      std::to_string(s->data.size()) + " bytes, the model needs " +
                      std::to_string(bytes));
    if (shards != nullptr)
      model::slice_from_full(layout, reinterpret_cast<const float*>(s->data.data()), model.table(),
                             shards->at, t.dst);
    else
      std::memcpy(t.dst, s->data.data(), bytes);
  }
  return OkStatus();
}

}  // namespace cann::train
