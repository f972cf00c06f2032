// The training loop.
#include "train/trainer.h"

#include <unistd.h>
#include <cmath>
#include <filesystem>

#include <csignal>
#include <cstring>

#include "ckpt/checkpoint.h"
#include "core/json_line.h"
#include "core/log.h"
#include "core/threads.h"
#include "core/timer.h"
#include "data/tokenizer.h"
#include "debug/hang_analysis.h"
#include "model/engine_support.h"
#include "model/flops.h"
#include "model/param_table.h"
#include "parallel/pipeline_runner.h"
#include "plan/engine_memory.h"
#include "plan/strategy.h"
#include "train/expert_load.h"
#include "train/link_probe.h"
#include "train/step_profiler.h"

namespace cann::train {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;
void on_stop_signal(int sig) {
  g_stop_signal = sig;
}

std::string human_count(double n) {
  char buf[32];
  if (n >= 1e9)
    std::snprintf(buf, sizeof(buf), "%.2fB", n / 1e9);
  else if (n >= 1e6)
    std::snprintf(buf, sizeof(buf), "%.2fM", n / 1e6);
  else if (n >= 1e3)
    std::snprintf(buf, sizeof(buf), "%.1fK", n / 1e3);
  else
    std::snprintf(buf, sizeof(buf), "%.0f", n);
  return buf;
}

}  // namespace

StatusOr<std::unique_ptr<Trainer>> Trainer::create(const TrainConfig& config, const DistEnv* env,
                                                   const CommConfig& comm) {
  std::unique_ptr<Trainer> t(new Trainer(config));
  CANN_RETURN_IF_ERROR(t->setup(env, comm));
  return t;
}

Status Trainer::setup(const DistEnv* env, const CommConfig& comm) {
  set_num_threads(config_.threads);
  if (env != nullptr && env->world_size > 1) {
    // (The global batch is checked against the data-parallel ranks in resolve_layout.)
    CANN_ASSIGN_OR_RETURN(world_, make_world_group(*env, comm, &store_));
    rank_ = env->rank;
    world_size_ = env->world_size;
    job_id_ = env->job_id;
    start_beacon(*env);
  }
  if (env != nullptr) env_ = std::make_unique<DistEnv>(*env);
  comm_ = comm;
  CANN_RETURN_IF_ERROR(resolve_layout());
  CANN_ASSIGN_OR_RETURN(spec_, model::load_model_spec(config_.model));
  if (spec_.architecture == model::Architecture::kVit)
    return InvalidArgument("model '" + spec_.name +
                           "' is a vit: the trainer runs gpt and bert models, vit specs are for "
                           "planning; hint: use `cann-train search --model " +
                           spec_.name + "`");
  CANN_RETURN_IF_ERROR(model::engine_builds(spec_));
  if (const std::string notice = model::engine_notice(spec_); !notice.empty() && rank_ == 0)
    log_info(notice);
  seq_len_ = config_.seq_len > 0 ? config_.seq_len : spec_.seq_length;
  CANN_RETURN_IF_ERROR(check_fits_in_memory());
  CANN_ASSIGN_OR_RETURN(data_, data::load_dataset(config_.data));
  const bool bert = spec_.architecture == model::Architecture::kBert;
  // BERT's [MASK] is the last vocabulary id, so data ids must stay below it.
  const int id_limit = bert ? spec_.vocab_size - 1 : spec_.vocab_size;
  if (data_.max_token >= id_limit)
    return InvalidArgument("data '" + config_.data + "' holds token id " +
                           std::to_string(data_.max_token) + " but model '" + spec_.name +
                           "' accepts ids below " + std::to_string(id_limit) +
                           (bert ? " (the last id is [MASK])" : "") +
                           "; hint: pick a model whose vocab_size covers the data");
  CANN_RETURN_IF_ERROR(setup_model_parallel());
  parallel::PipelineSchedule schedule = parallel::PipelineSchedule::k1F1B;
  if (layout_.pp > 1) {
    CANN_ASSIGN_OR_RETURN(
        schedule, resolve_pipeline_schedule(config_.pipeline_schedule, layout_, accum_steps_,
                                            "--strategy " + config_.strategy + ": "));
  }
  CANN_ASSIGN_OR_RETURN(
      model_,
      model::Model::create(spec_, micro_batch_, seq_len_,
                           mp_ ? mp_->tensor_parallel() : model::TensorParallel{},
                           layout_.pp > 1 ? mp_->pipeline_stage(spec_, accum_steps_, schedule)
                                          : model::PipelineStage{},
                           mp_ ? mp_->expert_parallel() : model::ExpertParallel{},
                           layout_.recompute,
                           mp_ ? mp_->context_parallel() : model::ContextParallel{}));
  if (layout_.pp > 1 && schedule == parallel::PipelineSchedule::kInterleaved)
    pipeline_ = std::make_unique<parallel::PipelineRunner>(*model_, *world_, mp_->pp_group(),
                                                           mp_->stage_ranks(), mp_->stage());
  else if (layout_.pp > 1)
    pipeline_ = std::make_unique<parallel::PipelineRunner>(
        *model_, *world_, mp_->pp_prev(), mp_->pp_next(), schedule, mp_->stage(), layout_.pp);
  optim::AdamWConfig oc;
  oc.weight_decay = config_.weight_decay;
  oc.grad_clip = config_.grad_clip;
  if (world_) {
    CANN_RETURN_IF_ERROR(make_data_parallel_engine());
  } else {
    if (config_.compress != "none" || zero_stage_ != 0)
      return InvalidArgument(std::string(config_.compress != "none" ? "--compress" : "zero>0") +
                             " needs several data-parallel processes; hint: add "
                             "--nproc-per-node 2 or more");
    opt_ = std::make_unique<optim::AdamW>(model_->table(), oc);
  }
  CANN_ASSIGN_OR_RETURN(data::Sampler sampler,
                        data::Sampler::create(data_.train.size(), seq_len_, config_.seed));
  sampler_ = std::make_unique<data::Sampler>(std::move(sampler));
  if (data_.val.size() < static_cast<size_t>(seq_len_) + 1)
    return InvalidArgument("validation split of '" + config_.data + "' has " +
                           std::to_string(data_.val.size()) +
                           " tokens, fewer than one sequence of " + std::to_string(seq_len_ + 1) +
                           "; hint: use more data or a shorter --seq-len");
  schedule_ =
      optim::LrSchedule{config_.lr, config_.resolved_warmup(), config_.steps, config_.min_lr_ratio};
  rng_.reseed(config_.seed ^ 0x5eedf00dULL);
  inputs_.resize(static_cast<size_t>(micro_batch_) * seq_len_);
  targets_.resize(inputs_.size());
  sample_ids_.resize(micro_batch_);

  model_->init_params(config_.seed);
  if (dp_) {
    const Status adopted = dp_->adopt_params();
    if (!adopted.ok()) return comm_failure(adopted);
  }
  CANN_ASSIGN_OR_RETURN(keeper_, StateKeeper::create(config_, env, leader()));
  if (keeper_->elastic() && mp_)
    return InvalidArgument("--elastic with tp or pp > 1: a new generation rebuilds the world and "
                           "data-parallel groups only; hint: use a data-parallel --strategy");
  if (keeper_->generation() > 0 && !env_->node_snapshots.empty()) {
    CANN_RETURN_IF_ERROR(restore_from_peers());
  } else if (keeper_->generation() > 0) {
    // A restarted elastic generation: the committed step from memory, else from disk.
    CANN_ASSIGN_OR_RETURN(auto ck, keeper_->recovery_state(config_.checkpoint_dir));
    if (ck) {
      CANN_RETURN_IF_ERROR(restore_state(*ck));
      keeper_->event("state_restored", "step " + std::to_string(start_step_) + " from " + ck->path);
    }
  } else if (config_.resume) {
    if (config_.checkpoint_dir.empty())
      return InvalidArgument("--resume needs --checkpoint-dir DIR to resume from");
    auto ck = ckpt::read_latest_checkpoint(config_.checkpoint_dir);
    if (ck.ok()) {
      CANN_RETURN_IF_ERROR(restore_state(*ck));
      log_info("resumed from " + ck->path + " at step " + std::to_string(start_step_));
    } else if (ck.status().code() == StatusCode::kNotFound) {
      log_info("no checkpoint in " + config_.checkpoint_dir + " yet; starting from step 0");
    } else {
      return ck.status();
    }
  }
  if (start_step_ > config_.steps)
    return InvalidArgument("checkpoint is at step " + std::to_string(start_step_) +
                           ", beyond --steps " + std::to_string(config_.steps) +
                           "; hint: raise --steps to continue training");
  CANN_RETURN_IF_ERROR(start_monitoring(env));
  if (!config_.profile.empty()) {
    CANN_ASSIGN_OR_RETURN(const ProfileSchedule ps, parse_profile_schedule(config_.profile));
    profiler_ =
        std::make_unique<StepProfiler>(ps, config_.profile_dir, rank_, world_size_, host_name());
  }
  if (!config_.dump_grads.empty()) {
    if (config_.compress != "none")
      return InvalidArgument("--dump-grads writes the full reduced gradient, which --compress " +
                             config_.compress + " replaces; hint: dump under --compress none");
    if (config_.dump_grads_step > config_.steps)
      return InvalidArgument("--dump-grads-step " + std::to_string(config_.dump_grads_step) +
                             " is past --steps " + std::to_string(config_.steps) +
                             "; hint: pick a step the run reaches");
  }
  if (config_.grad_norms || config_.halt_on_nan) {
    if (dp_ && zero_stage_ >= 2)
      return InvalidArgument(std::string(config_.grad_norms ? "--grad-norms" : "--halt-on-nan") +
                             " reads each layer's gradients in the full gradient buffer, which "
                             "ZeRO stages 2 and 3 shard and release; hint: use zero=0 or 1");
    const std::string dump_dir = std::filesystem::path(config_.log_json).parent_path().string();
    grad_watch_ = std::make_unique<GradWatch>(model_->table(), config_.halt_on_nan,
                                              dump_dir.empty() ? "." : dump_dir, rank_);
  }
  if (!config_.tensorboard_dir.empty() && leader()) {
    CANN_ASSIGN_OR_RETURN(tensorboard_, monitor::TensorBoardWriter::open(config_.tensorboard_dir));
  }
  if (!config_.log_json.empty() && leader()) {
    // Appending: the agent's events share the file (StateKeeper emptied it for a fresh run).
    log_.reset(std::fopen(config_.log_json.c_str(), "a"));
    if (!log_)
      return IoError(config_.log_json +
                     ": cannot open the step log for writing: " + std::strerror(errno));
  }
  return OkStatus();
}

