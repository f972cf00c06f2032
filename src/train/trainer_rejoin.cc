// The survivor's side of an elastic recovery. When a collective fails under --elastic (a peer
// died, or the agent killed a stopped one), this rank does not exit: it waits for the agent's
// next generation in the membership record, drops its broken group, builds the world group
// and the data-parallel engine again under the generation's key prefix, loads the committed
// step (its own in-memory snapshot, or the copy the record names), and the training loop goes
// on from there. The replacement of the lost rank loads the same step at its start.
//
// Under model parallelism the generation keeps the layout (the lost rank is refilled on this
// machine), but every communicator of the old mesh (tensor, pipeline, context, expert and
// data groups, the pipeline runner) belongs to the broken generation: the model parts are
// dropped with them and built again over the new world group, in the order a fresh worker
// builds them (mesh, model, optimizer), so the replacement's collectives meet the survivors'.
// The parameters it allocates are overwritten by the committed step. The rebuild's time, in
// the rejoin line, includes the wait for the replacement to build the same groups.
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

bool Trainer::rejoinable() const {
  // Across nodes a generation may change the world size: the agent starts fresh workers.
  return comm_failed_ && keeper_ && keeper_->elastic() && env_ && world_ &&
         env_->node_snapshots.empty();
}

Status Trainer::rejoin(const Status& cause) {
  const double t0 = now_seconds();
  log_warning(cause.message() + "; rank " + std::to_string(layout_.rank) +
              " waits for the next generation");
  StatusOr<int> gen =
      keeper_->join_next_generation(kRejoinTimeoutSeconds, &Trainer::stop_signalled);
  if (!gen.ok()) return Status(cause.code(), cause.message() + " (" + gen.status().message() + ")");
  // The beacon thread reads the group's flight recorder: stop it before the group goes.
  if (beacon_) beacon_->stop();
  keeper_->unbind();  // the optimizer, and under model parallelism the model, go next
  opt_.reset();
  const bool mesh = parts_->model_parallel() != nullptr;
  if (mesh) parts_.reset();  // its groups hang off the old world
  world_.reset();
  env_->generation = *gen;
  CANN_ASSIGN_OR_RETURN(world_, make_world_group(*env_, comm_));
  if (beacon_) beacon_->start(*world_);
  const double t_mesh = now_seconds();
  if (mesh) {
    CANN_ASSIGN_OR_RETURN(parts_,
                          ModelParts::build(spec_, layout_, world_.get(),
                                            [this](const Status& s) { return comm_failure(s); }));
    if (config_.expert_rebalance.every > 0) parts_->set_expert_rebalance(config_.expert_rebalance);
    if (grad_watch_) watch_grads();
  } else {
    parts_->rebind_world(world_.get());
  }
  CANN_ASSIGN_OR_RETURN(opt_, parts_->make_optimizer(config_));
  const double rebuilt_s = now_seconds() - t_mesh;
  bind_state();
  comm_failed_ = false;
  CANN_ASSIGN_OR_RETURN(start_step_, keeper_->restore_after_rejoin());
  CANN_RETURN_IF_ERROR(reporter_->recover_step_line(start_step_, keeper_->restored_step_log()));
  if (callbacks_.on_fault)
    callbacks_.on_fault({layout_.rank, *gen, cause.message(), start_step_,
                         "the in-memory snapshots of generation " + std::to_string(*gen - 1)});
  log_info("rank " + std::to_string(layout_.rank) + " rejoined as generation " +
           std::to_string(*gen) + " at step " + std::to_string(start_step_) + " in " +
           std::to_string(now_seconds() - t0) + " s" +
           (mesh ? " (mesh and model rebuilt in " + std::to_string(rebuilt_s) + " s)" : ""));
  return OkStatus();
}

}  // namespace cann::train
