// The survivor's side of an elastic recovery. When a collective fails under --elastic (a peer
// died, or the agent killed a stopped one), this rank does not exit: it waits for the agent's
// next generation in the membership record, drops its broken group, builds the world group
// and the data-parallel engine again under the generation's key prefix, loads the committed
// step (its own in-memory snapshot, or the copy the record names), and the training loop goes
// on from there. The replacement of the lost rank loads the same step at its start.
#include "core/log.h"
#include "core/timer.h"
#include "train/trainer.h"

namespace cann::train {
namespace {

// How long a survivor waits for the agent to start the next generation. The agent notices a
// dead worker within milliseconds and a hung one within --heartbeat-timeout; past this the
// survivor gives up and exits with the collective's error (and is replaced in turn).
constexpr double kRejoinTimeoutSeconds = 30.0;

}  // namespace

Status Trainer::make_data_parallel_engine() {
  optim::AdamWConfig oc;
  oc.weight_decay = config_.weight_decay;
  oc.grad_clip = config_.grad_clip;
  DataParallelConfig dc;
  dc.zero = zero_stage_;
  dc.compress = config_.compress;
  dc.onebit_warmup = config_.onebit_warmup;
  dc.bucket_mb = config_.bucket_mb;
  if (mp_) {
    dc.grad_sum_of_squares = mp_->grad_sum_of_squares(model_->table());
    dc.shards = {full_table_.get(), mp_->shard_place()};
    if (layout_.ep == 1) {  // ZeRO's norm over tp x pp shards (ep runs without ZeRO)
      dc.norm_counted = mp_->norm_counted();
      ModelParallel* mp = mp_.get();
      dc.norm_across = [mp](double* v) { return mp->sum_over_model_parallel(v); };
    }
    if (layout_.ep > 1) {
      dc.ep = layout_.ep;
      dc.expert_dp_group = &mp_->expert_dp_group();
    }
  }
  CANN_ASSIGN_OR_RETURN(
      dp_, DataParallelEngine::create(*model_, mp_ ? mp_->gradient_group() : *world_, oc, dc,
                                      config_.steps));
  return OkStatus();
}

bool Trainer::rejoinable() const {
  // Across nodes a generation may change the world size: the agent starts fresh workers.
  return comm_failed_ && keeper_ && keeper_->elastic() && env_ && world_ &&
         env_->node_snapshots.empty();
}

Status Trainer::rejoin(const Status& cause) {
  const double t0 = now_seconds();
  log_warning(cause.message() + "; rank " + std::to_string(rank_) +
              " waits for the next generation");
  StatusOr<int> gen =
      keeper_->join_next_generation(kRejoinTimeoutSeconds, &Trainer::stop_signalled);
  if (!gen.ok()) return Status(cause.code(), cause.message() + " (" + gen.status().message() + ")");
  // The beacon thread reads the group's flight recorder: stop it before the group goes.
  beacon_stop_ = true;
  if (beacon_.joinable()) beacon_.join();
  dp_.reset();
  world_.reset();
  env_->generation = *gen;
  CANN_ASSIGN_OR_RETURN(world_, make_world_group(*env_, comm_));
  beacon_stop_ = false;
  start_beacon(*env_);
  CANN_RETURN_IF_ERROR(make_data_parallel_engine());
  comm_failed_ = false;
  CANN_ASSIGN_OR_RETURN(auto ck, keeper_->recovery_state(config_.checkpoint_dir));
  if (ck) {
    CANN_RETURN_IF_ERROR(restore_state(*ck));
    keeper_->event("state_restored", "step " + std::to_string(start_step_) + " from " + ck->path +
                                         " (rank " + std::to_string(rank_) + " kept its process)");
  } else {
    // Nothing committed anywhere: the run starts over, exactly as a fresh one would.
    model_->init_params(config_.seed);
    sampler_->restore(data::SamplerState{config_.seed, 0});
    rng_.reseed(config_.seed ^ 0x5eedf00dULL);
    start_step_ = 0;
  }
  log_info("rank " + std::to_string(rank_) + " rejoined as generation " + std::to_string(*gen) +
           " at step " + std::to_string(start_step_) + " in " + std::to_string(now_seconds() - t0) +
           " s");
  return OkStatus();
}

}  // namespace cann::train