size_t Trainer::memory_bytes() const {
  const size_t weights = model_->num_floats() * sizeof(float);
  const size_t optimizer = dp_ ? dp_->optimizer_state_bytes() : 2 * weights;
  const size_t grads = dp_ ? dp_->gradient_bytes() : weights;
  const size_t params = dp_ ? dp_->parameter_bytes() : weights;
  return params + grads + optimizer + model_->activation_bytes();
}

std::string Trainer::host_name() {
  static const std::string name = [] {
    char buf[256] = {};
    gethostname(buf, sizeof(buf) - 1);
    return std::string(buf);
  }();
  return name;
}

// Who serves the dashboard: a single process itself; under cann-train's agent the agent (it
// sets CANN_TRAIN_MONITOR=1 and the workers publish their snapshots through the store); under
// another launcher (torchrun, Slurm, MPI) rank 0, which then also collects from the store.
Status Trainer::start_monitoring(const DistEnv* env) {
  if (!config_.monitor) return OkStatus();
  const char* flag = std::getenv("CANN_TRAIN_MONITOR");
  const std::string agent_monitors = flag != nullptr ? flag : "";
  if (env == nullptr) {
    hub_ = std::make_unique<monitor::Hub>("local", 1);
  } else {
    if (agent_monitors == "0" || !store_) return OkStatus();
    std::shared_ptr<comm::Store> store = store_;
    const std::string prefix = "cann/" + env->job_id + "/monitor";
    publisher_ = std::make_unique<monitor::SnapshotPublisher>(
        [store](const std::string& k, const std::string& v) { return store->set(k, v); }, prefix);
    if (!agent_monitors.empty() || env->rank != 0) return OkStatus();
    hub_ = std::make_unique<monitor::Hub>(env->job_id, env->world_size);
    collector_ = std::make_unique<monitor::SnapshotCollector>(
        *hub_,
        [store](const std::string& key) -> StatusOr<std::string> {
          CANN_ASSIGN_OR_RETURN(auto v, store->try_get(key));
          if (!v) return NotFound(key);
          return *v;
        },
        prefix, env->world_size);
    collector_->start();
  }
  alerts_ =
      std::make_unique<monitor::AlertEngine>(*hub_, env ? env->job_id : "local", config_.alerts);
  monitor::AlertEngine* alerts = alerts_.get();
  hub_->set_observer([alerts](const monitor::RankSnapshot& s) { alerts->observe(s); });
  server_ = std::make_unique<monitor::MonitorServer>(*hub_, config_.monitor_server);
  CANN_RETURN_IF_ERROR(server_->start());
  if (!config_.quiet) progress_.line("dashboard: " + server_->url());
  return OkStatus();
}

