// The multi-node elastic agent's loop: its workers, store outages, and the change from one
// generation to the next (see node_agent.h).
#include "elastic/node_agent.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt/replicas.h"
#include "core/fs.h"
#include "core/threads.h"
#include "core/timer.h"
#include "debug/job_registry.h"
#include "elastic/rendezvous.h"

namespace cann::elastic {
namespace {

std::atomic<int> g_signal{0};
void on_signal(int sig) {
  g_signal = sig;
}

}  // namespace

NodeAgent::~NodeAgent() {
  beat_stop_ = true;
  if (beat_thread_.joinable()) beat_thread_.join();
  kill_workers(SIGKILL);
  for (auto& w : workers_)
    if (w.running) waitpid(w.pid, &w.status, 0);
  if (!snapshot_root_.empty()) (void)remove_all(snapshot_root_);
  if (registered_) debug::unregister_job(job_);
}

void NodeAgent::say(const std::string& line) {
  std::fprintf(stderr, "cann-train run: node %d: %s\n", node_id_, line.c_str());
  std::fflush(stderr);
}

void NodeAgent::event(const std::string& name, int rank, int generation,
                      const std::string& detail) {
  (void)events_.append({name, unix_seconds(), rank, generation, detail});
}

Status NodeAgent::setup() {
  if (config_.rdzv.empty() || config_.rdzv_id.empty())
    return InvalidArgument("--elastic --nnodes " + std::to_string(config_.min_nodes) + ":" +
                           std::to_string(config_.max_nodes) +
                           " needs --rdzv redis://HOST:PORT and --rdzv-id ID, the same on every "
                           "node; hint: add both flags");
  job_ = config_.rdzv_id;
  keys_ = "cann/" + job_;
  url_ = config_.rdzv;
  const auto op_timeout = std::chrono::milliseconds(static_cast<long>(kStoreOpSeconds * 1000));
  CANN_ASSIGN_OR_RETURN(store_, comm::open_store(url_, op_timeout));
  CANN_ASSIGN_OR_RETURN(int64_t ticket, store_->add(keys_ + "/agent_ids", 1));
  node_id_ = static_cast<int>(ticket - 1);
  if (config_.node0_decides) {
    // `run --strategy auto`: the first node to join plans once; every node, now or joining
    // later, launches what it chose.
    CANN_ASSIGN_OR_RETURN(AgentConfig::NodeLaunch launch,
                          agree_on_launch(*store_, keys_ + "/launch", node_id_ == 0,
                                          config_.node0_decides, config_.rdzv_timeout_s));
    P_ = launch.nproc_per_node;
    config_.worker_args = std::move(launch.worker_args);
    config_.global_batch = launch.global_batch;
    config_.node_layouts = std::move(launch.node_layouts);
  }
  comm_addr_ = !config_.comm_addr.empty() ? config_.comm_addr : local_address_towards(url_);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  host_ = host;
  // The first agent's bounds stand; `cann-train scale` changes them later.
  NodeBounds mine;
  mine.min_nodes = mine.launch_min = config_.min_nodes;
  mine.max_nodes = mine.launch_max = config_.max_nodes;
  mine.reason = "launch";
  CANN_ASSIGN_OR_RETURN(bounds_raw_,
                        store_->compare_set(keys_ + "/bounds", std::nullopt, bounds_json(mine)));
  CANN_ASSIGN_OR_RETURN(bounds_, parse_bounds(bounds_raw_));
  CANN_ASSIGN_OR_RETURN(snapshot_root_, make_snapshot_root(job_));
  CANN_RETURN_IF_ERROR(events_.open(config_.log_json));
  heartbeats_ = std::make_unique<HeartbeatMonitor>(keys_, config_.heartbeat_timeout_s,
                                                   config_.start_timeout_s);
  // The agent's own beat: its own thread and connection, so a slow store call of the loop never
  // makes this node look dead.
  CANN_ASSIGN_OR_RETURN(std::shared_ptr<comm::Store> beat_store,
                        comm::open_store(url_, op_timeout));
  const std::string key = keys_ + "/agents/" + std::to_string(node_id_);
  const double interval = config_.heartbeat_interval_s;
  beat_thread_ = std::thread([this, beat_store, key, interval] {
    int64_t beat = 0;
    while (!beat_stop_) {
      (void)beat_store->set(key, std::to_string(++beat) + " " + host_);
      const double until = now_seconds() + interval;
      while (!beat_stop_ && now_seconds() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  // `cann-train scale` and `debug hang` on this machine find the job without being told.
  registered_ =
      debug::register_job({job_, url_, job_, config_.max_nodes * P_, static_cast<int>(getpid())})
          .ok();
  say("joined job '" + job_ + "' at " + store_->address() + " (" + std::to_string(P_) +
      " workers per node, " + std::to_string(bounds_.min_nodes) + " to " +
      std::to_string(bounds_.max_nodes) + " nodes)");
  return OkStatus();
}

void NodeAgent::kill_workers(int sig) {
  signal_workers(workers_, sig);
}

bool NodeAgent::any_running() const {
  for (const auto& w : workers_)
    if (w.running) return true;
  return false;
}

void NodeAgent::on_local_failure(int rank, const std::string& cause, double now) {
  if (local_failure_at_ > 0.0) return;
  local_failure_at_ = now;
  event("failure_detected", rank, my_gen_, cause);
  say(cause);
  kill_workers(SIGKILL);
}

Status NodeAgent::spawn_generation(double now) {
  const NodeRecord& r = *record_;
  const int index = r.index_of(node_id_);
  const int world = r.world_size();
  const int threads = std::max(1, hardware_threads() / P_);
  const bool tty = isatty(1) != 0;
  for (auto& w : workers_) drain(w);
  workers_.clear();
  // Two steps are enough: the newest, and the one before in case the newest copy is damaged.
  ckpt::prune_node_snapshots(snapshot_root_, 2);
  workers_.resize(P_);
  const std::string gen_dir = join_path(snapshot_root_, "gen" + std::to_string(r.generation));
  char interval[32];
  std::snprintf(interval, sizeof(interval), "%g", config_.heartbeat_interval_s);
  // The micro-batch at the largest world the job was started for; 0 (the trainer's own choice)
  // when that does not divide.
  const int max_world = config_.max_nodes * P_;
  const int micro_batch = config_.global_batch > 0 && config_.global_batch % max_world == 0
                              ? config_.global_batch / max_world
                              : 0;
  for (int l = 0; l < P_; ++l) {
    Worker& w = workers_[l];
    w.local_rank = l;
    w.rank = index * P_ + l;
    std::vector<std::string> env = {
        "RANK=" + std::to_string(w.rank),
        "WORLD_SIZE=" + std::to_string(world),
        "LOCAL_RANK=" + std::to_string(l),
        "LOCAL_WORLD_SIZE=" + std::to_string(P_),
        "GROUP_RANK=" + std::to_string(index),
        "CANN_TRAIN_STORE=" + url_,
        "CANN_TRAIN_JOB=" + job_,
        "CANN_TRAIN_HOST_ID=" + job_ + "/node" + std::to_string(node_id_),
        "CANN_TRAIN_NODE_ID=" + std::to_string(node_id_),
        "CANN_TRAIN_COMM_ADDR=" + comm_addr_,
        "CANN_TRAIN_BACKEND=" + config_.backend,
        "CANN_TRAIN_DEFAULT_THREADS=" + std::to_string(threads),
        "CANN_TRAIN_TTY=" + std::string(tty && w.rank == 0 ? "1" : "0"),
        "CANN_TRAIN_MONITOR=rank0",
        "CANN_TRAIN_GENERATION=" + std::to_string(r.generation),
        "CANN_TRAIN_SNAPSHOT_DIR=" + gen_dir,
        "CANN_TRAIN_NODE_SNAPSHOTS=" + snapshot_root_,
        "CANN_TRAIN_SNAPSHOT_EVERY=" + std::to_string(config_.snapshot_every),
        std::string("CANN_TRAIN_HEARTBEAT_INTERVAL=") + interval,
        "CANN_TRAIN_MICRO_BATCH=" + std::to_string(micro_batch),
    };
    if (!r.strategy.empty()) env.push_back("CANN_TRAIN_STRATEGY=" + r.strategy);
    CANN_RETURN_IF_ERROR(start_worker(w, config_.worker_args, env, config_.plain_rank0_stdout));
  }
  begin_generation(now);
  return OkStatus();
}

void NodeAgent::begin_generation(double now) {
  const NodeRecord& r = *record_;
  my_gen_ = r.generation;
  was_member_ = true;
  local_failure_at_ = 0.0;
  stop_deadline_ = 0.0;
  regrouping_ = false;
  heartbeats_->start_generation(r.generation, r.world_size(), now);
  rendezvous_pending_ = true;
}

bool NodeAgent::stays_whole() const {
  const NodeRecord& r = *record_;
  return local_failure_at_ == 0.0 && my_gen_ >= 0 && r.index_of(node_id_) >= 0 &&
         r.nproc_per_node == P_ && static_cast<int>(workers_.size()) == P_;
}

bool NodeAgent::workers_rejoin() const {
  const NodeRecord& r = *record_;
  // Unless this agent asked for the regrouping, a graceful generation or a stop under way
  // means the workers are going.
  if (!stays_whole() || (!regrouping_ && (r.graceful || stop_deadline_ > 0.0))) return false;
  for (const Worker& w : workers_) {
    if (!w.running) return false;
    auto v = store_->try_get(keys_ + "/rejoining/rank" + std::to_string(w.rank));
    if (!v.ok() || !v->has_value() || std::atoi((*v)->c_str()) != my_gen_) return false;
  }
  return true;
}

void NodeAgent::keep_workers(double now) {
  const NodeRecord& r = *record_;
  const int index = r.index_of(node_id_);
  ckpt::prune_node_snapshots(snapshot_root_, 2);
  for (int l = 0; l < P_; ++l) {
    Worker& w = workers_[l];
    w.rank = index * P_ + l;
    w.stopped_by_agent = false;
    label_output(w, config_.plain_rank0_stdout);
  }
  say("generation " + std::to_string(r.generation) + ": this node's " + std::to_string(P_) +
      " workers keep their processes as ranks " + std::to_string(index * P_) + ".." +
      std::to_string(index * P_ + P_ - 1));
  begin_generation(now);
}

StatusOr<int> NodeAgent::run() {
  CANN_RETURN_IF_ERROR(setup());
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  struct sigaction old_int {
  }, old_term{};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  struct Restore {
    struct sigaction i, t;
    ~Restore() {
      sigaction(SIGINT, &i, nullptr);
      sigaction(SIGTERM, &t, nullptr);
    }
  } restore{old_int, old_term};
  const double started = now_seconds();
  const double failure_grace = config_.heartbeat_timeout_s + 1.0;
  while (true) {
    pump_all(workers_, 50);
    const double now = now_seconds();
    // A stop by signal ends the whole job: the record says so, so that no node restarts it.
    if (g_signal != 0) {
      kill_workers(SIGTERM);
      const double end = now + config_.grace_s;
      while (any_running() && now_seconds() < end) {
        pump_all(workers_, 50);
        for (auto& w : workers_)
          if (w.running && waitpid(w.pid, &w.status, WNOHANG) == w.pid) w.running = false;
      }
      kill_workers(SIGKILL);
      if (record_ && record_->state == JobState::kRunning) {
        NodeRecord end = *record_;
        end.state = JobState::kFinished;
        end.reason = "stopped by a signal";
        (void)propose(end);
      }
      return 130;
    }
    // This node's workers.
    bool all_ok = !workers_.empty();
    for (auto& w : workers_) {
      if (w.running && waitpid(w.pid, &w.status, WNOHANG) == w.pid) {
        w.running = false;
        drain(w);
        // Exit 130 without a signal from this agent: the ranks agreed on a stop asked for on
        // another node (a graceful generation not seen here yet, or the job being stopped).
        // Not a failure; the record will say which, else the grace below restarts.
        const bool interrupted = WIFEXITED(w.status) && WEXITSTATUS(w.status) == 130;
        if (interrupted && !w.stopped_by_agent && local_failure_at_ == 0.0) {
          local_failure_at_ = now;
          kill_workers(SIGTERM);
        }
        if (failed(w.status) && !w.stopped_by_agent && !interrupted) {
          if (WIFEXITED(w.status) && WEXITSTATUS(w.status) == 2) {
            // Bad usage or configuration fails the same way in every generation.
            NodeRecord end = *record_;
            end.state = JobState::kFailed;
            end.reason = "rank " + std::to_string(w.rank) + " reported a usage error";
            (void)propose(end);
            kill_workers(SIGKILL);
            say(end.reason);
            return 2;
          }
          on_local_failure(w.rank,
                           "rank " + std::to_string(w.rank) + " (pid " + std::to_string(w.pid) +
                               ") " + describe_exit(w.status),
                           now);
        }
      }
      all_ok = all_ok && !w.running && !failed(w.status);
    }
    if (all_ok && !completed_ && record_ && my_gen_ == record_->generation) completed_ = true;
    const bool store_up = observe(now);
    if (completed_) {
      // Done, even inside a store outage (the other nodes' workers complete on their own).
      if (record_ && record_->state == JobState::kRunning) {
        NodeRecord end = *record_;
        end.state = JobState::kFinished;
        end.reason = "training completed";
        (void)propose(end);
      }
      return 0;
    }
    if (!store_up) {
      if (store_down_since_ == 0.0) {
        store_down_since_ = now;
        say("the store at " + store_->address() +
            " does not answer; training goes on, waiting "
            "up to " +
            std::to_string(static_cast<int>(kStoreOutageSeconds)) + " s for it");
      }
      if (now - store_down_since_ > kStoreOutageSeconds) {
        kill_workers(SIGKILL);
        say("the store at " + store_->address() + " did not answer for " +
            std::to_string(static_cast<int>(kStoreOutageSeconds)) +
            " s; hint: check that redis-server runs and is reachable from this node");
        return 1;
      }
      continue;
    }
    if (store_down_since_ > 0.0) {
      // No agent could beat during the outage: every clock starts again now.
      say("the store answers again after " + seconds_text(now - store_down_since_));
      for (auto& [id, l] : agents_) l.changed_at = now;
      heartbeats_->restart_clocks(now);
    }
    store_down_since_ = 0.0;
    if (record_ && record_->generation != seen_gen_) {
      seen_gen_ = record_->generation;
      change_at_ = now;
    }
    if (record_ && record_->state == JobState::kFinished && !any_running()) {
      if (!was_member_) say("the job finished before this node was admitted");
      if (record_->reason == "stopped by a signal") {
        say("the job was stopped by a signal on another node");
        return 130;
      }
      return 0;
    }
    if (record_ && record_->state == JobState::kFailed) {
      kill_workers(SIGKILL);
      say("the job failed: " + record_->reason);
      return 1;
    }
    if (!record_ && now - started > config_.rdzv_timeout_s) {
      return IoError("job '" + job_ + "': fewer than " + std::to_string(bounds_.min_nodes) +
                     " nodes joined within " +
                     std::to_string(static_cast<int>(config_.rdzv_timeout_s)) +
                     " s; hint: start `cann-train run` with the same --rdzv and --rdzv-id on "
                     "more nodes");
    }
    // Hangs of this node's workers (stopped or wedged processes).
    if (my_gen_ >= 0 && record_ && my_gen_ == record_->generation && local_failure_at_ == 0.0 &&
        any_running()) {
      std::vector<bool> running(static_cast<size_t>(record_->world_size()), false);
      for (const auto& w : workers_) running[w.rank] = w.running;
      auto hang = heartbeats_->poll(*store_, running, now);
      if (hang) {
        on_local_failure(hang->rank, hang->detail, now);
        local_failure_at_ = now - failure_grace;  // this node's own fault: no grace
      }
    }
    // An agent judges others only after watching them for a heartbeat timeout: a beat seen
    // once may be old, and one not seen yet may be on its way.
    if (watch_since_ == 0.0) watch_since_ = now;
    if (now - watch_since_ > config_.heartbeat_timeout_s && leader(now) == node_id_) lead(now);
    // A failure of this node's workers with no new generation after the grace: restart.
    if (local_failure_at_ > 0.0 && record_ && record_->generation == my_gen_ &&
        now - local_failure_at_ > failure_grace && record_->state == JobState::kRunning) {
      NodeRecord next = *record_;
      next.generation = record_->generation + 1;
      if (record_->restarts >= config_.max_restarts) {
        next.state = JobState::kFailed;
        next.reason = "a worker failed on node " + std::to_string(node_id_) + " after " +
                      std::to_string(record_->restarts) + " restarts (--max-restarts " +
                      std::to_string(config_.max_restarts) + ")";
      } else {
        next.restarts = record_->restarts + 1;
        next.graceful = false;
        next.reason = "workers failed on node " + std::to_string(node_id_) + "; restart " +
                      std::to_string(next.restarts) + " of " + std::to_string(config_.max_restarts);
      }
      (void)propose(next);
    }
    if (record_ && record_->state == JobState::kRunning) check_rendezvous(now);
    // A new generation: stop this node's workers (at a step boundary when graceful), then
    // start the new ones, or leave when no longer a member.
    if (record_ && record_->state == JobState::kRunning && record_->generation > my_gen_) {
      if (any_running() && workers_rejoin()) {
        keep_workers(now);
        continue;
      }
      if (any_running()) {
        if (stop_deadline_ == 0.0) {
          // A graceful generation this node stays in: its workers stop at the agreed step
          // boundary and, on SIGUSR1, wait to rejoin rather than exit (kept above once they
          // all say so); leaving nodes' workers stop and exit on SIGTERM.
          regrouping_ = record_->graceful && stays_whole();
          kill_workers(!record_->graceful ? SIGKILL : regrouping_ ? SIGUSR1 : SIGTERM);
          stop_deadline_ = now + config_.grace_s;
        } else if (now > stop_deadline_) {
          kill_workers(SIGKILL);
        }
        continue;
      }
      if (record_->index_of(node_id_) >= 0) {
        CANN_RETURN_IF_ERROR(spawn_generation(now));
      } else if (was_member_) {
        say("not a member of generation " + std::to_string(record_->generation) + " (" +
            record_->reason + "); leaving the job");
        return 0;
      }
    }
  }
}

StatusOr<int> run_node_agent(const AgentConfig& config) {
  NodeAgent agent(config);
  return agent.run();
}

}  // namespace cann::elastic
