// The multi-node elastic agent: one per node, all meeting in the store (node_membership.h).
//
// Every agent beats under cann/<job>/agents/<id> from its own thread and connection, watches its
// own workers (waitpid and their heartbeats, as on one node) and the other agents' beats. The
// leader (the lowest-numbered live member) writes each new generation of the membership record:
//   - a member node is gone (its agent's beat is stale: the machine died, or its link is down):
//     the live members go on without it, with waiting nodes admitted up to max_nodes;
//   - waiting nodes and room below max_nodes, or bounds lowered by `cann-train scale`: a
//     graceful generation, whose workers stop together at a step boundary (SIGTERM; the stop is
//     agreed over the ranks each step), so no work is redone.
// An agent whose own worker fails kills its other workers and, unless the leader has started a
// new generation within a grace period (a peer node's death makes its workers fail first),
// proposes a restart generation itself. Every record is written with compare_set against the
// record it replaces, so concurrent proposals cannot both win.
//
// On a new generation each member agent stops its workers and starts fresh ones with the new
// rank, world size and generation; they take the state from the in-memory snapshots of this node
// or, when another node holds a newer step, receive it from that node over the new group
// (train/peer_restore.cc). A member dropped by a scale-down exits 0; a node not admitted waits.
// Failure generations count against max_restarts; the next one ends the job (exit 1).
//
// Store outages: every store operation of the loop may fail; while the store is unreachable no
// beat is judged stale and no decision is made, and a record that the restarted store lost is
// written back from this agent's copy. An outage longer than kStoreOutageSeconds ends the job.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <optional>
#include <thread>

#include "ckpt/replicas.h"
#include "comm/store.h"
#include "core/event_log.h"
#include "core/fs.h"
#include "core/threads.h"
#include "core/timer.h"
#include "elastic/agent.h"
#include "elastic/heartbeat_monitor.h"
#include "elastic/node_membership.h"
#include "elastic/rendezvous.h"
#include "elastic/worker_process.h"

namespace cann::elastic {
namespace {

// Longest store outage survived; store operations of the loop time out after kStoreOpSeconds.
constexpr double kStoreOutageSeconds = 30.0;
constexpr double kStoreOpSeconds = 2.0;
// Before the first generation, once min_nodes agents are live, how long to wait for more.
constexpr double kLastCallSeconds = 2.0;

std::atomic<int> g_signal{0};
void on_signal(int sig) {
  g_signal = sig;
}

struct Liveness {
  std::string value;
  double changed_at = 0.0;  // by this agent's clock
};

class NodeAgent {
 public:
  explicit NodeAgent(const AgentConfig& c) : config_(c), P_(c.nproc_per_node) {}
  ~NodeAgent();
  StatusOr<int> run();

 private:
  Status setup();
  // Reads the shared state; false while the store does not answer.
  bool observe(double now);
  bool live(int id, double now) const;
  std::vector<int> live_ids(double now) const;
  int leader(double now) const;
  // Writes `next` over the record read last; true when it won.
  bool propose(NodeRecord next);
  void lead(double now);
  void on_local_failure(int rank, const std::string& cause, double now);
  void kill_workers(int sig);
  bool any_running() const;
  Status spawn_generation(double now);
  void check_rendezvous(double now);
  void event(const std::string& name, int rank, int generation, const std::string& detail);
  void say(const std::string& line);