void Trainer::report_step(const monitor::RankSnapshot& snap, bool last) {
  if (hub_ && !collector_) hub_->update(snap);
  if (publisher_) publisher_->publish(snap, last);
}

// Tensor parallelism (tp > 1): checks the model and the batch against the split, then builds
// the process mesh (a collective over the world group).
Status Trainer::setup_model_parallel() {
  if (!layout_.model_parallel()) return OkStatus();
  const std::string where = "--strategy " + config_.strategy + ": ";
  Status fits = model::check_tp_divides(spec_, layout_.tp);
  if (!fits.ok()) return InvalidArgument(where + fits.message());
  if (layout_.pp > spec_.num_hidden_layers)
    return InvalidArgument(where + "pp=" + std::to_string(layout_.pp) + " stages but model '" +
                           spec_.name + "' has " + std::to_string(spec_.num_hidden_layers) +
                           " layers; hint: use at most one stage per layer");
  CANN_RETURN_IF_ERROR(check_pipeline_chunks(spec_, layout_, where));
  if (layout_.cp > 1 && spec_.is_moe())
    return InvalidArgument(where + "context parallelism (cp=" + std::to_string(layout_.cp) +
                           ") with the MoE layers of model '" + spec_.name +
                           "' is not available in this build (routing depends on which tokens "
                           "share a micro-batch); hint: use cp=1 for MoE models");
  if (layout_.cp > 1 && seq_len_ % (2 * layout_.cp) != 0)
    return InvalidArgument(where + "cp=" + std::to_string(layout_.cp) + " cuts each sequence of " +
                           std::to_string(seq_len_) + " tokens into 2*cp = " +
                           std::to_string(2 * layout_.cp) +
                           " equal chunks; hint: pick a --seq-len that is a multiple of " +
                           std::to_string(2 * layout_.cp));
  const int local_tokens = micro_batch_ * (seq_len_ / layout_.cp);
  if (layout_.sp && local_tokens % layout_.tp != 0)
    return InvalidArgument(where + "sp=on splits the " + std::to_string(local_tokens) +
                           " tokens of a micro-batch" +
                           (layout_.cp > 1 ? " on each context rank" : "") + " over tp=" +
                           std::to_string(layout_.tp) +
                           " ranks; hint: pick mbs or --seq-len so that tp divides mbs*seq_len" +
                           (layout_.cp > 1 ? "/cp" : ""));
  CANN_ASSIGN_OR_RETURN(mp_, ModelParallel::create(*world_, layout_));
  full_table_ = std::make_unique<model::ParamTable>(model::build_param_table(spec_));
  return OkStatus();
}

// Adds the routing of the model's last forward (its current slot: this stage's MoE layers) to
// the step's expert load, the dropped assignments and the run's per-expert totals.
void Trainer::record_expert_load(std::vector<double>* load, double* dropped) {
  if (expert_tokens_total_.empty()) expert_tokens_total_.assign(spec_.num_local_experts, 0);
  for (int i = 0; i < model_->num_moe_layers(); ++i) {
    const auto counts = model_->expert_counts(i);
    for (size_t e = 0; e < counts.size(); ++e) {
      expert_tokens_total_[e] += counts[e];
      (*load)[e] += counts[e];
    }
  }
  // From the counts and shapes every recomputation mode keeps (full recomputation keeps no
  // per-token assignments).
  *dropped += static_cast<double>(model_->dropped_assignments());
}

Status Trainer::pipeline_step(float grad_scale, model::ForwardStats* st,
                              parallel::StepComm* comm_stats, std::vector<double>* expert_load,
                              double* dropped) {
  auto batch = [this](int, const int** inputs, const int** targets) {
    next_batch();
    *inputs = inputs_.data();
    *targets = targets_.data();
  };
  parallel::PipelineRunner::GradReduction reduction;
  if (dp_) {
    reduction.begin = [this] { dp_->begin_reduction(); };
    reduction.layer_done = [this](int layer) { dp_->layer_done(layer); };
    reduction.finish = [this, comm_stats] { return dp_->finish_reduction(comm_stats); };
  }
  parallel::PipelineRunner::ForwardDone routed;
  if (spec_.is_moe()) routed = [&] { record_expert_load(expert_load, dropped); };
  auto stepped =
      pipeline_->step(accum_steps_, micro_batch_, seq_len_, grad_scale, batch, reduction, routed);
  if (!stepped.ok()) return comm_failure(stepped.status());
  const float frac = 1.0f / static_cast<float>(accum_steps_);
  st->loss = stepped->loss * frac;
  st->lm_loss = stepped->lm_loss * frac;
  st->aux_loss = stepped->aux_loss * frac;
  if (!std::isfinite(st->loss))
    return FailedPrecondition("loss is " + std::to_string(st->loss) + " at step " +
                              std::to_string(current_step_.load() + 1) + " on rank " +
                              std::to_string(rank_) + "; hint: lower --lr or --grad-clip");
  return OkStatus();
}

// The parallel layout of this run from --batch-size, --grad-accum, --strategy and the world
// size: local_batch_ sequences per rank and step, in accum_steps_ micro-steps of micro_batch_.
Status Trainer::resolve_layout() {
  if (config_.compress != "none" && config_.compress != "bf16" && config_.compress != "onebit")
    CANN_RETURN_IF_ERROR(parse_topk_ratio(config_.compress).status());
  int gbs = config_.batch_size, mbs = 0;
  if (!config_.strategy.empty()) {
    CANN_ASSIGN_OR_RETURN(plan::Strategy st, plan::parse_strategy(config_.strategy));
    CANN_ASSIGN_OR_RETURN(layout_, parallel_layout(st, config_.strategy, world_size_));
    if (st.gbs != 0) gbs = st.gbs;
    mbs = st.mbs;
    zero_stage_ = st.zero;
  }
  // An omitted mbs: a pipeline fills its stages with micro-batches of one sequence; otherwise
  // a rank takes its whole share at once, so its one backward hides the gradient reduction
  // (accumulation would leave only the last micro-step's backward to hide it behind).
  if (mbs == 0 && layout_.pp > 1) mbs = 1;
  // Each data-parallel replica (its tp x cp x pp ranks together) takes gbs / dp sequences;
  // the context ranks of a replica read the same sequences and keep their own positions.
  if (!layout_.model_parallel()) layout_.dp = world_size_;
  data_world_ = layout_.dp;
  data_rank_ = rank_ / (layout_.tp * layout_.cp) % layout_.dp;
  if (gbs % data_world_ != 0)
    return InvalidArgument("global batch " + std::to_string(gbs) + " does not divide over " +
                           std::to_string(data_world_) + " data-parallel ranks; hint: use a " +
                           "multiple of " + std::to_string(data_world_));
  config_.batch_size = gbs;
  local_batch_ = gbs / data_world_;
  accum_steps_ = config_.grad_accum > 0 ? config_.grad_accum : 1;
  // Multi-node elastic: the micro-batch of the largest world, whatever this generation's size
  // (8 sequences over 4 ranks: 2 per rank; on 2 ranks, 2 micro-steps of 2).
  const int elastic_micro = env_ ? env_->micro_batch : 0;
  if (config_.grad_accum == 0 && mbs == 0 && elastic_micro > 0 && local_batch_ % elastic_micro == 0)
    accum_steps_ = local_batch_ / elastic_micro;
  if (config_.grad_accum == 0 && mbs > 0) {
    if (local_batch_ % mbs != 0)
      return InvalidArgument("--strategy mbs=" + std::to_string(mbs) + " does not divide the " +
                             std::to_string(local_batch_) + " sequences each rank takes per step");
    accum_steps_ = local_batch_ / mbs;
  }
  if (local_batch_ % accum_steps_ != 0)
    return InvalidArgument("--grad-accum " + std::to_string(accum_steps_) +
                           " does not divide the " + std::to_string(local_batch_) +
                           " sequences each rank takes per step; hint: pick a divisor");
  micro_batch_ = local_batch_ / accum_steps_;
  if (mbs > 0 && micro_batch_ != mbs)
    return InvalidArgument("--grad-accum " + std::to_string(accum_steps_) +
                           " gives micro-batches of " + std::to_string(micro_batch_) +
                           ", but --strategy says mbs=" + std::to_string(mbs));
  return OkStatus();
}

