// The state keeper's glue between the live run and its checkpoints and snapshots (see
// state_keeper.h): what a checkpoint holds is the model's parameters (under model parallelism
// the whole model, gathered, so it loads under any strategy), the optimizer's full state, the
// sampler's position and the run's RNG. An in-memory snapshot under model parallelism holds
// the rank's own part instead, marked with its layout and rank.
#include <cstdio>

#include "ckpt/async_writer.h"
#include "ckpt/replicas.h"
#include "ckpt/snapshot_writer.h"
#include "core/log.h"
#include "core/timer.h"
#include "core/word_sum.h"
#include "train/state_keeper.h"

namespace cann::train {

ResumeState StateKeeper::resume_state(int step) const {
  ResumeState st;
  st.step = step;
  st.sampler = run_.batches->sampler_state();
  st.rng = run_.batches->rng_state();
  return st;
}

StatusOr<OptimizerSnapshot> StateKeeper::optimizer_snapshot() {
  StatusOr<OptimizerSnapshot> snap = run_.optimizer->snapshot();
  if (!snap.ok() && run_.world != nullptr) return run_.on_comm_failure(snap.status());
  return snap;
}

StatusOr<int> StateKeeper::restore(const ckpt::LoadedCheckpoint& ck) {
  // A restore follows a failure, after which this rank's snapshot directory may hold what
  // another process wrote (a replaced rank's, a received copy): look at it again, with the
  // state out of its slots first.
  unplace();
  if (snapshots_) snapshots_->rescan();
  // A rank's own snapshot loads only into the same rank of the same layout (a whole-model
  // checkpoint, unmarked, loads anywhere by slicing).
  if (const auto mark = ckpt::rank_snapshot_mark(ck.meta_json);
      mark && !(*mark == ckpt::RankSnapshotMark{run_.rank_layout, rank_}))
    return FailedPrecondition(
        ck.path + ": snapshot of rank " + std::to_string(mark->rank) + " under --strategy " +
        mark->layout + ", loaded by rank " + std::to_string(rank_) +
        (run_.rank_layout.empty() ? " of a data-parallel layout"
                                  : " under --strategy " + run_.rank_layout) +
        "; hint: a model-parallel snapshot serves only its own rank and layout: rerun with "
        "--resume to continue from the newest disk checkpoint");
  ResumeState st;
  CANN_RETURN_IF_ERROR(run_.optimizer->restore(ck, &st));
  // A rank's own snapshot holds its experts as they were placed when it was taken.
  if (ckpt::rank_snapshot_mark(ck.meta_json))
    CANN_RETURN_IF_ERROR(restore_expert_slots(ck.meta_json, ck.path, &run_.model->model()));
  run_.batches->restore(st.sampler, st.rng);
  restored_step_log_ = std::move(st.step_log);
  return st.step;
}

StatusOr<int> StateKeeper::restore_at_start() {
  int step = 0;
  if (generation() > 0 && !node_snapshots_.empty()) {
    CANN_ASSIGN_OR_RETURN(step, restore_from_peers());
  } else if (generation() > 0) {
    // A restarted elastic generation: the committed step from memory, else from disk.
    CANN_ASSIGN_OR_RETURN(step, restore_recovery_state(""));
  } else if (config_.resume) {
    if (config_.checkpoint_dir.empty())
      return InvalidArgument("--resume needs --checkpoint-dir DIR to resume from");
    auto ck = ckpt::read_latest_checkpoint(config_.checkpoint_dir);
    if (ck.ok()) {
      CANN_ASSIGN_OR_RETURN(step, restore(*ck));
      log_info("resumed from " + ck->path + " at step " + std::to_string(step));
    } else if (ck.status().code() == StatusCode::kNotFound) {
      log_info("no checkpoint in " + config_.checkpoint_dir + " yet; starting from step 0");
    } else {
      return ck.status();
    }
  }
  if (step > config_.steps)
    return InvalidArgument("checkpoint is at step " + std::to_string(step) + ", beyond --steps " +
                           std::to_string(config_.steps) +
                           "; hint: raise --steps to continue training");
  // A restarted generation may have loaded own snapshots (every rank alike: the generation is
  // the world's); a first start and --resume load whole states.
  if (generation() > 0) CANN_RETURN_IF_ERROR(after_restore());
  return step;
}

StatusOr<int> StateKeeper::restore_recovery_state(const std::string& note) {
  CANN_ASSIGN_OR_RETURN(auto ck, recovery_state(config_.checkpoint_dir));
  int step = 0;
  if (ck) {
    CANN_ASSIGN_OR_RETURN(step, restore(*ck));
    event("state_restored", "step " + std::to_string(step) + " from " + ck->path + note);
  }
  CANN_RETURN_IF_ERROR(agree_on_restored_step(step));
  return step;
}

// Every rank, whatever it restored from: the collective that completes what own snapshots left
// to the peers (StepOptimizer::after_restore).
Status StateKeeper::after_restore() {
  if (run_.optimizer == nullptr) return OkStatus();
  Status s = run_.optimizer->after_restore();
  if (!s.ok() && run_.world != nullptr) return run_.on_comm_failure(s);
  return s;
}

// Every rank of a restarted generation must go on from the same step: the copies each tries
// are ordered so that they do (ckpt/replicas.h); this checks it.
Status StateKeeper::agree_on_restored_step(int step) {
  if (run_.world == nullptr) return OkStatus();
  int64_t range[2] = {-static_cast<int64_t>(step), step};  // -min, max
  Status s = run_.world->allreduce(range, 2, comm::DataType::kInt64, comm::ReduceOp::kMax)->wait();
  if (!s.ok()) return run_.on_comm_failure(s);
  if (-range[0] == range[1]) return OkStatus();
  return DataLoss("rank " + std::to_string(rank_) + " restored step " + std::to_string(step) +
                  ", other ranks steps " + std::to_string(-range[0]) + " to " +
                  std::to_string(range[1]) +
                  ": their snapshot copies disagree; hint: rerun with --resume to continue from "
                  "the newest disk checkpoint");
}

StatusOr<int> StateKeeper::restore_after_rejoin() {
  CANN_ASSIGN_OR_RETURN(auto ck, recovery_state(config_.checkpoint_dir));
  if (ck) {
    CANN_ASSIGN_OR_RETURN(const int step, restore(*ck));
    CANN_RETURN_IF_ERROR(agree_on_restored_step(step));
    CANN_RETURN_IF_ERROR(after_restore());
    event("state_restored", "step " + std::to_string(step) + " from " + ck->path + " (rank " +
                                std::to_string(rank_) + " kept its process)");
    return step;
  }
  // Nothing committed anywhere: the run starts over, exactly as a fresh one would.
  run_.model->model().init_params(config_.seed);
  CANN_RETURN_IF_ERROR(run_.optimizer->adopt_params());  // ZeRO-3 takes its shard again
  run_.batches->restart();
  CANN_RETURN_IF_ERROR(agree_on_restored_step(0));
  CANN_RETURN_IF_ERROR(after_restore());
  return 0;
}

Status StateKeeper::keep(int done, const std::string& step_log) {
  set_step(done);
  if (writer_ && !writer_prepared_) {
    // The checkpoint writer's buffers for parameters and both moments (the whole model's,
    // as a checkpoint holds it), made on its own thread while training goes on.
    writer_prepared_ = true;
    ModelParts& parts = *run_.model;
    const size_t n = parts.model_parallel() != nullptr ? parts.full_table().total_floats()
                                                       : parts.model().table().total_floats();
    writer_->prepare(std::vector<size_t>(3, n * sizeof(float)));
  }
  if (!snapshot_due(done)) return OkStatus();
  // Under model parallelism this rank's own part in its own layout, marked as its own: no
  // collective across the mesh, nor, on one node, over the data-parallel group (ZeRO's shards
  // as they are). Across nodes the part is whole within the rank's layout (ZeRO's moments
  // gathered over the data-parallel group), so that it places into the whole model.
  StatusOr<OptimizerSnapshot> own = run_.rank_layout.empty() || run_.node_parts
                                        ? run_.optimizer->snapshot()
                                        : run_.optimizer->snapshot_own();
  if (!own.ok() && run_.world != nullptr) return run_.on_comm_failure(own.status());
  CANN_RETURN_IF_ERROR(own.status());
  OptimizerSnapshot snap = std::move(*own);
  // The model's part of the metadata, with the mark, is serialized once per layout: a
  // snapshot every step pays only for what changes.
  const model::Model& model = run_.model->model();
  if (snapshot_meta_.empty()) {
    std::string object = "{";
    object.append(model_meta_members(model.spec(), model.table()));
    // Under ep the buffers hold the experts where they now live (--expert-rebalance).
    if (!run_.rank_layout.empty()) object.append(expert_slots_member(model));
    if (run_.node_parts) {
      // Where the part lands in the whole model and who else holds it (node_parts.cc).
      StatusOr<std::string> parts = plan_node_parts();
      if (!parts.ok()) return parts.status();
      object.append("," + *parts);
    }
    object.push_back('}');
    if (!run_.rank_layout.empty())
      object = ckpt::with_rank_snapshot_mark(object, {run_.rank_layout, rank_});
    snapshot_meta_ = object.substr(1, object.size() - 2);
  }
  if (snap.params == nullptr && !snap.own_part) snap.params = model.params();
  ResumeState st = resume_state(done);
  st.step_log = step_log;
  ckpt::CheckpointWrite w = training_checkpoint(snapshot_meta_, model.table(), snap, st, config_);
  // State living in the slot (before_update): published in place, with the sums the update
  // took where nothing changed it since.
  if (placed_ && sums_.valid) {
    const float* live[3] = {run_.model->model().params(), live_.m, live_.v};
    for (size_t i = 0; i < 3 && i < w.sections.size(); ++i) {
      if (w.sections[i].data != live[i]) continue;
      w.sections[i].has_word_sum = true;
      w.sections[i].word_sum = word_sum_finish(sums_.parts[i]);
    }
  }
  // The same bytes to the next node, whether or not this rank's own copy can be written: the
  // transfer starts first and runs while the own copy is written.
  Status copy = run_.node_parts ? start_copy_to_next_node(w) : OkStatus();
  // A snapshot that cannot be written leaves the previous ones: the committed step lags, no
  // more; training goes on.
  Status s = snapshot(w);
  if (!s.ok()) log_warning(s.message());
  if (s.ok() && placed_) live_.published = true;
  if (copy.ok()) copy = finish_copy_to_next_node();
  return copy;
}

StatusOr<OptimizerSnapshot> StateKeeper::gathered_state() {
  CANN_ASSIGN_OR_RETURN(OptimizerSnapshot snap, optimizer_snapshot());
  ModelParts& parts = *run_.model;
  if (parts.model_parallel() == nullptr) return snap;
  // Every rank sends its part; every rank then holds the whole model, loadable at any strategy.
  const size_t n = parts.full_table().total_floats();
  full_state_.resize(3 * n);
  const float* params = snap.params != nullptr ? snap.params : parts.model().params();  // ZeRO-3
  CANN_RETURN_IF_ERROR(parts.gather_full({params, snap.m, snap.v}, full_state_.data()));
  snap.params = full_state_.data();
  snap.m = full_state_.data() + n;
  snap.v = full_state_.data() + 2 * n;
  return snap;
}

// A collective under data parallelism (sharded or per-rank optimizer state is gathered first);
// rank 0 copies the state and a background thread writes it.
StatusOr<std::string> StateKeeper::save(int step, bool wait, StepProfiler* profiler) {
  const ResumeState st = resume_state(step);
  CANN_ASSIGN_OR_RETURN(OptimizerSnapshot snap, gathered_state());
  ModelParts& parts = *run_.model;
  const bool whole = parts.model_parallel() != nullptr;
  if (!leader_) return std::string();
  Stopwatch sw;
  const double t0 = now_seconds();
  CANN_RETURN_IF_ERROR(
      checkpoint(whole ? training_checkpoint(*run_.spec, parts.full_table(), snap, st, config_)
                       : training_checkpoint(parts.model(), snap, st, config_),
                 wait));
  if (profiler) {
    char name[32];
    std::snprintf(name, sizeof(name), "/step-%08d", step);
    profiler->checkpoint(t0, now_seconds(), config_.checkpoint_dir + name);
  }
  char buf[96];
  std::snprintf(buf, sizeof(buf), "checkpoint of step %d %s (%.2f s)", step,
                wait ? "saved" : "queued", sw.elapsed());
  return std::string(buf);
}

}  // namespace cann::train
