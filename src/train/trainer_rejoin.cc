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
//
// Across elastic nodes the next generation may have another world size, and with it another
// rank for this process and another layout (train/elastic_layouts.h). The survivor says in the
// store that it waits (its node's agent then keeps its process rather than replacing it),
// reads its place in the membership record, and builds the whole run again from the launch's
// flags as a fresh worker of that generation does; the committed step comes from the ranks'
// agreement over the new world (peer_restore.cc).
#include "core/fs.h"
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
  // Across nodes a generation may change the world size: rejoin_nodes.
  return comm_failed_ && keeper_ && keeper_->elastic() && env_ && world_ &&
         env_->node_snapshots.empty();
}

bool Trainer::node_rejoinable() const {
  return comm_failed_ && keeper_ && keeper_->elastic() && env_ && world_ &&
         !env_->node_snapshots.empty() && env_->node_id >= 0;
}

void Trainer::drop_world(bool keep_model) {
  // The beacon thread reads the group's flight recorder: stop it before the group goes.
  if (beacon_) beacon_->stop();
  if (keeper_) keeper_->unbind();  // the optimizer, and maybe the model, go next
  opt_.reset();
  if (!keep_model) parts_.reset();
  world_.reset();
}

void Trainer::teardown() {
  drop_world(false);
  grad_watch_.reset();
  profiler_.reset();
  reporter_.reset();
  keeper_.reset();  // its heartbeat stops: the agent waits for the new generation's first beat
  batches_.reset();
  beacon_.reset();
  store_.reset();
}

Status Trainer::rejoin_nodes(const std::string& why, StatusCode code) {
  const double t0 = now_seconds();
  const int was = layout_.rank;
  log_warning(why + "; rank " + std::to_string(was) + " waits for the next generation");
  // Said first, and then every group of the old world dropped, so that a peer of this node
  // still waiting on this rank in one of them (a shared-memory step of a hierarchical
  // collective whose cross-node step failed here) fails at once and waits too: the agent keeps
  // the processes only when all of them do. The heartbeat goes on meanwhile.
  CANN_RETURN_IF_ERROR(keeper_->leave_generation());
  drop_world(false);
  StatusOr<StateKeeper::NodeGeneration> next = keeper_->join_next_node_generation(
      kRejoinTimeoutSeconds, &Trainer::stop_signalled, env_->node_id, env_->local_rank);
  if (!next.ok()) return Status(code, why + " (" + next.status().message() + ")");
  DistEnv env = *env_;
  env.generation = next->generation;
  env.rank = next->rank;
  env.world_size = next->world_size;
  env.node_rank = next->node_index;
  env.strategy = next->strategy;
  env.snapshot_dir = join_path(env.node_snapshots, "gen" + std::to_string(next->generation));
  teardown();
  config_ = launch_config_;
  comm_failed_ = false;
  CANN_RETURN_IF_ERROR(setup(&env, comm_));
  log_info("rank " + std::to_string(layout_.rank) + " (rank " + std::to_string(was) +
           " before) rejoined generation " + std::to_string(next->generation) + " of " +
           std::to_string(next->world_size) + " processes at step " + std::to_string(start_step_) +
           " in " + std::to_string(now_seconds() - t0) + " s, its process kept");
  return OkStatus();
}

Status Trainer::rejoin(const Status& cause) {
  const double t0 = now_seconds();
  log_warning(cause.message() + "; rank " + std::to_string(layout_.rank) +
              " waits for the next generation");
  StatusOr<int> gen =
      keeper_->join_next_generation(kRejoinTimeoutSeconds, &Trainer::stop_signalled);
  if (!gen.ok()) return Status(cause.code(), cause.message() + " (" + gen.status().message() + ")");
  // Under model parallelism the model goes too: its groups hang off the old world.
  const bool mesh = parts_->model_parallel() != nullptr;
  drop_world(!mesh);
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
