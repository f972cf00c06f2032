// The training loop (see trainer.h).
#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>

#include "core/host.h"
#include "core/log.h"
#include "core/pages.h"
#include "core/stop_signals.h"
#include "core/threads.h"
#include "core/timer.h"
#include "kernels/cpu/gemm.h"
#include "model/engine_support.h"
#include "model/expert_placement.h"
#include "model/flops.h"
#include "train/grad_dump.h"
#include "train/link_probe.h"
#include "train/run_description.h"

namespace cann::train {
namespace {

// ", its 8 experts 3, 3, 2 a rank" where ep does not divide a MoE model's experts.
std::string experts_spread(const model::ModelSpec& spec, int ep) {
  const int E = spec.num_local_experts;
  if (ep <= 1 || E % ep == 0) return std::string();
  return ", its " + std::to_string(E) + " experts " + model::experts_per_rank(E, ep) + " a rank";
}

}  // namespace

StatusOr<std::unique_ptr<Trainer>> Trainer::create(const TrainConfig& config, const DistEnv* env,
                                                   const CommConfig& comm) {
  std::unique_ptr<Trainer> t(new Trainer(config));
  CANN_RETURN_IF_ERROR(t->setup(env, comm));
  return t;
}

Trainer::~Trainer() = default;

Status Trainer::setup(const DistEnv* env, const CommConfig& comm) {
  set_num_threads(config_.threads);
  kernels::set_gemm_precision(config_.precision);
  comm_ = comm;
  const int world = env != nullptr ? env->world_size : 1, rank = env != nullptr ? env->rank : 0;
  if (env != nullptr) env_ = std::make_unique<DistEnv>(*env);
  if (world > 1) {
    // (The global batch is checked against the data-parallel ranks in resolve_run_layout.)
    CANN_ASSIGN_OR_RETURN(world_, make_world_group(*env, comm, &store_));
    beacon_ = std::make_unique<StallBeacon>(store_, env->job_id, rank, world);
    beacon_->start(*world_);
  }
  CANN_ASSIGN_OR_RETURN(spec_, model::load_model_spec(config_.model));
  if (config_.expert_bias_update_speed >= 0) {
    if (!spec_.has_expert_bias())
      return InvalidArgument("--expert-bias-update-speed: model '" + spec_.name +
                             "' has no expert selection bias (topk_method noaux_tc); hint: "
                             "drop the flag");
    spec_.expert_bias_update_speed = config_.expert_bias_update_speed;
  }
  if (env != nullptr && !env->strategy.empty()) {
    // Multi-node elastic under model parallelism: this generation's size trains the layout
    // planned for it (train/elastic_layouts.h).
    CANN_ASSIGN_OR_RETURN(plan::Strategy s, plan::parse_strategy(env->strategy));
    const plan::Strategy& was = config_.strategy;
    if (rank == 0 && (s.tp != was.tp || s.pp != was.pp || s.cp != was.cp || s.ep != was.ep ||
                      s.vpp != was.vpp || s.zero != was.zero))
      log_info("generation " + std::to_string(env->generation) + " of " + std::to_string(world) +
               " processes trains --strategy " + plan::strategy_brief(s) + ", re-planned from " +
               plan::strategy_brief(config_.strategy) + experts_spread(spec_, s.ep) +
               " (docs/elastic.md)");
    config_.strategy = s;
  }
  const ElasticShape elastic{env != nullptr && env->elastic(),
                             env != nullptr && !env->node_snapshots.empty(),
                             env ? env->micro_batch : 0};
  CANN_ASSIGN_OR_RETURN(layout_, resolve_run_layout(config_, spec_, world, rank, elastic));
  if (const std::string notice = model::engine_notice(spec_); !notice.empty() && rank == 0)
    log_info(notice);
  config_.batch_size = layout_.global_batch();
  CANN_RETURN_IF_ERROR(check_fits_in_memory(layout_, spec_, available_memory_bytes()));
  CANN_ASSIGN_OR_RETURN(batches_, BatchSource::open(config_, spec_, layout_));
  CANN_ASSIGN_OR_RETURN(parts_,
                        ModelParts::build(spec_, layout_, world_.get(),
                                          [this](const Status& s) { return comm_failure(s); }));
  if (config_.expert_rebalance.every > 0) parts_->set_expert_rebalance(config_.expert_rebalance);
  CANN_ASSIGN_OR_RETURN(opt_, parts_->make_optimizer(config_));
  schedule_ =
      optim::LrSchedule{config_.lr, config_.resolved_warmup(), config_.steps, config_.min_lr_ratio};
  parts_->model().init_params(config_.seed);
  if (!config_.init_from.empty()) {
    CANN_RETURN_IF_ERROR(parts_->load_hf(spec_, config_.init_from));
    if (leader() && !config_.quiet) log_info("weights loaded from " + config_.init_from);
  }
  if (Status adopted = opt_->adopt_params(); !adopted.ok()) return comm_failure(adopted);
  CANN_ASSIGN_OR_RETURN(keeper_, StateKeeper::create(config_, env, leader()));
  bind_state();
  CANN_ASSIGN_OR_RETURN(start_step_, keeper_->restore_at_start());
  const double tokens = static_cast<double>(layout_.global_batch()) * layout_.seq_len;
  CANN_ASSIGN_OR_RETURN(
      reporter_, StepReporter::open(config_, {rank, world, env ? env->job_id : "", store_}, tokens,
                                    model::train_flops_per_token(spec_, layout_.seq_len)));
  CANN_RETURN_IF_ERROR(reporter_->recover_step_line(start_step_, keeper_->restored_step_log()));
  if (!config_.profile.empty()) {
    CANN_ASSIGN_OR_RETURN(const ProfileSchedule ps, parse_profile_schedule(config_.profile));
    profiler_ = std::make_unique<StepProfiler>(ps, config_.profile_dir, rank, world, host_name());
  }
  if (config_.grad_norms || config_.halt_on_nan) watch_grads();
  return OkStatus();
}

void Trainer::watch_grads() {
  const std::string dump_dir = std::filesystem::path(config_.log_json).parent_path().string();
  grad_watch_ = std::make_unique<GradWatch>(parts_->model().table(), config_.halt_on_nan,
                                            dump_dir.empty() ? "." : dump_dir, layout_.rank);
}

void Trainer::bind_state() {
  // A rank's snapshot holds only its own part of the state under model parallelism and ZeRO
  // on one node, where a lost rank's place is refilled in the same layout: its shards as it
  // holds them, with no gather every step. Across elastic nodes a changed world is re-planned:
  // under model parallelism each rank's part says where it lands in the whole model and goes to
  // the next node too, and a restore assembles the whole state from the parts the nodes left
  // hold; under data parallelism every snapshot holds the whole state.
  const bool nodes = env_ != nullptr && !env_->node_snapshots.empty();
  const bool mp = parts_->model_parallel() != nullptr;
  const bool own = nodes ? mp : mp || layout_.strategy.zero > 0;
  keeper_->bind({&spec_, parts_.get(), opt_.get(), batches_.get(), world_.get(),
                 [this](const Status& s) { return comm_failure(s); },
                 own ? plan::strategy_string(layout_.strategy) : "", nodes && mp});
}

Status Trainer::run(RunSummary* summary) {
  // A process of a generation after the first replaces one the agent lost: it starts restored.
  if (callbacks_.on_fault && keeper_->generation() > 0)
    callbacks_.on_fault({layout_.rank, keeper_->generation(),
                         "this rank's process was lost and started again by the agent",
                         start_step_, start_step_ > 0 ? "an in-memory snapshot" : "the start"});
  const bool show = reporter_->show();
  if (show)
    for (const std::string& line :
         describe_run(spec_, layout_, *parts_, *opt_, batches_->data(), start_step_, config_.steps))
      reporter_->line(line);
  // Every group exists by now, so their communication threads keep their priority.
  if (world_ && config_.compute_nice > 0 && set_compute_nice(config_.compute_nice) != 0)
    log_warning("--compute-nice " + std::to_string(config_.compute_nice) +
                ": could not lower the priority of every compute thread");
  // Across elastic nodes the agent asks with SIGUSR1 for a stop at the agreed step boundary
  // after which this process rejoins the next (graceful) generation instead of exiting.
  const bool regroups = env_ && !env_->node_snapshots.empty() && env_->node_id >= 0;
  std::vector<int> stop_signals = {SIGINT, SIGTERM};
  if (regroups) stop_signals.push_back(SIGUSR1);
  StopSignals caught(stop_signals);

  summary->first_step = start_step_;
  summary->last_step = start_step_;
  // Under --elastic, a survivor of a lost peer rejoins the next generation and trains on.
  Status trained = train_steps(summary);
  while (true) {
    if (!trained.ok() && (rejoinable() || node_rejoinable())) {
      CANN_RETURN_IF_ERROR(rejoinable() ? rejoin(trained)
                                        : rejoin_nodes(trained.message(), trained.code()));
    } else if (trained.ok() && regroups && summary->interrupted &&
               StopSignals::caught() == SIGUSR1) {
      StopSignals::clear();
      summary->interrupted = false;
      CANN_RETURN_IF_ERROR(rejoin_nodes("stopped after step " + std::to_string(summary->last_step) +
                                            " for the next generation (graceful)",
                                        StatusCode::kIoError));
    } else {
      break;
    }
    trained = train_steps(summary);
  }
  CANN_RETURN_IF_ERROR(trained);
  return finish_run(summary, show);
}

// The steps from start_step_ to the end, or to a stop.
Status Trainer::train_steps(RunSummary* summary) {
  reporter_->start_timing();
  // On the thread that trains: its OpenMP workers are the ones whose time counts.
  compute_clock_ = std::make_unique<ComputeClock>();
  for (int step = start_step_; step < config_.steps; ++step) {
    if (beacon_) beacon_->set_step(step);
    if (profiler_) profiler_->begin_step(step - start_step_, step + 1);
    const double t0 = now_seconds();
    const double cpu0 = compute_clock_->cpu_seconds();
    opt_->zero_grads();
    CANN_ASSIGN_OR_RETURN(StepCompute c,
                          parts_->forward_backward(*batches_, *opt_, step, profiler_.get()));
    StepRecord r;
    r.forward_s = c.forward_s;
    r.backward_s = c.backward_s;
    r.comm = c.comm;
    r.compute_s = now_seconds() - t0 - c.comm.comm_exposed_s;
    if (!c.expert_load.empty()) reporter_->count_expert_tokens(c.expert_load);
    if (!c.rank_rows.empty()) reporter_->count_expert_rows(c.rank_rows);
    bool grads_bad = grad_watch_ && grad_watch_->inspect(parts_->model().grads(), step + 1);
    bool stop_requested = StopSignals::caught() != 0 || reporter_->stop_requested();
    CANN_RETURN_IF_ERROR(agree_on_step(&c, &stop_requested, &grads_bad));
    r.lr = schedule_.at(step);
    const double t_opt = now_seconds();
    CANN_RETURN_IF_ERROR(parts_->sync_tied_embedding(*opt_));
    if (!config_.dump_grads.empty() && step + 1 == config_.dump_grads_step) {
      CANN_ASSIGN_OR_RETURN(const std::string note,
                            dump_gradients(config_, layout_, *parts_, *opt_, step + 1,
                                           [this](const Status& s) { return comm_failure(s); }));
      if (!note.empty() && !config_.quiet) reporter_->line(note);
    }
    CANN_RETURN_IF_ERROR(keeper_->before_update(step + 1));
    auto norm = opt_->step(r.lr);
    if (!norm.ok()) return comm_failure(norm.status());
    CANN_RETURN_IF_ERROR(parts_->update_expert_bias(c, *opt_));
    CANN_ASSIGN_OR_RETURN(const ExpertMove move, parts_->rebalance_experts(c, *opt_, step + 1));
    if (!move.to.empty()) keeper_->experts_moved();
    if (!move.layers.empty()) report_expert_move(move, step + 1);
    CANN_RETURN_IF_ERROR(parts_->status());
    r.step_time_s = now_seconds() - t0;
    if (profiler_) {
      profiler_->compute("optimizer", t_opt, t0 + r.step_time_s);
      profiler_->compute("step", t0, t0 + r.step_time_s);
    }
    const int done = step + 1;
    r.step = done;
    r.loss = c.stats.loss;
    r.lm_loss = c.stats.lm_loss;
    r.aux_loss = c.stats.aux_loss;
    r.grad_norm = *norm;
    r.expert_load = std::move(c.expert_load);
    r.expert_rank_load = std::move(c.rank_rows);
    r.dropped = c.dropped;
    r.samples = batches_->samples_consumed();
    r.memory_bytes = static_cast<int64_t>(memory_bytes(*parts_, *opt_));
    r.resident_bytes = process_resident_bytes();
    r.compute_utilization =
        std::clamp((compute_clock_->cpu_seconds() - cpu0) /
                       (compute_clock_->threads() * std::max(r.step_time_s, 1e-9)),
                   0.0, 1.0);
    r.last = done == config_.steps;
    if (step == start_step_) summary->first_loss = r.loss;
    summary->last_loss = r.loss;
    summary->last_step = done;
    summary->step_times_s.push_back(r.step_time_s);
    const bool stop_now = stop_requested || (config_.exit_interval > 0 &&
                                             done % config_.exit_interval == 0 && !r.last);
    if ((config_.eval_every > 0 && done % config_.eval_every == 0) || r.last) {
      const double t_eval = now_seconds();
      CANN_ASSIGN_OR_RETURN(const double val, evaluate());
      if (profiler_) profiler_->compute("evaluate", t_eval, now_seconds());
      summary->last_val_loss = val;
      r.val_loss = val;
    }
    if (config_.grad_norms) r.grad_norms_json = grad_watch_->norms_json();
    CANN_RETURN_IF_ERROR(reporter_->report(r));
    if (grads_bad) CANN_RETURN_IF_ERROR(report_nonfinite(done));
    if (world_ && config_.link_probe_every > 0 && done % config_.link_probe_every == 0) {
      auto links = probe_links(*world_);
      if (!links.ok()) return comm_failure(links.status());
      reporter_->set_link_gbps(std::move(*links));
    }
    CANN_RETURN_IF_ERROR(reporter_->publish(r));
    CANN_RETURN_IF_ERROR(keeper_->keep(done, reporter_->last_log_line()));
    if (callbacks_.on_step)
      callbacks_.on_step({done, r.loss, r.step_time_s, layout_.rank, keeper_->generation()});
    if (step == start_step_ && keeper_->generation() > 0 && leader())
      keeper_->event("training_resumed", "step " + std::to_string(done) + " completed");
    const bool periodic = config_.checkpoint_every > 0 && done % config_.checkpoint_every == 0;
    if (!config_.checkpoint_dir.empty() && (periodic || r.last || stop_now)) {
      CANN_ASSIGN_OR_RETURN(const std::string note,
                            keeper_->save(done, r.last || stop_now, profiler_.get()));
      if (!note.empty()) reporter_->line(note);
    }
    if (profiler_ && world_) profiler_->collect_comm(*world_);
    if (profiler_ && profiler_->end_step()) CANN_RETURN_IF_ERROR(finish_profile());
    if (stop_now) {
      summary->interrupted = stop_requested;
      if (leader())
        reporter_->line(
            !summary->interrupted ? "exit interval reached after step " + std::to_string(done)
            : StopSignals::caught() == SIGUSR1
                ? "stopped after step " + std::to_string(done) + " for the next generation"
                : "stop requested (signal or /api/stop) after step " + std::to_string(done));
      break;
    }
  }
  return OkStatus();
}

// The event log and the dashboard hear of a move once, every stage's layers in it.
void Trainer::report_expert_move(const ExpertMove& move, int done) {
  if (!leader()) return;
  const std::string text = "step " + std::to_string(done) + ": " + describe_moves(move.layers);
  keeper_->event("expert_migrated", text);
  reporter_->dashboard_event("expert_migrated", layout_.rank, text);
  if (!config_.quiet) reporter_->line("expert_migrated " + text);
}

// The losses for the log and the stop request are agreed by all ranks (any rank's signal stops
// all at the same step, so no rank waits in a collective the others never issue). The expert
// counts ride on the same all-reduce. Each data-parallel rank routes its own tokens (under ep
// too: the router's counts for every expert, before the all-to-all), while the ranks of a
// tensor-parallel group route the same tokens, so only tp rank 0 contributes; each pipeline
// stage counts its own MoE layers, so the sum covers them all. Under ep each rank adds the rows
// its experts computed at its place in the expert group, so the sum is each place's load. The world
// mean times the world size is the global sum. Counts stay far below 2^24, so floats carry them
// exactly.
Status Trainer::agree_on_step(StepCompute* c, bool* stop, bool* grads_bad) {
  if (!world_) return OkStatus();
  enum Slot { kLoss, kLmLoss, kAuxLoss, kStop, kGradsBad, kExperts };
  std::vector<float> scalars = {
      static_cast<float>(c->stats.loss), static_cast<float>(c->stats.lm_loss),
      static_cast<float>(c->stats.aux_loss), *stop ? 1.0f : 0.0f, *grads_bad ? 1.0f : 0.0f};
  const bool counts_here = layout_.rank % layout_.strategy.tp == 0;
  const bool moe = !c->expert_load.empty();
  for (double n : c->expert_load) scalars.push_back(counts_here ? static_cast<float>(n) : 0.0f);
  if (moe) scalars.push_back(counts_here ? static_cast<float>(c->dropped) : 0.0f);
  const size_t ranks_at = scalars.size();
  for (double n : c->rank_rows) scalars.push_back(counts_here ? static_cast<float>(n) : 0.0f);
  CANN_RETURN_IF_ERROR(average_over_ranks(scalars.data(), scalars.size(), "step_scalars"));
  const double world = static_cast<double>(layout_.world);
  for (size_t e = 0; e < c->expert_load.size(); ++e)
    c->expert_load[e] = std::round(static_cast<double>(scalars[kExperts + e]) * world);
  if (moe) c->dropped = std::round(static_cast<double>(scalars[ranks_at - 1]) * world);
  for (size_t r = 0; r < c->rank_rows.size(); ++r)
    c->rank_rows[r] = std::round(static_cast<double>(scalars[ranks_at + r]) * world);
  // Under pp the stages' shares of the loss add up to it: the world mean is 1/pp of it.
  const double stages = parts_->pipelined() ? layout_.strategy.pp : 1;
  c->stats.loss = scalars[kLoss] * stages;
  c->stats.lm_loss = scalars[kLmLoss] * stages;
  c->stats.aux_loss = scalars[kAuxLoss] * stages;
  *stop = scalars[kStop] > 0.0f;
  *grads_bad = scalars[kGradsBad] > 0.0f;
  return OkStatus();
}

// Mean loss over the first eval_batches * batch_size windows of the validation stream; ranks
// split the windows the way the sampler splits training samples and average at the end.
StatusOr<double> Trainer::evaluate() {
  CANN_ASSIGN_OR_RETURN(float sum,
                        parts_->evaluation_loss_sum(*batches_, *opt_, config_.eval_batches));
  sum /= static_cast<float>(config_.eval_batches * layout_.accum_steps);
  CANN_RETURN_IF_ERROR(average_over_ranks(&sum, 1, "val_loss"));
  if (parts_->pipelined())
    sum *= static_cast<float>(layout_.strategy.pp);  // only the last stage scored
  return static_cast<double>(sum);
}

Status Trainer::average_over_ranks(float* values, size_t count, const char* what) {
  if (!world_) return OkStatus();
  comm::Options opts;
  opts.tag = what;
  Status s = world_->allreduce(values, count, comm::DataType::kFloat32, comm::ReduceOp::kAvg, opts)
                 ->wait(std::chrono::hours(24));
  return s.ok() ? s : comm_failure(s);
}

bool Trainer::stop_signalled() {
  return StopSignals::caught() != 0;
}

Status Trainer::comm_failure(const Status& s) {
  comm_failed_ = true;
  if (beacon_) beacon_->explain();
  return Status(s.code(), "rank " + std::to_string(layout_.rank) + ": " + s.message());
}

Status Trainer::report_nonfinite(int step) {
  std::string event, message;
  Status s = grad_watch_->on_nonfinite(step, parts_->model().grads(), &event, &message);
  if (!event.empty()) CANN_RETURN_IF_ERROR(reporter_->write_log_line(event));
  const std::string& text = s.ok() ? message : s.message();
  if (!text.empty()) reporter_->dashboard_event("nonfinite_grad", layout_.rank, text);
  if (s.ok() && !message.empty())
    log_warning("rank " + std::to_string(layout_.rank) + ": " + message);
  return s;
}

Status Trainer::finish_profile() {
  auto line = profiler_->finish(world_.get());
  if (!line.ok()) return line.status();
  if (!line->empty() && !config_.quiet) reporter_->line(*line);
  return OkStatus();
}

Status Trainer::finish_run(RunSummary* summary, bool show) {
  if (profiler_) CANN_RETURN_IF_ERROR(finish_profile());  // the run ended inside the window
  summary->efficiency = reporter_->efficiency_summary();
  reporter_->finish();
  // Under model parallelism the export's gather and the sample's forward are collectives, so
  // every rank takes part (the leader writes and prints); under ZeRO stage 3 every rank first
  // gathers the whole model.
  const bool complete = summary->last_step == config_.steps;
  const bool exporting = complete && !config_.export_hf.empty();
  const bool sample =
      complete && spec_.architecture == model::Architecture::kGpt && config_.sample_tokens > 0;
  if ((exporting || sample) && world_) {
    const Status gathered = opt_->materialize_params();
    if (!gathered.ok()) return comm_failure(gathered);
  }
  if (exporting) {
    CANN_RETURN_IF_ERROR(parts_->export_hf(spec_, config_.export_hf, leader()));
    if (show) reporter_->line("weights written to " + config_.export_hf + " (Hugging Face layout)");
  }
  if (sample && (show || parts_->model_parallel() != nullptr)) {
    StatusOr<std::string> text =
        parts_->generate_sample(batches_->data(), config_.seed, config_.sample_tokens);
    if (!text.ok()) return comm_failure(text.status());
    if (show) reporter_->line("sample:\n" + *text);
  }
  return OkStatus();
}

}  // namespace cann::train