// "; planner predicts 42.5 MiB (+0.0%)": the planner's figure for this run's strategy on an
// fp32 device (plan/engine_memory.h), beside the engine's own accounting. Empty where the
// planner does not model the run's state (compressed reductions keep error buffers it omits).
std::string Trainer::planner_memory_note() const {
  if (config_.compress != "none" && config_.compress != "bf16") return "";
  plan::Strategy s;
  s.dp = dp_ ? layout_.dp : 1;
  s.tp = layout_.tp;
  s.pp = layout_.pp;
  s.ep = layout_.ep;
  s.vpp = layout_.vpp;
  s.cp = layout_.cp;
  s.sp = layout_.sp;
  s.recompute = plan::plan_recompute(layout_.recompute);
  s.zero = dp_ ? zero_stage_ : 0;
  s.mbs = micro_batch_;
  s.gbs = micro_batch_ * accum_steps_ * s.dp;
  plan::EngineBuckets buckets;
  buckets.bytes = config_.bucket_mb * (1 << 20);
  auto e = plan::predict_engine_memory(spec_, s, micro_batch_, seq_len_, buckets);
  if (!e.ok() || e->total <= 0) return "";
  const double mine = static_cast<double>(memory_bytes());
  char buf[96];
  std::snprintf(buf, sizeof(buf), "; planner predicts %.1f MiB (%+.1f%%)", e->total / (1 << 20),
                100.0 * (e->total - mine) / mine);
  return buf;
}

StatusOr<OptimizerSnapshot> Trainer::optimizer_snapshot() {
  if (dp_) {
    StatusOr<OptimizerSnapshot> snap = dp_->snapshot();
    if (!snap.ok()) return comm_failure(snap.status());
    return snap;
  }
  OptimizerSnapshot s;
  s.m = opt_->m();
  s.v = opt_->v();
  s.step = opt_->step_count();
  return s;
}

// Parameters, gradients and two AdamW moments (4 fp32 copies) plus the activation arena must fit
// in the memory this machine has free; the arena is sized the way Model lays it out.
Status Trainer::check_fits_in_memory() const {
  const double params = static_cast<double>(model::build_param_table(spec_).total_floats());
  const double N = static_cast<double>(micro_batch_) * seq_len_;
  const double C = spec_.hidden_size, L = spec_.num_hidden_layers;
  const double ffn = spec_.is_moe() ? 2.0 * spec_.num_experts_per_tok * spec_.capacity_factor *
                                          spec_.moe_intermediate_size
                                    : 2.0 * spec_.intermediate_size;
  const double per_layer =
      N * (8 * C + spec_.qkv_size() + ffn) +
      static_cast<double>(micro_batch_) * spec_.num_attention_heads * seq_len_ * seq_len_;
  const double need = 4.0 * (4.0 * params + L * per_layer + 2.0 * N * spec_.vocab_size);
  long long avail_kb = 0;
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f != nullptr) {
    char line[256];
    while (std::fgets(line, sizeof(line), f))
      if (std::sscanf(line, "MemAvailable: %lld kB", &avail_kb) == 1) break;
    std::fclose(f);
  }
  const double avail = static_cast<double>(avail_kb) * 1024.0;
  if (avail > 0 && need > avail) {
    char buf[160];
    std::snprintf(buf, sizeof(buf),
                  "needs about %.1f GB (parameters, gradients, AdamW state "
                  "and activations) but this machine has %.1f GB available",
                  need / 1e9, avail / 1e9);
    return InvalidArgument("model '" + spec_.name + "' with micro-batch " +
                           std::to_string(micro_batch_) + " x " + std::to_string(seq_len_) +
                           " per process " + buf +
                           "; hint: lower --batch-size or --seq-len, pick a smaller model, or "
                           "plan a split with `cann-train search`");
  }
  return OkStatus();
}

void Trainer::next_batch() {
  sampler_->next_batch(data_.train, micro_batch_, inputs_.data(), targets_.data(), data_rank_,
                       data_world_, sample_ids_.data());
  mask_batch(inputs_.data(), targets_.data(), sample_ids_.data(), micro_batch_);
}

// BERT's masks come from an RNG keyed on (seed, global sample index), so a sample is masked the
// same way whichever rank trains it and whatever the world size.
void Trainer::mask_batch(int* inputs, int* targets, const uint64_t* sample_ids, int count) {
  if (spec_.architecture != model::Architecture::kBert) return;
  const int random_vocab = data_.byte_level ? data::kByteVocab : spec_.vocab_size - 1;
  for (int i = 0; i < count; ++i) {
    Rng rng(config_.seed * 0x9e3779b97f4a7c15ULL + sample_ids[i]);
    const size_t off = static_cast<size_t>(i) * seq_len_;
    data::apply_mlm_masking(inputs + off, targets + off, seq_len_, seq_len_, spec_.vocab_size - 1,
                            random_vocab, rng);
  }
}

Status Trainer::average_over_ranks(float* values, size_t count, const char* what) {
  if (!world_) return OkStatus();
  comm::Options opts;
  opts.tag = what;
  Status s = world_->allreduce(values, count, comm::DataType::kFloat32, comm::ReduceOp::kAvg, opts)
                 ->wait(std::chrono::hours(24));
  if (!s.ok()) return comm_failure(s);
  return OkStatus();
}

