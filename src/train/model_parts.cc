// This rank's model, its mesh and pipeline, and the passes that run them (see model_parts.h).
#include "train/model_parts.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/timer.h"
#include "kernels/cpu/moe_routing.h"
#include "model/expert_placement.h"
#include "parallel/pipeline_schedule.h"
#include "train/data_parallel.h"
#include "train/hf_weights.h"

namespace cann::train {

StatusOr<std::unique_ptr<ModelParts>> ModelParts::build(const model::ModelSpec& spec,
                                                        const RunLayout& layout, comm::Group* world,
                                                        CommFailure on_comm_failure) {
  std::unique_ptr<ModelParts> p(new ModelParts(layout, world, std::move(on_comm_failure)));
  const plan::Strategy& s = layout.strategy;
  if (s.model_parallel()) {
    CANN_ASSIGN_OR_RETURN(p->mp_, ModelParallel::create(*world, s));
    p->full_table_ = std::make_unique<model::ParamTable>(model::build_param_table(spec));
  }
  ModelParallel* mp = p->mp_.get();
  CANN_ASSIGN_OR_RETURN(
      p->model_,
      model::Model::create(
          spec, layout.micro_batch(), layout.seq_len,
          mp ? mp->tensor_parallel() : model::TensorParallel{},
          s.pp > 1 ? mp->pipeline_stage(spec, layout.seq_len, layout.accum_steps, layout.schedule)
                   : model::PipelineStage{},
          mp ? mp->expert_parallel() : model::ExpertParallel{}, s.recompute,
          mp ? mp->context_parallel() : model::ContextParallel{}));
  if (s.pp > 1 && layout.schedule == parallel::PipelineSchedule::kInterleaved)
    p->pipeline_ = std::make_unique<parallel::PipelineRunner>(*p->model_, *world, mp->pp_group(),
                                                              mp->stage_ranks(), mp->stage());
  else if (s.pp > 1)
    p->pipeline_ = std::make_unique<parallel::PipelineRunner>(
        *p->model_, *world, mp->pp_prev(), mp->pp_next(), layout.schedule, mp->stage(), s.pp);
  return p;
}

ModelParts::~ModelParts() = default;

double ModelParts::num_parameters() const {
  return static_cast<double>(full_table_ ? full_table_->num_parameters()
                                         : model_->table().num_parameters());
}

Status ModelParts::check_loss(double loss, int step) const {
  if (std::isfinite(loss)) return OkStatus();
  return FailedPrecondition("loss is " + std::to_string(loss) + " at step " +
                            std::to_string(step + 1) + " on rank " + std::to_string(layout_.rank) +
                            "; hint: lower --lr or --grad-clip");
}

// Micro-steps: each rank's share of the global batch in accum_steps forward/backward passes
// whose gradients accumulate; the optimizer decides which backwards communicate.
StatusOr<StepCompute> ModelParts::forward_backward(BatchSource& batches, StepOptimizer& opt,
                                                   int step, StepProfiler* profiler) {
  const int B = layout_.micro_batch(), T = layout_.seq_len, M = layout_.accum_steps;
  StepCompute out;
  const model::ModelSpec& spec = model_->spec();
  if (spec.is_moe()) out.expert_load.assign(spec.num_local_experts, 0.0);
  if (spec.is_moe() && layout_.strategy.ep > 1) out.rank_rows.assign(layout_.strategy.ep, 0.0);
  if (spec.has_expert_bias() || rebalancer_)
    out.layer_load.assign(static_cast<size_t>(spec.num_hidden_layers) * spec.num_local_experts,
                          0.0f);
  // Under cp the reduction averages over dp x cp ranks whose gradients are parts of one
  // replica's: scaled by cp, the average is the data-parallel mean of their sums.
  const float grad_scale = static_cast<float>(layout_.strategy.cp) / static_cast<float>(M);
  const double t0 = now_seconds();
  if (pipeline_) {
    CANN_RETURN_IF_ERROR(pipeline_step(grad_scale, batches, opt, step, &out));
    out.backward_s = now_seconds() - t0;
    return out;
  }
  for (int k = 0; k < M; ++k) {
    batches.next();
    const double tf = now_seconds();
    const model::ForwardStats micro = model_->forward(batches.inputs(), batches.targets(), B, T);
    out.forward_s += now_seconds() - tf;
    if (profiler) profiler->compute("forward", tf, now_seconds());
    const double tb = now_seconds();
    CANN_RETURN_IF_ERROR(check_loss(micro.loss, step));
    out.stats.loss += micro.loss / M;
    out.stats.lm_loss += micro.lm_loss / M;
    out.stats.aux_loss += micro.aux_loss / M;
    Status s = opt.backward(grad_scale, k == M - 1, &out.comm);
    if (!s.ok()) return on_comm_failure_(s);
    if (!model_->tp_status().ok()) return on_comm_failure_(model_->tp_status());
    if (!opt.param_status().ok()) return on_comm_failure_(opt.param_status());
    out.backward_s += now_seconds() - tb;
    if (profiler) profiler->compute("backward", tb, now_seconds());
    if (model_->spec().is_moe()) record_expert_load(&out);
  }
  return out;
}

Status ModelParts::pipeline_step(float grad_scale, BatchSource& batches, StepOptimizer& opt,
                                 int step, StepCompute* out) {
  auto batch = [&batches](int, const int** inputs, const int** targets) {
    batches.next();
    *inputs = batches.inputs();
    *targets = batches.targets();
  };
  parallel::PipelineRunner::GradReduction reduction;
  reduction.begin = [&opt] { opt.begin_reduction(); };
  reduction.layer_done = [&opt](int layer) { opt.layer_done(layer); };
  reduction.finish = [&opt, out] { return opt.finish_reduction(&out->comm); };
  parallel::PipelineRunner::ForwardDone routed;
  if (model_->spec().is_moe()) routed = [this, out] { record_expert_load(out); };
  const int M = layout_.accum_steps;
  auto stepped = pipeline_->step(M, layout_.micro_batch(), layout_.seq_len, grad_scale, batch,
                                 reduction, routed);
  if (!stepped.ok()) return on_comm_failure_(stepped.status());
  const float frac = 1.0f / static_cast<float>(M);
  out->stats.loss = stepped->loss * frac;
  out->stats.lm_loss = stepped->lm_loss * frac;
  out->stats.aux_loss = stepped->aux_loss * frac;
  return check_loss(out->stats.loss, step);
}

// Adds the routing of the model's last forward (its current slot: this stage's MoE layers) to
// the step's expert load and the dropped assignments. From the counts and shapes every
// recomputation mode keeps (full recomputation keeps no per-token assignments).
void ModelParts::record_expert_load(StepCompute* out) {
  for (int i = 0; i < model_->num_moe_layers(); ++i) {
    const auto counts = model_->expert_counts(i);
    for (size_t e = 0; e < counts.size(); ++e) out->expert_load[e] += counts[e];
    if (!out->rank_rows.empty())
      out->rank_rows[layout_.data_rank % layout_.strategy.ep] +=
          static_cast<double>(model_->expert_rows(i));
    if (out->layer_load.empty()) continue;
    float* layer =
        out->layer_load.data() + static_cast<size_t>(model_->moe_layer(i)) * counts.size();
    for (size_t e = 0; e < counts.size(); ++e) layer[e] += static_cast<float>(counts[e]);
  }
  out->dropped += static_cast<double>(model_->dropped_assignments());
}

// The same windows (and for BERT the same masks) every time, so evaluations are comparable.
StatusOr<float> ModelParts::evaluation_loss_sum(const BatchSource& batches,
                                                const StepOptimizer& opt, int eval_batches) {
  const int B = layout_.micro_batch(), T = layout_.seq_len;
  std::vector<int> in(static_cast<size_t>(B) * T), tg(in.size());
  float sum = 0.0f;
  for (int b = 0; b < eval_batches; ++b) {
    for (int k = 0; k < layout_.accum_steps; ++k) {
      batches.eval_batch(b, k, in.data(), tg.data());
      if (pipeline_) {
        auto st = pipeline_->forward_only(in.data(), tg.data(), B, T);
        if (!st.ok()) return on_comm_failure_(st.status());
        sum += static_cast<float>(st->lm_loss);
        continue;
      }
      sum += static_cast<float>(model_->forward(in.data(), tg.data(), B, T).lm_loss);
      if (!model_->tp_status().ok()) return on_comm_failure_(model_->tp_status());
      if (!opt.param_status().ok()) return on_comm_failure_(opt.param_status());
    }
  }
  return sum;
}

Status ModelParts::sync_tied_embedding(StepOptimizer& opt) {
  if (!mp_) return OkStatus();
  Status tied = mp_->sync_tied_embedding(
      *model_, [&opt](size_t offset, size_t count, const std::function<Status(float*)>& fn) {
        return opt.with_grad_range(offset, count, fn);
      });
  return tied.ok() ? tied : on_comm_failure_(tied);
}

void ModelParts::set_expert_rebalance(const ExpertRebalance& config) {
  rebalancer_ = std::make_unique<ExpertRebalancer>(config, model_->spec(), layout_);
  model_->reserve_expert_shadows(config.replicas);
}

// Summed over the world in place (a no-op on one process).
Status ModelParts::sum_over_world(std::vector<float>* values, const char* tag) {
  if (!world_) return OkStatus();
  comm::Options opts;
  opts.tag = tag;
  Status s = world_
                 ->allreduce(values->data(), values->size(), comm::DataType::kFloat32,
                             comm::ReduceOp::kSum, opts)
                 ->wait();
  return s.ok() ? s : on_comm_failure_(s);
}

// Per-layer expert loads summed over the world in place: a tensor-parallel group's ranks route
// the same tokens, so only its rank 0 contributes.
Status ModelParts::sum_layer_load(std::vector<float>* load, const char* tag) {
  if (layout_.rank % layout_.strategy.tp != 0) std::fill(load->begin(), load->end(), 0.0f);
  return sum_over_world(load, tag);
}

StatusOr<ExpertMove> ModelParts::rebalance_experts(const StepCompute& c, StepOptimizer& opt,
                                                   int done) {
  if (!rebalancer_) return ExpertMove{};
  // The step changed the experts' weights: replicated experts' copies refresh before use.
  model_->expert_weights_changed();
  rebalancer_->add(c.layer_load);
  if (!rebalancer_->due(done)) return ExpertMove{};
  CANN_RETURN_IF_ERROR(sum_layer_load(&rebalancer_->window(), "expert_rebalance_load"));
  std::map<int, model::ExpertSlots> now;
  std::map<int, std::vector<int>> copies;
  for (int layer : model_->expert_layers()) {
    now[layer] = model_->expert_slots(layer);
    copies[layer] = model_->expert_shadows(layer);
  }
  ExpertMove move = rebalancer_->decide(now, copies);
  if (!move.to.empty()) {
    // check_expert_rebalance admits only optimizers whose state is laid out like the
    // parameters: the moments travel with their experts.
    const std::vector<float*> state = opt.parameter_shaped_state();
    CANN_CHECK(!state.empty()) << "expert rebalancing under an optimizer whose state cannot move";
    Status s = model_->move_experts(move.to, state);
    if (!s.ok()) return on_comm_failure_(s);
  }
  for (auto& [layer, experts] : move.replicate) model_->set_expert_shadows(layer, experts);
  // Each stage decided its own layers: one rank of each tells the others (for the event).
  const model::ShardPlace at = mp_->shard_place();
  const bool tells = at.tp_rank == 0 && mp_->dp_rank() == 0 && mp_->context_parallel().rank == 0;
  std::vector<float> told =
      pack_moves(tells ? move.layers : std::vector<LayerMove>{}, model_->spec().num_hidden_layers);
  CANN_RETURN_IF_ERROR(sum_over_world(&told, "expert_moves"));
  move.layers = unpack_moves(told);
  return move;
}

Status ModelParts::update_expert_bias(const StepCompute& c, StepOptimizer& opt) {
  const model::ModelSpec& spec = model_->spec();
  const float speed = static_cast<float>(spec.expert_bias_update_speed);
  if (!spec.has_expert_bias() || speed == 0.0f) return OkStatus();
  std::vector<float> load = c.layer_load;
  CANN_RETURN_IF_ERROR(sum_layer_load(&load, "expert_bias_load"));
  const int E = spec.num_local_experts;
  std::vector<float> delta(static_cast<size_t>(E));
  for (const model::TensorInfo& t : model_->table().tensors()) {
    if (!t.name.ends_with("moe.router.bias")) continue;
    std::fill(delta.begin(), delta.end(), 0.0f);
    kernels::moe_update_expert_bias(delta.data(), load.data() + static_cast<size_t>(t.layer) * E, E,
                                    speed);
    opt.add_to_params(t.offset, delta.data(), delta.size());
  }
  return OkStatus();
}

Status ModelParts::status() const {
  if (mp_ && !mp_->status().ok()) return on_comm_failure_(mp_->status());
  return OkStatus();
}

Status ModelParts::gather_full(const std::vector<const float*>& locals, float* out) {
  Status s = mp_->gather_full(*world_, model_->table(), *full_table_, shard_place(), locals, out);
  return s.ok() ? s : on_comm_failure_(s);
}

std::vector<int64_t> ModelParts::replica_runs(bool experts) const {
  return model::full_run_groups(model_->table(), *full_table_, shard_place(),
                                mp_->held_in_full(experts));
}

model::ShardPlace ModelParts::shard_place() const {
  model::ShardPlace at = mp_->shard_place();
  at.expert = model_->expert_locator();
  return at;
}

StatusOr<std::unique_ptr<StepOptimizer>> ModelParts::make_optimizer(const TrainConfig& config) {
  optim::AdamWConfig oc;
  oc.weight_decay = config.weight_decay;
  oc.grad_clip = config.grad_clip;
  model::Model& model = *model_;
  if (!world_) return std::unique_ptr<StepOptimizer>(std::make_unique<LocalOptimizer>(model, oc));
  const plan::Strategy& s = layout_.strategy;
  DataParallelConfig dc;
  dc.zero = s.zero;
  dc.compress = config.compress;
  dc.onebit_warmup = config.onebit_warmup;
  dc.onebit_warmup_bf16 = config.onebit_warmup_bf16;
  dc.buckets = plan::EngineBuckets::of_mib(config.bucket_mb);
  ModelParallel* mp = mp_.get();
  if (mp != nullptr) {
    dc.grad_sum_of_squares = mp->grad_sum_of_squares(model.table());
    dc.shards = {full_table_.get(), shard_place()};
    if (s.ep == 1) {  // ZeRO's norm over tp x pp shards (ep runs without ZeRO)
      dc.norm_counted = mp->norm_counted();
      dc.norm_across = [mp](double* v) { return mp->sum_over_model_parallel(v); };
    } else {
      dc.ep = s.ep;
      dc.expert_dp_group = &mp->expert_dp_group();
    }
  }
  CANN_ASSIGN_OR_RETURN(
      auto engine,
      DataParallelEngine::create(model, mp ? mp->gradient_group() : *world_, oc, dc, config.steps));
  return std::unique_ptr<StepOptimizer>(std::move(engine));
}

Status ModelParts::load_hf(const model::ModelSpec& spec, const std::string& dir) {
  std::vector<float> full;
  CANN_RETURN_IF_ERROR(load_hf_weights(spec, dir, &full));
  const model::ShardPlace at = mp_ ? shard_place() : model::ShardPlace{};
  model::slice_from_full(model::build_param_table(spec), full.data(), model_->table(), at,
                         model_->params());
  return OkStatus();
}

Status ModelParts::export_hf(const model::ModelSpec& spec, const std::string& dir, bool writes) {
  const float* params = model_->params();
  std::vector<float> full;
  if (mp_) {
    full.resize(full_table_->total_floats());
    CANN_RETURN_IF_ERROR(gather_full({params}, full.data()));
    params = full.data();
  }
  return writes ? train::export_hf(spec, params, dir) : OkStatus();
}

std::string ModelParts::describe_mesh() const {
  if (!mp_) return "";
  std::string out = "process mesh: " + mp_->describe() + "\n" + mp_->rank_table();
  // Experts that ep does not divide: say how many each rank holds.
  const int E = model_->spec().num_local_experts, ep = layout_.strategy.ep;
  if (ep > 1 && E % ep != 0) {
    out += "\nexperts: " + std::to_string(E) + " over ep=" + std::to_string(ep) + ": " +
           model::experts_per_rank(E, ep) + " a rank (a rank with fewer keeps an empty slot)";
  }
  return out;
}

std::string ModelParts::describe_pipeline() const {
  if (!pipeline_) return "";
  const plan::Strategy& s = layout_.strategy;
  return "pipeline: " + std::to_string(s.pp) + " stages" +
         (s.vpp > 1 ? " of " + std::to_string(s.vpp) + " chunks" : std::string()) + ", schedule " +
         parallel::pipeline_schedule_name(pipeline_->schedule()) + ", " +
         std::to_string(layout_.accum_steps) + " micro-batches of " +
         std::to_string(layout_.micro_batch()) + " per step";
}

}  // namespace cann::train
