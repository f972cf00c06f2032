// `run --dump-grads FILE`: one step's gradient, as the optimizer is about to take it (after the
// data-parallel reduction and the tied embedding's sum over the pipeline, before clipping), in
// the single-process layout whatever the strategy, so that runs under different strategies
// compare tensor by tensor (`debug grads FILE --compare REF`). Under ZeRO the data-parallel
// shards are assembled first; under model parallelism the model's shards with
// ModelParallel::gather_full, as checkpoints are.
#include "ckpt/safetensors.h"
#include "train/data_parallel.h"
#include "model/model.h"
#include "train/model_parallel.h"
#include "train/trainer.h"

namespace cann::train {

Status Trainer::dump_grads(int done) {
  const model::ParamTable* table = &model_->table();
  const float* grads = model_->grads();
  if (dp_ && zero_stage_ > 0) {
    // The shards assembled into this rank's layout (a collective over the dp group).
    local_grads_.resize(model_->num_floats());
    Status s = dp_->gather_grads(local_grads_.data());
    if (!s.ok()) return comm_failure(s);
    grads = local_grads_.data();
  }
  if (mp_) {
    full_grads_.resize(full_table_->total_floats());
    Status s = mp_->gather_full(*world_, model_->table(), *full_table_, {grads},
                                full_grads_.data());
    if (!s.ok()) return comm_failure(s);
    table = full_table_.get();
    grads = full_grads_.data();
  }
  if (!leader()) return OkStatus();
  ckpt::SafeTensors st;
  st.metadata = {{"format", "cann-train gradients"},
                 {"model", spec_.name},
                 {"step", std::to_string(done)},
                 {"strategy", config_.strategy.empty() ? "dp" : config_.strategy},
                 {"world_size", std::to_string(world_size_)},
                 {"global_batch", std::to_string(config_.batch_size)},
                 {"seq_len", std::to_string(seq_len_)}};
  for (const model::TensorInfo& t : table->tensors())
    st.tensors.push_back({t.name, t.shape, {grads + t.offset, grads + t.offset + t.numel}});
  CANN_RETURN_IF_ERROR(ckpt::write_safetensors(config_.dump_grads, st));
  if (!config_.quiet)
    progress_.line("gradients of step " + std::to_string(done) + " written to " +
                   config_.dump_grads);
  return OkStatus();
}

}  // namespace cann::train