Trainer::~Trainer() {
  beacon_stop_ = true;
  if (beacon_.joinable()) beacon_.join();
}

void Trainer::start_beacon(const DistEnv& env) {
  if (!store_) return;
  std::shared_ptr<comm::Store> store = store_;
  const std::string key = "cann/" + env.job_id + "/flight/rank" + std::to_string(env.rank);
  const comm::Group* group = world_.get();
  beacon_ = std::thread([this, store, key, group] {
    const std::string host = host_name();
    while (!beacon_stop_) {
      std::string groups = "[";
      groups += group->flight_recorder().summary_json();
      groups += "]";
      JsonLine j;
      j.add("rank", rank_)
          .add("host", host)
          .add("pid", static_cast<int64_t>(getpid()))
          .add("time", unix_seconds())
          .add("step", current_step_.load())
          .add_raw("groups", groups);
      (void)store->set(key, j.str());  // diagnostics never stop training
      for (int i = 0; i < 10 && !beacon_stop_; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
}

void Trainer::explain_stall() {
  if (!store_) return;
  std::vector<std::optional<debug::RankBeacon>> beacons(world_size_);
  for (int r = 0; r < world_size_; ++r) {
    auto text = store_->try_get("cann/" + job_id_ + "/flight/rank" + std::to_string(r));
    if (!text.ok() || !text->has_value()) continue;
    auto b = debug::parse_beacon(**text);
    if (b.ok()) beacons[r] = *b;
  }
  for (const std::string& line : debug::analyze_hang(beacons, unix_seconds()))
    log_warning("rank " + std::to_string(rank_) + ": hang analysis: " + line);
}

Status Trainer::comm_failure(const Status& s) {
  comm_failed_ = true;
  explain_stall();
  return Status(s.code(), "rank " + std::to_string(rank_) + ": " + s.message());
}

// Mean loss over the first eval_batches * batch_size windows of the validation stream (the same
// windows, and for BERT the same masks, every time, so evaluations are comparable). Ranks split
// the windows the way the sampler splits training samples and average at the end.
StatusOr<double> Trainer::evaluate() {
  const int B = micro_batch_, T = seq_len_;
  const size_t windows = (data_.val.size() - 1) / T;
  std::vector<int> in(inputs_.size()), tg(targets_.size());
  std::vector<uint64_t> ids(B);
  float sum = 0.0f;
  for (int b = 0; b < config_.eval_batches; ++b) {
    for (int k = 0; k < accum_steps_; ++k) {
      for (int i = 0; i < B; ++i) {
        const uint64_t sample = static_cast<uint64_t>(b) * config_.batch_size + data_rank_ +
                                static_cast<uint64_t>(k * B + i) * data_world_;
        const size_t w = sample % windows;
        ids[i] = ~sample;  // a key space apart from the training samples'
        std::memcpy(&in[static_cast<size_t>(i) * T], &data_.val[w * T], sizeof(int) * T);
        std::memcpy(&tg[static_cast<size_t>(i) * T], &data_.val[w * T + 1], sizeof(int) * T);
      }
      mask_batch(in.data(), tg.data(), ids.data(), B);
      if (pipeline_) {
        auto st = pipeline_->forward_only(in.data(), tg.data(), B, T);
        if (!st.ok()) return comm_failure(st.status());
        sum += static_cast<float>(st->lm_loss);
        continue;
      }
      sum += static_cast<float>(model_->forward(in.data(), tg.data(), B, T).lm_loss);
      if (!model_->tp_status().ok()) return comm_failure(model_->tp_status());
      if (dp_ && !dp_->param_status().ok()) return comm_failure(dp_->param_status());
    }
  }
  sum /= static_cast<float>(config_.eval_batches * accum_steps_);
  CANN_RETURN_IF_ERROR(average_over_ranks(&sum, 1, "val_loss"));
  if (pipeline_) sum *= static_cast<float>(layout_.pp);  // only the last stage scored
  return static_cast<double>(sum);
}

Status Trainer::restore_state(const ckpt::LoadedCheckpoint& ck) {
  ResumeState st;
  if (dp_) {
    CANN_RETURN_IF_ERROR(dp_->restore(ck, &st));
  } else {
    int opt_step = 0;
    CheckpointShards shards;
    if (mp_) shards = {full_table_.get(), mp_->shard_place()};
    CANN_RETURN_IF_ERROR(restore_training_checkpoint(ck, *model_, opt_->m(), opt_->v(), &opt_step,
                                                     &st, mp_ ? &shards : nullptr));
    opt_->set_step_count(opt_step);
  }
  sampler_->restore(st.sampler);
  rng_.set_state(st.rng);
  start_step_ = st.step;
  return OkStatus();
}

// A collective under data parallelism (sharded or per-rank optimizer state is gathered first);
// rank 0 copies the state and a background thread writes it (StateKeeper). With `wait` (the
// last step, a stop), returns once the checkpoint is durable.
Status Trainer::save_checkpoint(int step, bool wait) {
  ResumeState st;
  st.step = step;
  st.sampler = sampler_->state();
  st.rng = rng_.state();
  CANN_ASSIGN_OR_RETURN(OptimizerSnapshot snap, optimizer_snapshot());
  if (mp_) {
    // Every rank sends its part; the leader writes the whole model, loadable at any strategy.
    const size_t n = full_table_->total_floats();
    full_state_.resize(3 * n);
    const float* params = snap.params != nullptr ? snap.params : model_->params();  // ZeRO-3
    Status s = mp_->gather_full(*world_, model_->table(), *full_table_, {params, snap.m, snap.v},
                                full_state_.data());
    if (!s.ok()) return comm_failure(s);
    snap.params = full_state_.data();
    snap.m = full_state_.data() + n;
    snap.v = full_state_.data() + 2 * n;
  }
  if (!leader()) return OkStatus();
  Stopwatch sw;
  const double t0 = now_seconds();
  CANN_RETURN_IF_ERROR(keeper_->checkpoint(
      mp_ ? training_checkpoint(spec_, *full_table_, snap, st, config_)
          : training_checkpoint(*model_, snap, st, config_),
      wait));
  if (profiler_) {
    char name[32];
    std::snprintf(name, sizeof(name), "/step-%08d", step);
    profiler_->checkpoint(t0, now_seconds(), config_.checkpoint_dir + name);
  }
  char buf[96];
  std::snprintf(buf, sizeof(buf), "checkpoint of step %d %s (%.2f s)", step,
                wait ? "saved" : "queued", sw.elapsed());
  progress_.line(buf);
  return OkStatus();
}

bool Trainer::stop_signalled() {
  return g_stop_signal != 0;
}

Status Trainer::keep_state(int done) {
  keeper_->set_step(done);
  if (!keeper_->snapshot_due(done)) return OkStatus();
  ResumeState st;
  st.step = done;
  st.sampler = sampler_->state();
  st.rng = rng_.state();
  CANN_ASSIGN_OR_RETURN(OptimizerSnapshot snap, optimizer_snapshot());
  // A snapshot that cannot be written leaves the previous ones: the committed step lags, no
  // more; training goes on.
  Status s = keeper_->snapshot(training_checkpoint(*model_, snap, st, config_));
  if (!s.ok()) log_warning(s.message());
  return OkStatus();
}

Status Trainer::finish_profile() {
  auto line = profiler_->finish(world_.get());
  if (!line.ok()) return line.status();
  if (!line->empty() && !config_.quiet) progress_.line(*line);
  return OkStatus();
}

Status Trainer::report_nonfinite(int step) {
  std::string event, message;
  Status s = grad_watch_->on_nonfinite(step, model_->grads(), &event, &message);
  if (!event.empty()) CANN_RETURN_IF_ERROR(write_log_line(event));
  const std::string& text = s.ok() ? message : s.message();
  if (hub_ && !text.empty()) hub_->add_event({unix_seconds(), "nonfinite_grad", rank_, text});
  if (s.ok() && !message.empty()) log_warning("rank " + std::to_string(rank_) + ": " + message);
  return s;
}

Status Trainer::write_log_line(const std::string& line) {
  if (!log_) return OkStatus();
  if (std::fprintf(log_.get(), "%s\n", line.c_str()) < 0 || std::fflush(log_.get()) != 0)
    return IoError(config_.log_json + ": cannot write the step log: " + std::strerror(errno) +
                   "; hint: check free disk space");
  return OkStatus();
}

Status Trainer::run(RunSummary* summary) {
  const int T = seq_len_;
  const bool show = leader() && !config_.quiet;
  // The whole model's count (a tensor-parallel rank's table holds only its shards).
  const double params = static_cast<double>(
      mp_ ? model::build_param_table(spec_).num_parameters() : model_->table().num_parameters());
  char header[512];
  std::snprintf(header, sizeof(header),
                "model %s: %s, %d layers, hidden %d, %d heads%s, %s parameters | batch %d x %d "
                "tokens | %d rank%s x %d threads (BLAS %s) | steps %d..%d",
                spec_.name.c_str(),
                std::string(model::architecture_name(spec_.architecture)).c_str(),
                spec_.num_hidden_layers, spec_.hidden_size, spec_.num_attention_heads,
                spec_.is_moe() ? (", " + std::to_string(spec_.num_local_experts) + " experts top-" +
                                  std::to_string(spec_.num_experts_per_tok))
                                     .c_str()
                               : "",
                human_count(params).c_str(), config_.batch_size, T, world_size_,
                world_size_ == 1 ? "" : "s", num_threads(), blas_core_name(), start_step_ + 1,
                config_.steps);
  if (show) {
    progress_.line(header);
    progress_.line("data " + data_.description);
    const double mb = 1.0 / (1 << 20);
    const double weights = dp_ ? static_cast<double>(dp_->parameter_bytes())
                               : static_cast<double>(model_->num_floats()) * sizeof(float);
    const double optimizer = dp_ ? static_cast<double>(dp_->optimizer_state_bytes()) : 2 * weights;
    const double grads = dp_ ? static_cast<double>(dp_->gradient_bytes()) : weights;
    const double acts = static_cast<double>(model_->activation_bytes());
    char mem[256];
    std::snprintf(mem, sizeof(mem),
                  "memory per rank: parameters %.1f MiB, gradients %.1f MiB, optimizer state %.1f "
                  "MiB, activations %.1f MiB, total %.1f MiB",
                  weights * mb, grads * mb, optimizer * mb, acts * mb,
                  static_cast<double>(memory_bytes()) * mb);
    progress_.line(std::string(mem) + planner_memory_note());
    if (mp_) progress_.line("process mesh: " + mp_->describe() + "\n" + mp_->rank_table());
    if (pipeline_)
      progress_.line(
          "pipeline: " + std::to_string(layout_.pp) + " stages" +
          (layout_.vpp > 1 ? " of " + std::to_string(layout_.vpp) + " chunks" : std::string()) +
          ", schedule " + parallel::pipeline_schedule_name(pipeline_->schedule()) + ", " +
          std::to_string(accum_steps_) + " micro-batches of " + std::to_string(micro_batch_) +
          " per step");
    std::string reduced_over;
    if (layout_.cp > 1)
      reduced_over = " (gradients reduced over dp x cp = " +
                     std::to_string(data_world_ * layout_.cp) + " ranks)";
    if (dp_)
      progress_.line("data parallel: " + std::to_string(data_world_) + " ranks" + reduced_over +
                     ", " + std::to_string(accum_steps_) + " micro-step" + (accum_steps_ == 1 ? "" : "s") +
                     " of " + std::to_string(micro_batch_) + " per rank, " + dp_->describe());
  }

  // Every group exists by now, so their communication threads keep their priority.
  if (world_ && config_.compute_nice > 0 && set_compute_nice(config_.compute_nice) != 0)
    log_warning("--compute-nice " + std::to_string(config_.compute_nice) +
                ": could not lower the priority of every compute thread");
  g_stop_signal = 0;
  auto old_int = std::signal(SIGINT, on_stop_signal);
  auto old_term = std::signal(SIGTERM, on_stop_signal);
  struct RestoreSignals {
    decltype(old_int) i, t;
    ~RestoreSignals() {
      std::signal(SIGINT, i);
      std::signal(SIGTERM, t);
    }
  } restore{old_int, old_term};

  summary->first_step = start_step_;
  summary->last_step = start_step_;
  // Under --elastic, a survivor of a lost peer rejoins the next generation and trains on.
  Status trained = train_steps(summary);
  while (!trained.ok() && rejoinable()) {
    CANN_RETURN_IF_ERROR(rejoin(trained));
    trained = train_steps(summary);
  }
  CANN_RETURN_IF_ERROR(trained);
  return finish_run(summary, show);
}

// The steps from start_step_ to the end, or to a stop.
Status Trainer::train_steps(RunSummary* summary) {
  const int B = micro_batch_, T = seq_len_;
  const bool show = leader() && !config_.quiet;
  const double flops_per_token = model::train_flops_per_token(spec_, T);
  double time_sum = 0.0;
  int timed_steps = 0;
  for (int step = start_step_; step < config_.steps; ++step) {
    current_step_ = step;
    if (profiler_) profiler_->begin_step(step - start_step_, step + 1);
    const double t0 = now_seconds();
    if (dp_)
      dp_->zero_grads();
    else
      model_->zero_grads();
    // Micro-steps: each rank's share of the global batch in accum_steps_ forward/backward
    // passes whose gradients accumulate; only the last one's backward communicates (every
    // one's under ZeRO stage 2, which keeps no full gradient between micro-steps).
    model::ForwardStats st;
    parallel::StepComm comm_stats;
    // Under cp the reduction averages over dp x cp ranks whose gradients are parts of one
    // replica's: scaled by cp, the average is the data-parallel mean of their sums.
    const float grad_scale = static_cast<float>(layout_.cp) / static_cast<float>(accum_steps_);
    double forward_s = 0.0, backward_s = 0.0;
    // This rank's routing over the step's micro-steps and MoE layers (under a pipeline, this
    // stage's MoE layers over the micro-batches the schedule runs).
    std::vector<double> expert_load(spec_.is_moe() ? spec_.num_local_experts : 0, 0.0);
    double dropped = 0.0;
    if (pipeline_) {
      CANN_RETURN_IF_ERROR(pipeline_step(grad_scale, &st, &comm_stats, &expert_load, &dropped));
      backward_s = now_seconds() - t0;
    }
    for (int k = 0; k < (pipeline_ ? 0 : accum_steps_); ++k) {
      next_batch();
      const double tf = now_seconds();
      const model::ForwardStats micro = model_->forward(inputs_.data(), targets_.data(), B, T);
      forward_s += now_seconds() - tf;
      if (profiler_) profiler_->compute("forward", tf, now_seconds());
      const double tb = now_seconds();
      if (!std::isfinite(micro.loss))
        return FailedPrecondition("loss is " + std::to_string(micro.loss) + " at step " +
                                  std::to_string(step + 1) + " on rank " + std::to_string(rank_) +
                                  "; hint: lower --lr or --grad-clip");
      st.loss += micro.loss / accum_steps_;
      st.lm_loss += micro.lm_loss / accum_steps_;
      st.aux_loss += micro.aux_loss / accum_steps_;
      if (dp_ && (k == accum_steps_ - 1 || dp_->reduces_every_micro_step())) {
        parallel::StepComm micro_comm;
        Status s = dp_->backward_and_reduce(grad_scale, &micro_comm);
        if (!s.ok()) return comm_failure(s);
        comm_stats.comm_time_s += micro_comm.comm_time_s;
        comm_stats.comm_exposed_s += micro_comm.comm_exposed_s;
        comm_stats.comm_bytes += micro_comm.comm_bytes;
      } else {
        model_->backward(grad_scale);
      }
      if (!model_->tp_status().ok()) return comm_failure(model_->tp_status());
      if (dp_ && !dp_->param_status().ok()) return comm_failure(dp_->param_status());
      backward_s += now_seconds() - tb;
      if (profiler_) profiler_->compute("backward", tb, now_seconds());
      if (spec_.is_moe()) record_expert_load(&expert_load, &dropped);
    }
    const double compute_s = now_seconds() - t0 - comm_stats.comm_exposed_s;
    bool grads_bad = grad_watch_ && grad_watch_->inspect(model_->grads(), step + 1);
    // The losses for the log and the stop request are agreed by all ranks (any rank's signal
    // stops all at the same step, so no rank waits in a collective the others never issue).
    bool stop_requested = g_stop_signal != 0 || (server_ != nullptr && server_->stop_requested());
    if (world_) {
      // The expert counts ride on the same all-reduce. Each data-parallel rank routes its own
      // tokens (under ep too: expert_counts are the router's counts for every expert, before
      // the all-to-all), while the ranks of a tensor-parallel group route the same tokens, so
      // only tp rank 0 contributes; each pipeline stage counts its own MoE layers, so the sum
      // covers them all. The world mean times the world size is the global sum.
      // Counts stay far below 2^24, so floats carry them exactly.
      std::vector<float> scalars = {static_cast<float>(st.loss), static_cast<float>(st.lm_loss),
                                    static_cast<float>(st.aux_loss),
                                    stop_requested ? 1.0f : 0.0f, grads_bad ? 1.0f : 0.0f};
      const bool counts_here = rank_ % layout_.tp == 0;
      if (spec_.is_moe()) {
        for (double c : expert_load) scalars.push_back(counts_here ? static_cast<float>(c) : 0.0f);
        scalars.push_back(counts_here ? static_cast<float>(dropped) : 0.0f);
      }
      CANN_RETURN_IF_ERROR(average_over_ranks(scalars.data(), scalars.size(), "step_scalars"));
      if (spec_.is_moe()) {
        for (size_t e = 0; e < expert_load.size(); ++e)
          expert_load[e] = std::round(static_cast<double>(scalars[5 + e]) * world_size_);
        dropped = std::round(static_cast<double>(scalars.back()) * world_size_);
      }
      // Under pp the stages' shares of the loss add up to it: the world mean is 1/pp of it.
      for (int i = 0; i < 3 && pipeline_; ++i) scalars[i] *= static_cast<float>(layout_.pp);
      st.loss = scalars[0];
      st.lm_loss = scalars[1];
      st.aux_loss = scalars[2];
      stop_requested = scalars[3] > 0.0f;
      grads_bad = scalars[4] > 0.0f;
    }
    const float lr = schedule_.at(step);
    double norm = 0.0;
    const double t_opt = now_seconds();
    if (dp_ && mp_) {
      Status tied = mp_->sync_tied_embedding(
          *model_, [this](size_t offset, size_t count, const std::function<Status(float*)>& fn) {
            return dp_->with_grad_range(offset, count, fn);
          });
      if (!tied.ok()) return comm_failure(tied);
    }
    if (!config_.dump_grads.empty() && step + 1 == config_.dump_grads_step)
      CANN_RETURN_IF_ERROR(dump_grads(step + 1));
    if (dp_) {
      auto stepped = dp_->step(lr);
      if (!stepped.ok()) return comm_failure(stepped.status());
      norm = *stepped;
      if (mp_ && !mp_->status().ok()) return comm_failure(mp_->status());
    } else {
      norm = opt_->step(model_->params(), model_->grads(), lr);
    }
    const double dt = now_seconds() - t0;
    if (profiler_) {
      profiler_->compute("optimizer", t_opt, t0 + dt);
      profiler_->compute("step", t0, t0 + dt);
    }
    // The first step pays for page faults and BLAS warm-up: keep it out of the ETA.
    if (step > start_step_) {
      time_sum += dt;
      ++timed_steps;
    }
    const double avg = timed_steps > 0 ? time_sum / timed_steps : dt;
    const double tokens = static_cast<double>(config_.batch_size) * T;
    const int done = step + 1;
    if (step == start_step_) summary->first_loss = st.loss;
    summary->last_loss = st.loss;
    summary->last_step = done;

    StepReport r;
    r.step = done;
    r.total = config_.steps;
    r.loss = st.loss;
    r.lr = lr;
    r.grad_norm = norm;
    r.step_time_s = dt;
    r.tokens_per_s = tokens / dt;
    r.gflops = flops_per_token * tokens / dt / 1e9;
    r.eta_s = avg * (config_.steps - done);
    r.samples = static_cast<int64_t>(sampler_->state().consumed);
    r.tflops_per_device = r.gflops / 1e3 / world_size_;
    if (show) progress_.step(r);

    JsonLine line;
    line.add("step", done)
        .add("time", unix_seconds())
        .add("loss", st.loss)
        .add("lr", static_cast<double>(lr))
        .add("grad_norm", norm)
        .add("step_time_s", dt)
        .add("tokens_per_s", r.tokens_per_s)
        .add("tokens", static_cast<int64_t>(tokens))
        .add("gflops", r.gflops);
    if (dp_) {
      line.add("comm_time_s", comm_stats.comm_time_s)
          .add("comm_exposed_s", comm_stats.comm_exposed_s)
          .add("comm_bytes", static_cast<int64_t>(comm_stats.comm_bytes));
    }
    if (spec_.is_moe()) {
      line.add("lm_loss", st.lm_loss).add("aux_loss", st.aux_loss);
      line.add("dropped_assignments", static_cast<int64_t>(dropped));
      line.add_raw("expert_load", expert_load_json(expert_load));
      line.add("expert_balance", expert_balance(expert_load));
    }
    const bool last = done == config_.steps;
    const bool stop_now =
        stop_requested || (config_.exit_interval > 0 && done % config_.exit_interval == 0 && !last);
    if ((config_.eval_every > 0 && done % config_.eval_every == 0) || last) {
      const double t_eval = now_seconds();
      CANN_ASSIGN_OR_RETURN(const double val, evaluate());
      if (profiler_) profiler_->compute("evaluate", t_eval, now_seconds());
      summary->last_val_loss = val;
      last_val_loss_ = val;
      line.add("val_loss", val);
      char buf[96];
      std::snprintf(buf, sizeof(buf), "step %d: val loss %.4f (train loss %.4f)", done, val,
                    st.loss);
      if (show) progress_.line(buf);
    }
    if (config_.grad_norms) line.add_raw("grad_norms", grad_watch_->norms_json());
    CANN_RETURN_IF_ERROR(write_log_line(line.str()));
    if (grads_bad) CANN_RETURN_IF_ERROR(report_nonfinite(done));
    if (tensorboard_) {
      const double wall = unix_seconds();
      Status tb = tensorboard_->add_scalar("train/loss", st.loss, done, wall);
      if (tb.ok()) tb = tensorboard_->add_scalar("train/learning_rate", lr, done, wall);
      if (tb.ok()) tb = tensorboard_->add_scalar("train/grad_norm", norm, done, wall);
      if (tb.ok()) tb = tensorboard_->add_scalar("perf/step_seconds", dt, done, wall);
      if (tb.ok())
        tb = tensorboard_->add_scalar("perf/tokens_per_second", r.tokens_per_s, done, wall);
      if (tb.ok() && dp_)
        tb = tensorboard_->add_scalar("perf/comm_exposed_ratio", comm_stats.comm_exposed_s / dt,
                                      done, wall);
      if (tb.ok() && last_val_loss_ >= 0 && line.str().find("val_loss") != std::string::npos)
        tb = tensorboard_->add_scalar("eval/loss", last_val_loss_, done, wall);
      if (tb.ok() && last) tb = tensorboard_->flush();
      if (!tb.ok()) return tb;
    }
    if (world_ && config_.link_probe_every > 0 && done % config_.link_probe_every == 0) {
      auto links = probe_links(*world_);
      if (!links.ok()) return comm_failure(links.status());
      link_gbps_ = std::move(*links);
    }
    if (hub_ || publisher_) {
      comm_bytes_total_ += static_cast<int64_t>(comm_stats.comm_bytes);
      monitor::RankSnapshot snap;
      snap.rank = rank_;
      snap.host = host_name();
      snap.time = unix_seconds();
      snap.step = done;
      snap.total_steps = config_.steps;
      snap.samples = r.samples;
      snap.loss = st.loss;
      snap.val_loss = last_val_loss_;
      snap.lr = lr;
      snap.grad_norm = norm;
      snap.step_time_s = dt;
      snap.forward_backward_s = compute_s;
      snap.forward_s = forward_s;
      snap.backward_s = backward_s - comm_stats.comm_exposed_s;
      snap.tokens_per_s = r.tokens_per_s;
      snap.tflops_per_device = r.tflops_per_device;
      snap.comm_time_s = comm_stats.comm_time_s;
      snap.comm_exposed_s = comm_stats.comm_exposed_s;
      snap.comm_bytes_total = comm_bytes_total_;
      snap.memory_bytes = static_cast<int64_t>(memory_bytes());
      snap.expert_tokens = expert_tokens_total_;
      snap.link_gbps = link_gbps_;
      report_step(snap, last);
    }
    const bool periodic = config_.checkpoint_every > 0 && done % config_.checkpoint_every == 0;
    CANN_RETURN_IF_ERROR(keep_state(done));
    if (step == start_step_ && keeper_->generation() > 0 && leader())
      keeper_->event("training_resumed", "step " + std::to_string(done) + " completed");
    if (!config_.checkpoint_dir.empty() && (periodic || last || stop_now))
      CANN_RETURN_IF_ERROR(save_checkpoint(done, last || stop_now));
    if (profiler_ && world_) profiler_->collect_comm(*world_);
    if (profiler_ && profiler_->end_step()) CANN_RETURN_IF_ERROR(finish_profile());
    if (stop_now) {
      summary->interrupted = stop_requested;
      if (leader())
        progress_.line(summary->interrupted
                           ? "stop requested (signal or /api/stop) after step " +
                                 std::to_string(done)
                           : "exit interval reached after step " + std::to_string(done));
      break;
    }
  }
  return OkStatus();
}

Status Trainer::finish_run(RunSummary* summary, bool show) {
  if (profiler_) CANN_RETURN_IF_ERROR(finish_profile());  // the run ended inside the window
  progress_.finish();
  log_.reset();
  // Under model parallelism the forward is a collective, so every rank samples (the leader
  // prints); under ZeRO stage 3 every rank first gathers the whole model.
  const bool sample = spec_.architecture == model::Architecture::kGpt &&
                      config_.sample_tokens > 0 && summary->last_step == config_.steps;
  if (sample && dp_) {
    const Status gathered = dp_->materialize_params();
    if (!gathered.ok()) return comm_failure(gathered);
  }
  if (sample && (show || mp_)) {
    StatusOr<std::string> text = generate_sample();
    if (!text.ok()) return comm_failure(text.status());
    if (show) progress_.line("sample:\n" + *text);
  }
  return OkStatus();
}

}  // namespace cann::train
