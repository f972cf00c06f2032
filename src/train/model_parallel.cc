// Strategy -> trainable layout, and the tensor-parallel wiring of a worker.
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
#include "plan/partition.h"
#include "plan/strategy.h"

namespace cann::train {

StatusOr<ParallelLayout> parallel_layout(const plan::Strategy& s, const std::string& text,
                                         int world) {
  auto refuse = [&](const std::string& what) {
    return InvalidArgument("--strategy " + text + ": " + what);
  };
  // Under sp each tensor-parallel rank would route its own slice of the tokens, so the ranks
  // of a tensor group would exchange different rows with their expert peers: not built yet.
  if (s.ep > 1 && s.sp)
    return refuse("expert parallelism (ep=" + std::to_string(s.ep) +
                  ") with sp=on is not available in this build; hint: use sp=off with ep, or "
                  "ep=1 with sp");
  // Each context rank would route only its positions: capacities and drops would differ from
  // the single process's, and the expert exchange would carry different rows per cp rank.
  if (s.cp > 1 && s.ep > 1)
    return refuse("context parallelism (cp=" + std::to_string(s.cp) +
                  ") with expert parallelism (ep=" + std::to_string(s.ep) +
                  ") is not available in this build; hint: use cp=1 with ep, or ep=1 with cp");
  if (s.vpp > 1 && s.pp == 1)
    return refuse("vpp=" + std::to_string(s.vpp) +
                  " interleaves model chunks over pipeline stages, so it needs pp > 1; hint: add "
                  "pp=2 or drop vpp");
  if (s.sp && s.tp == 1)
    return refuse(
        "sp=on shards the sequence inside the tensor-parallel group, so it needs tp > 1; "
        "hint: add tp=2 or drop sp");
  ParallelLayout l;
  l.tp = s.tp;
  l.pp = s.pp;
  l.vpp = s.vpp;
  l.cp = s.cp;
  l.sp = s.sp;
  l.recompute = plan::engine_recompute(s.recompute);
  const int mp = s.tp * s.pp * s.cp;
  if (world % mp != 0)
    return refuse("tp*pp*cp = " + std::to_string(mp) + " needs a multiple of " +
                  std::to_string(mp) +
                  " processes, but " + std::to_string(world) +
                  " were started; hint: launch with --nproc-per-node " +
                  std::to_string(s.dp > 0 ? s.dp * mp : mp) + " (times --nnodes)");
  l.dp = world / mp;
  l.ep = s.ep;
  if (l.dp % s.ep != 0)
    return refuse("ep=" + std::to_string(s.ep) + " does not divide dp=" + std::to_string(l.dp) +
                  " (expert groups are carved out of the data-parallel ranks); hint: pick an ep "
                  "that divides dp");
  if (s.dp != 0 && s.dp != l.dp)
    return refuse("dp*tp*pp*cp = " + std::to_string(s.dp) + "*" + std::to_string(s.tp) + "*" +
                  std::to_string(s.pp) + "*" + std::to_string(s.cp) + " = " +
                  std::to_string(s.dp * mp) + ", but " +
                  std::to_string(world) + " processes were started; hint: launch with " +
                  "--nproc-per-node " + std::to_string(s.dp * mp) + " (times --nnodes)");
  if (s.pp > 1 && s.zero >= 2)
    return refuse("zero=" + std::to_string(s.zero) +
                  " with pp > 1: stages 2 and 3 reduce (and gather) every micro-batch, which a "
                  "pipeline runs many of between optimizer steps, as in DeepSpeed; hint: use "
                  "zero=1 with pipeline parallelism");
  if (s.ep > 1 && s.zero != 0)
    return refuse("zero=" + std::to_string(s.zero) +
                  " with ep > 1 is not available in this build (ZeRO would shard over the "
                  "data-parallel ranks tensors that differ between them: their experts); hint: "
                  "use zero=0 with expert parallelism");
  return l;
}

StatusOr<parallel::PipelineSchedule> resolve_pipeline_schedule(const std::string& flag,
                                                               const ParallelLayout& layout,
                                                               int micro_batches,
                                                               const std::string& where) {
  const bool interleave = layout.vpp > 1;
  parallel::PipelineSchedule sched =
      interleave ? parallel::PipelineSchedule::kInterleaved : parallel::PipelineSchedule::k1F1B;
  if (!flag.empty() && flag != "auto") {
    CANN_ASSIGN_OR_RETURN(sched, parallel::parse_pipeline_schedule(flag));
  }
  const std::string name = parallel::pipeline_schedule_name(sched);
  if (interleave && sched != parallel::PipelineSchedule::kInterleaved)
    return InvalidArgument(where + "--pipeline-schedule " + name +
                           " with vpp=" + std::to_string(layout.vpp) +
                           ": vpp > 1 runs the interleaved schedule; hint: drop "
                           "--pipeline-schedule or use vpp=1");
  if (!interleave && sched == parallel::PipelineSchedule::kInterleaved)
    return InvalidArgument(where +
                           "--pipeline-schedule interleaved needs model chunks to "
                           "interleave; hint: add vpp=2 (or more) to --strategy");
  if (interleave && micro_batches % layout.pp != 0)
    return InvalidArgument(where + "vpp=" + std::to_string(layout.vpp) + " runs " +
                           std::to_string(micro_batches) + " micro-batches per step, not a " +
                           "multiple of pp=" + std::to_string(layout.pp) +
                           " (interleaved 1F1B runs them in groups of pp); hint: pick gbs, mbs "
                           "or --grad-accum so that the micro-batches per step divide by " +
                           std::to_string(layout.pp));
  return sched;
}

Status check_pipeline_chunks(const model::ModelSpec& spec, const ParallelLayout& layout,
                             const std::string& where) {
  const int L = spec.num_hidden_layers, chunks = layout.pp * layout.vpp;
  if (layout.vpp == 1 || L % chunks == 0) return OkStatus();
  std::string fits;
  for (int v = 1; v * layout.pp <= L; ++v)
    if (L % (v * layout.pp) == 0) {
      if (!fits.empty()) fits += ", ";
      fits += std::to_string(v);
    }
  return InvalidArgument(where + "vpp=" + std::to_string(layout.vpp) + " cuts model '" + spec.name +
                         "' into pp*vpp = " + std::to_string(chunks) +
                         " equal chunks, but it has " + std::to_string(L) +
                         " layers; hint: use vpp in " + (fits.empty() ? "1" : fits));
}

namespace {

// The micro-batches per step of a launch, as Trainer::resolve_layout derives them (0 where
// the batch does not split, which the workers report).
int launch_micro_batches(const plan::Strategy& st, const ParallelLayout& layout,
                         const LaunchBatch& batch) {
  const int gbs = st.gbs != 0 ? st.gbs : batch.batch_size;
  if (gbs <= 0 || gbs % layout.dp != 0) return 0;
  const int local = gbs / layout.dp;
  if (batch.grad_accum > 0) return batch.grad_accum;
  // An omitted mbs is 1 under pipeline parallelism (as the trainer reads it).
  const int mbs = st.mbs > 0 ? st.mbs : (layout.pp > 1 ? 1 : 0);
  if (mbs > 0) return local % mbs == 0 ? local / mbs : 0;
  return 1;
}

}  // namespace

Status check_strategy_for_launch(const std::string& strategy, const std::string& model_name,
                                 int world, const LaunchBatch& batch) {
  if (strategy.empty()) return OkStatus();
  CANN_ASSIGN_OR_RETURN(plan::Strategy st, plan::parse_strategy(strategy));
  CANN_ASSIGN_OR_RETURN(ParallelLayout layout, parallel_layout(st, strategy, world));
  if (layout.pp > 1) {
    // An M that cannot be derived here passes as pp: the workers report the batch itself.
    const int M = launch_micro_batches(st, layout, batch);
    auto sched = resolve_pipeline_schedule(batch.pipeline_schedule, layout, M > 0 ? M : layout.pp,
                                           "--strategy " + strategy + ": ");
    if (!sched.ok()) return sched.status();
  }
  if (!layout.model_parallel()) return OkStatus();
  auto spec = model::load_model_spec(model_name);
  if (!spec.ok()) return OkStatus();  // the workers report a bad model with its own message
  if (layout.cp > 1 && spec->is_moe())
    return InvalidArgument("--strategy " + strategy + ": context parallelism (cp=" +
                           std::to_string(layout.cp) + ") with the MoE layers of model '" +
                           spec->name +
                           "' is not available in this build (routing depends on which tokens "
                           "share a micro-batch); hint: use cp=1 for MoE models");
  if (layout.ep > 1 && (!spec->is_moe() || spec->num_local_experts % layout.ep != 0))
    return InvalidArgument("--strategy " + strategy + ": ep=" + std::to_string(layout.ep) +
                           " must divide the experts of model '" + spec->name + "' (" +
                           std::to_string(spec->num_local_experts) +
                           "); hint: use an MoE model and an ep that divides its experts");
  const int seq = batch.seq_len > 0 ? batch.seq_len : spec->seq_length;
  if (layout.cp > 1 && seq % (2 * layout.cp) != 0)
    return InvalidArgument("--strategy " + strategy + ": cp=" + std::to_string(layout.cp) +
                           " cuts each sequence of " + std::to_string(seq) +
                           " tokens into 2*cp = " + std::to_string(2 * layout.cp) +
                           " equal chunks; hint: pick a --seq-len that is a multiple of " +
                           std::to_string(2 * layout.cp));
  if (layout.pp > spec->num_hidden_layers)
    return InvalidArgument("--strategy " + strategy + ": pp=" + std::to_string(layout.pp) +
                           " stages but model '" + spec->name + "' has " +
                           std::to_string(spec->num_hidden_layers) +
                           " layers; hint: use at most one stage per layer");
  if (Status chunks = check_pipeline_chunks(*spec, layout, "--strategy " + strategy + ": ");
      !chunks.ok())
    return chunks;
  if (layout.tp == 1) return OkStatus();
  Status fits = model::check_tp_divides(*spec, layout.tp);
  if (!fits.ok()) return InvalidArgument("--strategy " + strategy + ": " + fits.message());
  return OkStatus();
}

StatusOr<std::unique_ptr<ModelParallel>> ModelParallel::create(comm::Group& world,
                                                               const ParallelLayout& layout) {
  std::unique_ptr<ModelParallel> mp(new ModelParallel());
  mp->layout_ = layout;
  parallel::MeshShape shape;
  shape.dp = layout.dp;
  shape.tp = layout.tp;
  shape.pp = layout.pp;
  shape.ep = layout.ep;
  shape.cp = layout.cp;
  CANN_ASSIGN_OR_RETURN(mp->mesh_, parallel::ProcessMesh::build(world, shape));
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

// Per-layer cost: the forward GEMM FLOPs per token (attention projections and scores, MLP or
// the routed experts), the tied head added to the last layer. Embedding lookups cost ~0.

model::PipelineStage ModelParallel::pipeline_stage(const model::ModelSpec& s, int micro_batches,
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
  std::vector<double> costs(L);
  const double C = s.hidden_size, T = s.seq_length;
  for (int l = 0; l < L; ++l) {
    const double attn = C * s.qkv_size() + C * C + 2.0 * T * C;
    const double ffn =
        s.is_moe_layer(l)
            ? 2.0 * C * s.moe_intermediate_size * s.num_experts_per_tok + C * s.num_local_experts
            : 2.0 * C * s.intermediate_size;
    costs[l] = attn + ffn;
  }
  costs[L - 1] += C * s.vocab_size;
  const std::vector<int> bounds = plan::partition_dp(costs, P);
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
  return {c.tp, layout_.tp, c.ep, layout_.ep};
}

Status ModelParallel::gather_full(comm::Group& world, const model::ParamTable& local,
                                  const model::ParamTable& full,
                                  const std::vector<const float*>& locals, float* out) {
  const parallel::MeshCoords& c = mesh_->coords();
  auto owned = [&](const model::TensorInfo& t) {
    if (t.name == "wte" && t.layer >= 0) return false;  // the last stage's tied copy
    if (c.cp != 0) return false;
    if (t.expert) return c.expert_block == 0 && c.tp == 0;
    return c.dp == 0 && (t.tp_split != model::TpSplit::kReplicated || c.tp == 0);
  };
  const size_t n = full.total_floats();
  std::fill(out, out + n * locals.size(), 0.0f);
  for (size_t i = 0; i < locals.size(); ++i)
    model::place_into_full(local, locals[i], full, shard_place(), owned, out + i * n);
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