  AgentConfig config_;
  const int P_;
  std::string job_, keys_, url_, comm_addr_, host_;
  std::shared_ptr<comm::Store> store_;
  int node_id_ = -1;
  std::thread beat_thread_;
  std::atomic<bool> beat_stop_{false};
  std::map<int, Liveness> agents_;
  int max_id_ = 0;
  std::optional<NodeRecord> record_;
  std::string record_raw_;
  NodeBounds bounds_;
  std::string bounds_raw_;
  std::string snapshot_root_;
  EventLog events_;
  std::unique_ptr<HeartbeatMonitor> heartbeats_;
  std::vector<Worker> workers_;
  int my_gen_ = -1;    // generation of the workers this agent runs (or last ran)
  int seen_gen_ = -1;  // newest generation seen in the record
  bool was_member_ = false;
  bool completed_ = false;           // this node's workers finished the training
  double local_failure_at_ = 0.0;    // when this node's workers failed; 0: they did not
  double change_at_ = 0.0;           // when the current generation was decided
  double stop_deadline_ = 0.0;       // SIGKILL stopping workers after this
  double store_down_since_ = 0.0;
  double min_reached_at_ = 0.0;      // first generation: when min_nodes agents were live
  double short_since_ = 0.0;         // fewer than min_nodes live members since
  double watch_since_ = 0.0;         // first answer of the store
  bool rendezvous_pending_ = false;
};

NodeAgent::~NodeAgent() {
  beat_stop_ = true;
  if (beat_thread_.joinable()) beat_thread_.join();
  kill_workers(SIGKILL);
  for (auto& w : workers_)
    if (w.running) waitpid(w.pid, &w.status, 0);
  if (!snapshot_root_.empty()) (void)remove_all(snapshot_root_);
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
  comm_addr_ = !config_.comm_addr.empty() ? config_.comm_addr : local_address_towards(url_);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  host_ = host;
  // The first agent's bounds stand; `cann-train scale` changes them later.
  NodeBounds mine{config_.min_nodes, config_.max_nodes, 0};
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
  say("joined job '" + job_ + "' at " + store_->address() + " (" + std::to_string(P_) +
      " workers per node, " + std::to_string(bounds_.min_nodes) + " to " +
      std::to_string(bounds_.max_nodes) + " nodes)");
  return OkStatus();
}

bool NodeAgent::observe(double now) {
  auto ids = store_->try_get(keys_ + "/agent_ids");
  if (!ids.ok()) return false;
  if (!ids->has_value()) {
    // A restarted store lost the counter: put back at least the ids this agent knows of.
    (void)store_->compare_set(keys_ + "/agent_ids", std::nullopt, std::to_string(max_id_ + 1));
  } else {
    max_id_ = std::max(max_id_, std::atoi((*ids)->c_str()) - 1);
  }
  max_id_ = std::max(max_id_, node_id_);
  for (int id = 0; id <= max_id_; ++id) {
    auto v = store_->try_get(keys_ + "/agents/" + std::to_string(id));
    if (!v.ok()) return false;
    Liveness& l = agents_[id];
    if (v->has_value() && **v != l.value) {
      l.value = **v;
      l.changed_at = now;
    }
  }
  auto raw = store_->try_get(keys_ + "/membership");
  if (!raw.ok()) return false;
  if (!raw->has_value()) {
    if (record_) (void)store_->compare_set(keys_ + "/membership", std::nullopt, record_raw_);
  } else if (**raw != record_raw_) {
    auto r = parse_node_record(**raw);
    if (r.ok()) {
      record_ = *r;
      record_raw_ = **raw;
    }
  }
  auto b = store_->try_get(keys_ + "/bounds");
  if (!b.ok()) return false;
  if (!b->has_value()) {
    (void)store_->compare_set(keys_ + "/bounds", std::nullopt, bounds_raw_);
  } else if (**b != bounds_raw_) {
    auto nb = parse_bounds(**b);
    if (nb.ok()) {
      if (leader(now) == node_id_)
        event("bounds_changed", -1, record_ ? record_->generation : 0,
              "min_nodes " + std::to_string(bounds_.min_nodes) + " -> " +
                  std::to_string(nb->min_nodes) + ", max_nodes " +
                  std::to_string(bounds_.max_nodes) + " -> " + std::to_string(nb->max_nodes));
      bounds_ = *nb;
      bounds_raw_ = **b;
    }
  }
  return true;
}

bool NodeAgent::live(int id, double now) const {
  if (id == node_id_) return true;
  auto it = agents_.find(id);
  return it != agents_.end() && !it->second.value.empty() &&
         now - it->second.changed_at <= config_.heartbeat_timeout_s;
}

std::vector<int> NodeAgent::live_ids(double now) const {
  std::vector<int> out;
  for (int id = 0; id <= max_id_; ++id)
    if (live(id, now)) out.push_back(id);
  return out;
}

int NodeAgent::leader(double now) const {
  if (record_ && record_->state == JobState::kRunning) {
    int best = -1;
    for (int id : record_->nodes)
      if (live(id, now) && (best < 0 || id < best)) best = id;
    if (best >= 0) return best;
  }
  const auto ids = live_ids(now);
  return ids.empty() ? node_id_ : ids.front();
}

bool NodeAgent::propose(NodeRecord next) {
  const std::optional<std::string> expected =
      record_ ? std::optional<std::string>(record_raw_) : std::nullopt;
  const std::string desired = node_record_json(next);
  auto got = store_->compare_set(keys_ + "/membership", expected, desired);
  if (!got.ok() || *got != desired) return false;
  if (next.state == JobState::kRunning) {
    const int old_world = record_ ? record_->world_size() : 0;
    if (record_ && old_world != next.world_size())
      event("scaled", -1, next.generation,
            "world size " + std::to_string(old_world) + " -> " +
                std::to_string(next.world_size()) + " (" + describe_nodes(record_->nodes) +
                " -> " + describe_nodes(next.nodes) + ")");
    say("generation " + std::to_string(next.generation) + " on " + describe_nodes(next.nodes) +
        ", world size " + std::to_string(next.world_size()) + ": " + next.reason);
  }
  record_ = next;
  record_raw_ = desired;
  return true;
}

// The leader's decisions: the first generation, a lost member, and scaling.
void NodeAgent::lead(double now) {
  const std::vector<int> live = live_ids(now);
  if (!record_) {
    if (static_cast<int>(live.size()) < bounds_.min_nodes) return;
    if (min_reached_at_ == 0.0) min_reached_at_ = now;
    if (static_cast<int>(live.size()) < bounds_.max_nodes &&
        now - min_reached_at_ < kLastCallSeconds)
      return;
    auto members = next_members({}, live, bounds_, P_, config_.global_batch);
    if (!members) return;
    NodeRecord r;
    r.generation = 0;
    r.nproc_per_node = P_;
    r.nodes = *members;
    r.reason = "first generation";
    (void)propose(r);
    return;
  }
  if (record_->state != JobState::kRunning) return;
  std::vector<int> current_live, gone, waiting;
  for (int id : record_->nodes) (this->live(id, now) ? current_live : gone).push_back(id);
  for (int id : live)
    if (record_->index_of(id) < 0) waiting.push_back(id);
  NodeRecord next = *record_;
  next.generation = record_->generation + 1;
  if (!gone.empty()) {
    auto members = next_members(current_live, waiting, bounds_, P_, config_.global_batch);
    const std::string cause = describe_nodes(gone) + " gone (agent heartbeat stale for more than " +
                              seconds_text(config_.heartbeat_timeout_s) + ")";
    if (short_since_ == 0.0) {
      event("failure_detected", -1, record_->generation, cause);
      say(cause);
    }
    if (!members) {
      if (short_since_ == 0.0) {
        short_since_ = now;
        kill_workers(SIGKILL);
        say("fewer than " + std::to_string(bounds_.min_nodes) +
            " nodes left; waiting up to " + std::to_string(static_cast<int>(config_.rdzv_timeout_s)) +
            " s for nodes to join");
      }
      if (now - short_since_ > config_.rdzv_timeout_s) {
        next.state = JobState::kFailed;
        next.reason = "fewer than " + std::to_string(bounds_.min_nodes) + " nodes (--nnodes " +
                      "minimum) for " + std::to_string(static_cast<int>(config_.rdzv_timeout_s)) +
                      " s after " + cause;
        (void)propose(next);
      }
      return;
    }
    short_since_ = 0.0;
    if (record_->restarts >= config_.max_restarts) {
      next.state = JobState::kFailed;
      next.reason = cause + " after " + std::to_string(record_->restarts) +
                    " restarts (--max-restarts " + std::to_string(config_.max_restarts) + ")";
      (void)propose(next);
      return;
    }
    next.nodes = *members;
    next.restarts = record_->restarts + 1;
    next.graceful = false;
    next.reason = cause + "; restart " + std::to_string(next.restarts) + " of " +
                  std::to_string(config_.max_restarts);
    (void)propose(next);
    return;
  }
  // Scaling: only between settled generations (every worker of this one has joined).
  if (rendezvous_pending_ || now - change_at_ < kLastCallSeconds) return;
  auto members = next_members(current_live, waiting, bounds_, P_, config_.global_batch);
  if (!members || *members == record_->nodes) return;
  next.nodes = *members;
  next.graceful = true;
  next.reason = members->size() > record_->nodes.size()
                    ? "admitting " + describe_nodes(waiting) + " (up to " +
                          std::to_string(bounds_.max_nodes) + " nodes)"
                    : "scaling down to at most " + std::to_string(bounds_.max_nodes) + " nodes";
  (void)propose(next);
}

void NodeAgent::kill_workers(int sig) {
  for (auto& w : workers_) {
    if (!w.running) continue;
    kill(w.pid, sig);
    w.stopped_by_agent = true;
  }
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
    const std::vector<std::string> env = {
        "RANK=" + std::to_string(w.rank),
        "WORLD_SIZE=" + std::to_string(world),
        "LOCAL_RANK=" + std::to_string(l),
        "LOCAL_WORLD_SIZE=" + std::to_string(P_),
        "GROUP_RANK=" + std::to_string(index),
        "CANN_TRAIN_STORE=" + url_,
        "CANN_TRAIN_JOB=" + job_,
        "CANN_TRAIN_HOST_ID=" + job_ + "/node" + std::to_string(node_id_),
        "CANN_TRAIN_COMM_ADDR=" + comm_addr_,
        "CANN_TRAIN_BACKEND=" + config_.backend,
        "CANN_TRAIN_DEFAULT_THREADS=" + std::to_string(threads),
        "CANN_TRAIN_TTY=" + std::string(tty && w.rank == 0 ? "1" : "0"),
        "CANN_TRAIN_MONITOR=0",
        "CANN_TRAIN_GENERATION=" + std::to_string(r.generation),
        "CANN_TRAIN_SNAPSHOT_DIR=" + gen_dir,
        "CANN_TRAIN_NODE_SNAPSHOTS=" + snapshot_root_,
        "CANN_TRAIN_SNAPSHOT_EVERY=" + std::to_string(config_.snapshot_every),
        std::string("CANN_TRAIN_HEARTBEAT_INTERVAL=") + interval,
        "CANN_TRAIN_MICRO_BATCH=" + std::to_string(micro_batch),
    };
    CANN_RETURN_IF_ERROR(start_worker(w, config_.worker_args, env, config_.plain_rank0_stdout));
  }
  my_gen_ = r.generation;
  was_member_ = true;
  local_failure_at_ = 0.0;
  stop_deadline_ = 0.0;
  heartbeats_->start_generation(r.generation, world, now);
  rendezvous_pending_ = true;
  return OkStatus();
}

// The leader names the moment every rank of the generation has beaten with it.
void NodeAgent::check_rendezvous(double now) {
  if (!rendezvous_pending_ || !record_) return;
  const int world = record_->world_size();
  for (int r = 0; r < world; ++r) {
    auto v = store_->try_get(keys_ + "/heartbeat/rank" + std::to_string(r));
    if (!v.ok() || !v->has_value()) return;
    if (std::atoi((*v)->c_str()) != record_->generation) return;
  }
  rendezvous_pending_ = false;
  if (leader(now) == node_id_)
    event("rendezvous_complete", -1, record_->generation,
          "generation " + std::to_string(record_->generation) + ": " + std::to_string(world) +
              " workers on " + describe_nodes(record_->nodes) + " joined, " +
              seconds_text(now - change_at_) + " after it was decided");
}

StatusOr<int> NodeAgent::run() {
  CANN_RETURN_IF_ERROR(setup());
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  struct sigaction old_int {}, old_term{};
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
    if (g_signal != 0) {
      kill_workers(SIGTERM);
      const double end = now + config_.grace_s;
      while (any_running() && now_seconds() < end) {
        pump_all(workers_, 50);
        for (auto& w : workers_)
          if (w.running && waitpid(w.pid, &w.status, WNOHANG) == w.pid) w.running = false;
      }
      return 130;
    }
    // This node's workers.
    bool all_ok = !workers_.empty();
    for (auto& w : workers_) {
      if (w.running && waitpid(w.pid, &w.status, WNOHANG) == w.pid) {
        w.running = false;
        drain(w);
        if (failed(w.status) && !w.stopped_by_agent) {
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
    if (!store_up) {
      if (store_down_since_ == 0.0) {
        store_down_since_ = now;
        say("the store at " + store_->address() + " does not answer; training goes on, waiting "
            "up to " + std::to_string(static_cast<int>(kStoreOutageSeconds)) + " s for it");
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
    }
    store_down_since_ = 0.0;
    if (record_ && record_->generation != seen_gen_) {
      seen_gen_ = record_->generation;
      change_at_ = now;
    }
    if (completed_) {
      if (record_ && record_->state == JobState::kRunning) {
        NodeRecord end = *record_;
        end.state = JobState::kFinished;
        end.reason = "training completed";
        (void)propose(end);
      }
      return 0;
    }
    if (record_ && record_->state == JobState::kFinished && !any_running()) {
      if (!was_member_) say("the job finished before this node was admitted");
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
      if (any_running()) {
        if (stop_deadline_ == 0.0) {
          kill_workers(record_->graceful ? SIGTERM : SIGKILL);
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

}  // namespace

StatusOr<int> run_node_agent(const AgentConfig& config) {
  NodeAgent agent(config);
  return agent.run();
}

}  // namespace cann::elastic
