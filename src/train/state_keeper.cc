// Snapshots, asynchronous checkpoints, heartbeat and events of one worker.
#include "train/state_keeper.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "ckpt/async_writer.h"
#include "ckpt/replicas.h"
#include "ckpt/snapshot_writer.h"
#include "comm/store.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/timer.h"
#include "train/config.h"
#include "train/dist_env.h"
#include "train/heartbeat.h"

#include <nlohmann/json.hpp>

namespace cann::train {
namespace {

// Two snapshots kept: a rank killed while writing step k still holds k - 1, which every
// other rank holds too (ckpt/replicas.h).
constexpr int kSnapshotsKept = 2;

std::string fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

}  // namespace

StatusOr<std::unique_ptr<StateKeeper>> StateKeeper::create(const TrainConfig& config,
                                                           const DistEnv* env, bool leader) {
  std::unique_ptr<StateKeeper> k(new StateKeeper());
  k->config_ = config;
  k->leader_ = leader;
  k->keep_checkpoints_ = config.keep_checkpoints;
  if (env != nullptr) {
    k->rank_ = env->rank;
    k->local_rank_ = env->local_rank;
    k->local_world_ = std::max(1, env->local_world_size);
    k->generation_ = env->generation;
    k->snapshot_every_ = std::max(1, env->snapshot_every);
    k->restore_from_ = env->restore_from;
    k->node_snapshots_ = env->node_snapshots;
    k->snapshot_root_ = env->snapshot_dir;
    if (env->elastic() && !env->snapshot_dir.empty()) {
      const std::string dir = join_path(env->snapshot_dir, "rank" + std::to_string(env->rank));
      CANN_RETURN_IF_ERROR(make_dirs(dir));
      k->snapshots_ = std::make_unique<ckpt::SnapshotWriter>(dir, kSnapshotsKept);
    }
  }
  if (leader && !config.log_json.empty()) {
    // The step log is shared with the agent's events: everyone appends. A fresh run empties it
    // first (a restarted generation or --resume continues it).
    if (!config.resume && k->generation_ <= 0) {
      std::FILE* f = std::fopen(config.log_json.c_str(), "w");
      if (f == nullptr)
        return IoError(config.log_json + ": cannot open the step log for writing: " + errno_text());
      std::fclose(f);
    }
    k->events_ = std::make_unique<EventLog>();
    CANN_RETURN_IF_ERROR(k->events_->open(config.log_json));
  }
  if (!config.checkpoint_dir.empty() && leader) {
    ckpt::WriteOptions options;
    options.keep_last = config.keep_checkpoints;
    options.bytes_per_second = config.checkpoint_bandwidth_mb * 1e6;
    StateKeeper* self = k.get();
    k->writer_ = std::make_unique<ckpt::AsyncCheckpointWriter>(
        config.checkpoint_dir, options, [self](const ckpt::AsyncWriteResult& r) {
          if (!r.status.ok()) {
            log_warning(r.status.message());
            return;
          }
          self->event("checkpoint_saved", r.path + ": step " + std::to_string(r.step) + ", " +
                                              fixed(static_cast<double>(r.bytes) / (1 << 20), 1) +
                                              " MiB, copy " + fixed(r.copy_s, 3) +
                                              " s, background write " + fixed(r.write_s, 3) + " s");
        });
  }
  if (env != nullptr && env->elastic() && !env->store_url.empty()) {
    CANN_ASSIGN_OR_RETURN(k->store_, comm::open_store(env->store_url));
    k->membership_key_ = "cann/" + env->job_id + "/membership";
    CANN_ASSIGN_OR_RETURN(k->heartbeat_, Heartbeat::start(*env, config.steps, false));
  }
  return k;
}

StateKeeper::~StateKeeper() {
  heartbeat_.reset();
  writer_.reset();  // waits for a write in flight
  unplace();        // before the writer's mappings go
}

bool StateKeeper::snapshot_due(int done) const {
  return snapshots_ != nullptr && done % snapshot_every_ == 0;
}

Status StateKeeper::before_update(int done) {
  if (snapshots_ == nullptr || run_.optimizer == nullptr || !run_.optimizer->placeable())
    return OkStatus();
  const bool due = snapshot_due(done);
  if (!placed_ && !due) return OkStatus();  // lives in its own buffers until the first snapshot
  const uint64_t bytes = run_.model->model().num_floats() * sizeof(float);
  const std::vector<uint64_t> sections(3, bytes);  // params, adam_m, adam_v (train_state.h)
  auto slot = [&](const void* besides) -> StatusOr<Placed> {
    StatusOr<std::vector<char*>> at = snapshots_->lend(sections, besides);
    if (!at.ok())
      return Status(at.status().code(), "rank " + std::to_string(rank_) +
                                            ": in-memory snapshot slot: " + at.status().message());
    return Placed{reinterpret_cast<float*>((*at)[0]), reinterpret_cast<float*>((*at)[1]),
                  reinterpret_cast<float*>((*at)[2]), false};
  };
  if (!placed_) {
    StatusOr<Placed> first = slot(nullptr);
    if (!first.ok()) {
      // As with a failed snapshot: the committed step lags, training goes on.
      log_warning(first.status().message());
      return OkStatus();
    }
    // The moments move into the slot; the parameters stay in the model's own buffer (see
    // state_keeper.h) and the snapshot copies them.
    float* params = run_.model->model().params();
    run_.optimizer->place_state({params, first->m, first->v, nullptr});
    live_ = *first;
    placed_ = true;
  }
  if (live_.published) {
    // The newest published snapshot stays as it is: the update goes to the other slot.
    StatusOr<Placed> next = slot(live_.params);
    if (!next.ok()) {
      log_warning(next.status().message());
      unplace();
      return OkStatus();
    }
    live_ = *next;
  }
  sums_.valid = false;
  run_.optimizer->update_into(
      {run_.model->model().params(), live_.m, live_.v, due ? &sums_ : nullptr});
  return OkStatus();
}

void StateKeeper::unbind() {
  if (placed_ && run_.model != nullptr) run_.model->model().place_params(nullptr, true);
  placed_ = false;
  live_ = {};
  run_ = {};
}

void StateKeeper::unplace() {
  if (!placed_) return;
  if (run_.optimizer != nullptr) run_.optimizer->place_state({});  // the model's too
  placed_ = false;
  live_ = {};
}

Status StateKeeper::snapshot(const ckpt::CheckpointWrite& w) {
  StatusOr<std::string> path = snapshots_->write(w);
  if (!path.ok())
    return Status(path.status().code(),
                  "rank " + std::to_string(rank_) +
                      ": in-memory snapshot failed: " + path.status().message());
  return OkStatus();
}

Status StateKeeper::checkpoint(const ckpt::CheckpointWrite& w, bool wait) {
  if (!writer_) return OkStatus();
  writer_->submit(w);
  if (!wait) return OkStatus();
  return writer_->wait();
}

void StateKeeper::event(const std::string& name, const std::string& detail) {
  if (!events_) return;
  Status s = events_->append({name, unix_seconds(), rank_, generation(), detail});
  if (!s.ok()) log_warning(s.message());
}

StatusOr<std::string> StateKeeper::next_membership_record(double timeout_s, bool (*stop)()) {
  if (!store_) return FailedPrecondition("rejoining needs the elastic agent's store");
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s));
  while (std::chrono::steady_clock::now() < deadline) {
    if (stop != nullptr && stop())
      return IoError("rank " + std::to_string(rank_) +
                     ": stopped while waiting for the next generation");
    auto text = store_->try_get(membership_key_);
    if (text.ok() && text->has_value()) {
      try {
        if (nlohmann::json::parse(**text).at("generation").get<int>() > generation_)
          return std::move(**text);
      } catch (const std::exception& e) {
        return DataLoss(membership_key_ + ": malformed membership record (" + e.what() + ")");
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return IoError("rank " + std::to_string(rank_) + ": no new generation within " +
                 fixed(timeout_s, 0) + " s of the failure");
}

StatusOr<int> StateKeeper::join_next_generation(double timeout_s, bool (*stop)()) {
  CANN_ASSIGN_OR_RETURN(const std::string text, next_membership_record(timeout_s, stop));
  try {
    const nlohmann::json m = nlohmann::json::parse(text);
    const int gen = m.at("generation").get<int>();
    std::string from;
    if (m.contains("restore_from") && static_cast<int>(m["restore_from"].size()) > rank_)
      from = m["restore_from"][rank_].get<std::string>();
    restore_from_ = from;
    generation_ = gen;
    if (heartbeat_) heartbeat_->set_generation(gen);
    return gen;
  } catch (const std::exception& e) {
    return DataLoss(membership_key_ + ": malformed membership record (" + e.what() + ")");
  }
}

Status StateKeeper::leave_generation() {
  if (!store_) return FailedPrecondition("rejoining needs the elastic agent's store");
  const std::string prefix = membership_key_.substr(0, membership_key_.rfind('/'));
  return store_->set(prefix + "/rejoining/rank" + std::to_string(rank_),
                     std::to_string(generation()));
}

StatusOr<StateKeeper::NodeGeneration> StateKeeper::join_next_node_generation(double timeout_s,
                                                                             bool (*stop)(),
                                                                             int node_id,
                                                                             int local_rank) {
  CANN_ASSIGN_OR_RETURN(const std::string text, next_membership_record(timeout_s, stop));
  try {
    const nlohmann::json m = nlohmann::json::parse(text);
    const int gen = m.at("generation").get<int>();
    if (m.value("state", "running") != "running")
      return IoError("the job ended (" + m.value("reason", std::string()) + ") while rank " +
                     std::to_string(rank_) + " waited for the next generation");
    const std::vector<int> nodes = m.at("nodes").get<std::vector<int>>();
    const int per_node = m.at("nproc_per_node").get<int>();
    const auto at = std::find(nodes.begin(), nodes.end(), node_id);
    if (at == nodes.end())
      return NotFound("node " + std::to_string(node_id) + " is not a member of generation " +
                      std::to_string(gen));
    NodeGeneration next;
    next.generation = gen;
    next.node_index = static_cast<int>(at - nodes.begin());
    next.rank = next.node_index * per_node + local_rank;
    next.world_size = static_cast<int>(nodes.size()) * per_node;
    next.strategy = m.value("strategy", std::string());
    return next;
  } catch (const std::exception& e) {
    return DataLoss(membership_key_ + ": malformed membership record (" + e.what() + ")");
  }
}

StatusOr<std::optional<ckpt::LoadedCheckpoint>> StateKeeper::recovery_state(
    const std::string& checkpoint_dir) {
  if (generation_ <= 0) return std::optional<ckpt::LoadedCheckpoint>();
  // Candidates newest step first: of each step this rank's own snapshot first, then its
  // neighbours' (ckpt/replicas.h).
  int64_t committed = -1;
  size_t start = 0;
  while (start < restore_from_.size()) {
    size_t end = restore_from_.find(';', start);
    if (end == std::string::npos) end = restore_from_.size();
    const std::string path = restore_from_.substr(start, end - start);
    start = end + 1;
    if (path.empty()) continue;
    StatusOr<ckpt::LoadedCheckpoint> ck = ckpt::read_checkpoint(path);
    if (ck.ok()) {
      if (ck->step < committed)
        log_warning("rank " + std::to_string(rank_) + ": no copy of the committed step " +
                    std::to_string(committed) + " verifies; restored step " +
                    std::to_string(ck->step) + ", the newest one that does");
      return std::optional<ckpt::LoadedCheckpoint>(std::move(*ck));
    }
    if (committed < 0) committed = ckpt::snapshot_step(path);
    log_warning("rank " + std::to_string(rank_) + ": snapshot " + path +
                " unusable, trying the next copy: " + ck.status().message());
  }
  if (!restore_from_.empty())
    return DataLoss("rank " + std::to_string(rank_) + ": no snapshot copy verifies (" +
                    restore_from_ +
                    "); hint: rerun with --resume to continue from the disk checkpoint");
  if (checkpoint_dir.empty()) {
    log_warning("rank " + std::to_string(rank_) +
                ": no in-memory snapshot and no --checkpoint-dir: restarting from step 0");
    return std::optional<ckpt::LoadedCheckpoint>();
  }
  StatusOr<ckpt::LoadedCheckpoint> ck = ckpt::read_latest_checkpoint(checkpoint_dir);
  if (ck.ok()) return std::optional<ckpt::LoadedCheckpoint>(std::move(*ck));
  if (ck.status().code() == StatusCode::kNotFound) return std::optional<ckpt::LoadedCheckpoint>();
  return ck.status();
}

}  // namespace cann::train
