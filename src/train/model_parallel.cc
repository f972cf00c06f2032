// The model-parallel wiring of a worker: mesh, communicators, stages, norms, gathers.
#include "train/model_parallel.h"

#include <algorithm>

#include "comm/group.h"
#include "kernels/cpu/grad_norm.h"
#include "model/model.h"
#include "model/param_table.h"
#include "model/spec.h"
#include "parallel/mesh.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/tp_comm.h"
#include "plan/engine_memory.h"

namespace cann::train {

StatusOr<std::unique_ptr<ModelParallel>> ModelParallel::create(comm::Group& world,
                                                               const plan::Strategy& s) {
  std::unique_ptr<ModelParallel> mp(new ModelParallel());
  mp->layout_ = s;
  CANN_ASSIGN_OR_RETURN(mp->mesh_, parallel::ProcessMesh::build(world, parallel::mesh_shape(s)));
  mp->tp_comm_ = std::make_unique<parallel::GroupTensorParallelComm>(mp->mesh_->tp());
  mp->cp_comm_ = std::make_unique<parallel::GroupTensorParallelComm>(mp->mesh_->cp());
  mp->ep_comm_ = std::make_unique<parallel::GroupExpertParallelComm>(mp->mesh_->ep());
  return mp;
}

ModelParallel::~ModelParallel() = default;

model::TensorParallel ModelParallel::tensor_parallel() const {
  model::TensorParallel t;
  t.rank = mesh_->coords().tp;
  t.size = layout_.tp;
  t.sequence_parallel = layout_.sp;
  t.comm = tp_comm_.get();
  return t;
}

model::ExpertParallel ModelParallel::expert_parallel() const {
  model::ExpertParallel e;
  e.rank = mesh_->coords().ep;
  e.size = layout_.ep;
  e.comm = ep_comm_.get();
  return e;
}

model::ContextParallel ModelParallel::context_parallel() const {
  model::ContextParallel c;
  c.rank = mesh_->coords().cp;
  c.size = layout_.cp;
  c.comm = cp_comm_.get();
  return c;
}

comm::Group& ModelParallel::gradient_group() {
  return mesh_->dp_cp();
}

comm::Group& ModelParallel::expert_dp_group() {
  return mesh_->expert_dp();
}

comm::Group& ModelParallel::dp_group() {
  return mesh_->dp();
}

int ModelParallel::dp_rank() const {
  return mesh_->coords().dp;
}

std::function<double(const float*)> ModelParallel::grad_sum_of_squares(
    const model::ParamTable& table) {
  return [this, &table, counted = norm_counted()](const float* grads) {
    double sum = 0.0;
    // This rank's experts, summed over the expert group below. Experts are whole on every
    // tensor-parallel rank (replicated), so only tp rank 0's expert groups count them: with
    // tp=2 the groups of tp rank 0 and 1 hold the same experts and would count them twice.
    float experts = 0.0f;
    for (const model::TensorInfo& t : table.tensors()) {
      if (!counted(t)) continue;
      const double squares = kernels::sum_of_squares(grads + t.offset, t.numel);
      if (t.expert && layout_.ep > 1)
        experts += static_cast<float>(squares);
      else
        sum += squares;
    }
    if (layout_.ep > 1 && status_.ok())
      status_ = mesh_->ep()
                    .allreduce(&experts, 1, comm::DataType::kFloat32, comm::ReduceOp::kSum)
                    ->wait();
    sum += experts;
    if (status_.ok()) status_ = sum_over_model_parallel(&sum);
    return sum;
  };
}

int ModelParallel::stage() const {
  return mesh_->coords().pp;
}
int ModelParallel::pp_prev() const {
  return mesh_->pp_prev();
}
int ModelParallel::pp_next() const {
  return mesh_->pp_next();
}

std::vector<int> ModelParallel::stage_ranks() const {
  return parallel::pp_group_ranks(mesh_->shape(), mesh_->rank());
}

comm::Group& ModelParallel::pp_group() {
  return mesh_->pp();
}

model::PipelineStage ModelParallel::pipeline_stage(const model::ModelSpec& s, int seq_len,
                                                   int micro_batches,
                                                   parallel::PipelineSchedule schedule) const {
  const int L = s.num_hidden_layers, P = layout_.pp, stage = mesh_->coords().pp;
  if (schedule == parallel::PipelineSchedule::kInterleaved) {
    // Chunk c of this stage is virtual stage c*P + stage of P*V equal ones.
    const int V = layout_.vpp, per = L / (P * V);
    model::PipelineStage ps;
    for (int c = 0; c < V; ++c)
      ps.chunks.push_back({(c * P + stage) * per, (c * P + stage + 1) * per});
    ps.first_layer = ps.chunks.front().first;
    ps.end_layer = ps.chunks.back().end;
    ps.slots = parallel::pipeline_slots(schedule, stage, P, micro_batches, V);
    return ps;
  }
  const std::vector<int> bounds = plan::engine_stage_bounds(s, layout_, seq_len);
  model::PipelineStage ps;
  ps.first_layer = bounds[stage];
  ps.end_layer = bounds[stage + 1];
  ps.slots = parallel::pipeline_slots(schedule, stage, P, micro_batches);
  return ps;
}

Status ModelParallel::sync_tied_embedding(model::Model& model, const GradAccess& access) {
  if (layout_.pp == 1) return OkStatus();
  const model::ParamTable& table = model.table();
  auto sum = [this](float* data, size_t count) {
    return mesh_->pp().allreduce(data, count, comm::DataType::kFloat32, comm::ReduceOp::kSum)
        ->wait();
  };
  auto wte = table.find("wte");
  if (!wte.ok()) {
    // A middle stage adds zeros: the sum runs over the whole pipeline group.
    const model::ParamTable first = model::build_stage_param_table(model.spec(), layout_.tp, 0, 0);
    zero_wte_.assign(first.at(*first.find("wte")).numel, 0.0f);
    return sum(zero_wte_.data(), zero_wte_.size());
  }
  const model::TensorInfo& t = table.at(*wte);
  if (!access) return sum(model.grads() + t.offset, t.numel);
  return access(t.offset, t.numel, [&](float* data) { return sum(data, t.numel); });
}

std::function<bool(const model::TensorInfo&)> ModelParallel::norm_counted() const {
  const bool count_replicated = mesh_->coords().tp == 0;
  return [count_replicated](const model::TensorInfo& t) {
    if (t.name == "wte" && t.layer >= 0) return false;  // the last stage's tied copy
    return t.tp_split != model::TpSplit::kReplicated || count_replicated;
  };
}

Status ModelParallel::sum_over_model_parallel(double* value) {
  // fp32 on the wire: the norm only scales the clipping, 7 digits are plenty.
  float wire = static_cast<float>(*value);
  CANN_RETURN_IF_ERROR(
      mesh_->mp().allreduce(&wire, 1, comm::DataType::kFloat32, comm::ReduceOp::kSum)->wait());
  *value = static_cast<double>(wire);
  return OkStatus();
}

model::ShardPlace ModelParallel::shard_place() const {
  const parallel::MeshCoords& c = mesh_->coords();
  return {c.tp, layout_.tp, c.ep, layout_.ep, nullptr};
}

std::function<bool(const model::TensorInfo&)> ModelParallel::owned_in_full() const {
  const parallel::MeshCoords c = mesh_->coords();
  return [c](const model::TensorInfo& t) {
    if (t.name == "wte" && t.layer >= 0) return false;  // the last stage's tied copy
    if (c.cp != 0) return false;
    if (t.expert) return c.expert_block == 0 && c.tp == 0;
    return c.dp == 0 && (t.tp_split != model::TpSplit::kReplicated || c.tp == 0);
  };
}

std::function<bool(const model::TensorInfo&)> ModelParallel::held_in_full(bool experts) const {
  const int tp = mesh_->coords().tp;
  return [tp, experts](const model::TensorInfo& t) {
    if (t.name == "wte" && t.layer >= 0) return false;  // the last stage's tied copy
    if (t.expert != experts) return false;
    return t.expert ? tp == 0 : t.tp_split != model::TpSplit::kReplicated || tp == 0;
  };
}

Status ModelParallel::gather_full(comm::Group& world, const model::ParamTable& local,
                                  const model::ParamTable& full, const model::ShardPlace& at,
                                  const std::vector<const float*>& locals, float* out) {
  const auto owned = owned_in_full();
  const size_t n = full.total_floats();
  std::fill(out, out + n * locals.size(), 0.0f);
  for (size_t i = 0; i < locals.size(); ++i)
    model::place_into_full(local, locals[i], full, at, owned, out + i * n);
  comm::Options opts;
  opts.tag = "checkpoint_gather";
  return world
      .allreduce(out, n * locals.size(), comm::DataType::kFloat32, comm::ReduceOp::kSum, opts)
      ->wait();
}

std::string ModelParallel::describe() const {
  return mesh_->describe() + (layout_.sp ? ", sequence parallel" : "");
}

std::string ModelParallel::rank_table() const {
  return parallel::describe_mesh_ranks(mesh_->shape());
}

}  // namespace cann::train
