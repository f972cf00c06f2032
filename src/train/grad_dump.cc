// The gradient dump of one step (see grad_dump.h). Under ZeRO the data-parallel shards are
// assembled first; under model parallelism the model's shards with ModelParallel::gather_full,
// as checkpoints are.
#include "train/grad_dump.h"

#include <vector>

#include "ckpt/safetensors.h"

namespace cann::train {

StatusOr<std::string> dump_gradients(const TrainConfig& config, const RunLayout& layout,
                                     ModelParts& parts, StepOptimizer& opt, int done,
                                     const CommFailure& on_comm_failure) {
  const model::Model& model = parts.model();
  const model::ParamTable* table = &model.table();
  // The reduced gradient in this rank's layout (a collective under ZeRO).
  std::vector<float> local(model.num_floats()), full;
  if (Status s = opt.gather_grads(local.data()); !s.ok()) return on_comm_failure(s);
  const float* grads = local.data();
  if (parts.model_parallel() != nullptr) {
    full.resize(parts.full_table().total_floats());
    CANN_RETURN_IF_ERROR(parts.gather_full({grads}, full.data()));
    table = &parts.full_table();
    grads = full.data();
  }
  if (layout.rank != 0) return std::string();
  ckpt::SafeTensors st;
  st.metadata = {{"format", "cann-train gradients"},
                 {"model", model.spec().name},
                 {"step", std::to_string(done)},
                 {"strategy", plan::strategy_brief(config.strategy)},
                 {"world_size", std::to_string(layout.world)},
                 {"global_batch", std::to_string(layout.global_batch())},
                 {"seq_len", std::to_string(layout.seq_len)}};
  for (const model::TensorInfo& t : table->tensors())
    st.tensors.push_back({t.name, t.shape, {grads + t.offset, grads + t.offset + t.numel}});
  CANN_RETURN_IF_ERROR(ckpt::write_safetensors(config.dump_grads, st));
  return "gradients of step " + std::to_string(done) + " written to " + config.dump_grads;
}

}  // namespace cann::train
