// The one-node (or fixed-nodes) agent: rendezvous, the workers' environment, output
// forwarding through poll(), exit-status supervision, the stop-the-rest policy, and one-node
// elastic restarts (see local_agent.h).
#include "elastic/local_agent.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <random>

#include "ckpt/replicas.h"
#include "comm/job_keys.h"
#include "core/event_log.h"
#include "core/fs.h"
#include "core/threads.h"
#include "core/timer.h"
#include "debug/job_registry.h"
#include "elastic/heartbeat_monitor.h"
#include "elastic/output_forwarder.h"
#include "elastic/rendezvous.h"
#include "elastic/worker_process.h"
#include "monitor/job_monitor.h"

namespace cann::elastic {
namespace {

std::atomic<int> g_agent_signal{0};
void on_agent_signal(int sig) {
  g_agent_signal = sig;
}

constexpr double kSettleSeconds = 0.3;

}  // namespace

StatusOr<int> run_agent(const AgentConfig& config) {
  if (config.elastic && config.max_nodes > 1) return run_node_agent(config);
  LocalAgent agent(config);
  return agent.run();
}

LocalAgent::~LocalAgent() {
  if (!snapshot_root_.empty()) (void)remove_all(snapshot_root_);
  if (registered_) debug::unregister_job(job_);
}

Status LocalAgent::rendezvous() {
  job_ = config_.rdzv_id.empty() ? random_id() : config_.rdzv_id;
  store_url_ = config_.rdzv;
  if (config_.nnodes > 1) {
    if (store_url_.empty())
      return InvalidArgument("--nnodes " + std::to_string(config_.nnodes) +
                             " needs --rdzv redis://HOST:PORT so the nodes can find each other");
    CANN_ASSIGN_OR_RETURN(auto store, comm::open_store(store_url_));
    CANN_ASSIGN_OR_RETURN(node_, join_nodes(*store, job_, config_.nnodes, config_.rdzv_timeout_s));
    if (config_.node0_decides) CANN_RETURN_IF_ERROR(agree_on_launch(*store));
  } else {
    if (store_url_.empty()) {
      std::string templ = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                          "/cann-train-XXXXXX";
      std::vector<char> buf(templ.begin(), templ.end());
      buf.push_back('\0');
      if (mkdtemp(buf.data()) == nullptr)
        return IoError(templ +
                       ": cannot create the job's store directory: " + std::strerror(errno));
      temp_dir_ = buf.data();
      store_url_ = "file://" + temp_dir_ + "/store";
    }
    node_.job_prefix = job_ + "/round0";
  }
  comm_addr_ = !config_.comm_addr.empty() ? config_.comm_addr : local_address_towards(store_url_);
  world_ = config_.nnodes * P_;
  threads_per_worker_ = std::max(1, hardware_threads() / P_);
  tty_ = isatty(1) != 0;
  job_keys_ = "cann/" + node_.job_prefix;
  return OkStatus();
}

Status LocalAgent::agree_on_launch(comm::Store& store) {
  CANN_ASSIGN_OR_RETURN(
      AgentConfig::NodeLaunch launch,
      elastic::agree_on_launch(store, "cann/" + node_.job_prefix + "/launch", node_.node_rank == 0,
                               config_.node0_decides, config_.rdzv_timeout_s));
  P_ = launch.nproc_per_node;
  config_.worker_args = std::move(launch.worker_args);
  return OkStatus();
}

Status LocalAgent::start_monitor() {
  if (!config_.monitor || node_.node_rank != 0) return OkStatus();
  CANN_ASSIGN_OR_RETURN(std::shared_ptr<comm::Store> store, comm::open_store(store_url_));
  monitor::JobMonitorConfig mc;
  mc.job = node_.job_prefix;
  mc.world_size = world_;
  mc.server = config_.monitor_server;
  mc.alerts = config_.alerts;
  mc.get = monitor::store_get([store](const std::string& key) { return store->try_get(key); });
  mc.snapshot_prefix = job_keys_ + "/monitor";
  CANN_ASSIGN_OR_RETURN(job_monitor_, monitor::JobMonitor::start(std::move(mc)));
  std::printf("dashboard: %s\n", job_monitor_->url().c_str());
  std::fflush(stdout);
  return OkStatus();
}

Status LocalAgent::start_elastic() {
  if (!config_.elastic) return OkStatus();
  CANN_ASSIGN_OR_RETURN(snapshot_root_, make_snapshot_root(job_));
  CANN_ASSIGN_OR_RETURN(store_, comm::open_store(store_url_));
  CANN_RETURN_IF_ERROR(events_.open(config_.log_json));
  heartbeats_ = std::make_unique<HeartbeatMonitor>(job_keys_, config_.heartbeat_timeout_s,
                                                   config_.start_timeout_s);
  return OkStatus();
}

Status LocalAgent::spawn(int l, const ckpt::ReplicaPlan* plan) {
  Worker& w = workers_[l];
  w = Worker();
  w.local_rank = l;
  w.rank = node_.node_rank * P_ + l;
  std::vector<std::string> env = {
      "RANK=" + std::to_string(w.rank),
      "WORLD_SIZE=" + std::to_string(world_),
      "LOCAL_RANK=" + std::to_string(l),
      "LOCAL_WORLD_SIZE=" + std::to_string(P_),
      "GROUP_RANK=" + std::to_string(node_.node_rank),
      "CANN_TRAIN_STORE=" + store_url_,
      "CANN_TRAIN_JOB=" + node_.job_prefix,
      "CANN_TRAIN_HOST_ID=" + job_ + "/node" + std::to_string(node_.node_rank),
      "CANN_TRAIN_COMM_ADDR=" + comm_addr_,
      "CANN_TRAIN_BACKEND=" + config_.backend,
      "CANN_TRAIN_DEFAULT_THREADS=" + std::to_string(threads_per_worker_),
      "CANN_TRAIN_TTY=" + std::string(tty_ && w.rank == 0 ? "1" : "0"),
      "CANN_TRAIN_MONITOR=" + std::string(config_.monitor ? "1" : "0"),
  };
  if (config_.elastic) {
    char interval[32];
    std::snprintf(interval, sizeof(interval), "%g", config_.heartbeat_interval_s);
    env.push_back("CANN_TRAIN_GENERATION=" + std::to_string(generation_));
    env.push_back("CANN_TRAIN_SNAPSHOT_DIR=" + snapshot_root_);
    env.push_back("CANN_TRAIN_SNAPSHOT_EVERY=" + std::to_string(config_.snapshot_every));
    env.push_back(std::string("CANN_TRAIN_HEARTBEAT_INTERVAL=") + interval);
    if (plan != nullptr && plan->step >= 0)
      env.push_back("CANN_TRAIN_RESTORE_FROM=" + plan->candidates[w.rank]);
  }
  return start_worker(w, config_.worker_args, env, config_.plain_rank0_stdout);
}

Status LocalAgent::publish_membership(const ckpt::ReplicaPlan* plan) {
  std::string members, restore;
  for (int r = 0; r < world_; ++r) {
    if (!restore.empty()) restore += ",";
    restore +=
        "\"" + (plan != nullptr && plan->step >= 0 ? plan->candidates[r] : std::string()) + "\"";
  }
  for (const Worker& w : workers_) {
    if (!members.empty()) members += ",";
    members += "{\"rank\":" + std::to_string(w.rank) + ",\"pid\":" + std::to_string(w.pid) +
               ",\"node\":" + std::to_string(node_.node_rank) + "}";
  }
  CANN_RETURN_IF_ERROR(
      store_->set(comm::membership_key(job_keys_, node_.node_rank, config_.nnodes),
                  "{\"generation\":" + std::to_string(generation_) +
                      ",\"world_size\":" + std::to_string(world_) + ",\"members\":[" + members +
                      "],\"restore_step\":" + std::to_string(plan != nullptr ? plan->step : -1) +
                      ",\"restore_from\":[" + restore + "]}"));
  heartbeats_->start_generation(generation_, P_, now_seconds(), node_.node_rank * P_);
  return OkStatus();
}

Status LocalAgent::restart_generation(int rank, const std::string& cause, bool whole) {
  failure_at_ = now_seconds();
  (void)events_.append({"failure_detected", unix_seconds(), rank, generation_, cause});
  if (job_monitor_)
    job_monitor_->hub().add_event({unix_seconds(), "failure_detected", rank, cause});
  for (auto& w : workers_)
    if (w.running && (whole || w.rank == rank)) kill(w.pid, SIGKILL);
  int replaced = 0;
  for (auto& w : workers_) {
    if (w.running && (whole || w.rank == rank)) {
      waitpid(w.pid, &w.status, 0);
      w.running = false;
    }
    if (w.running) continue;
    drain(w);
    ++replaced;
  }
  ++generation_;
  ++restarts_;
  const ckpt::ReplicaPlan plan = ckpt::plan_replica_restore(snapshot_root_, world_);
  const std::string from = !config_.restores_from.empty() ? config_.restores_from
                           : plan.step >= 0
                               ? "the in-memory snapshot of step " + std::to_string(plan.step)
                               : "the newest disk checkpoint (" +
                                     (plan.note.empty() ? "no snapshot survived" : plan.note) + ")";
  std::fprintf(stderr,
               "cann-train run: %s; restart %d of %d: generation %d replaces %d worker%s and "
               "resumes from %s\n",
               cause.c_str(), restarts_, config_.max_restarts, generation_, replaced,
               replaced == 1 ? "" : "s", from.c_str());
  std::fflush(stderr);
  rendezvous_pending_ = true;
  CANN_RETURN_IF_ERROR(publish_membership(&plan));
  if (config_.on_fault) config_.on_fault({whole ? -1 : rank, cause, generation_, replaced, from});
  for (int l = 0; l < P_; ++l)
    if (!workers_[l].running) CANN_RETURN_IF_ERROR(spawn(l, &plan));
  return OkStatus();
}

StatusOr<int> LocalAgent::run() {
  CANN_RETURN_IF_ERROR(rendezvous());
  CANN_RETURN_IF_ERROR(start_monitor());
  // Let `cann-train debug hang --job ID` find this job's store.
  (void)debug::register_job(
      {job_, store_url_, node_.job_prefix, world_, static_cast<int>(getpid())});
  registered_ = true;

  g_agent_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_agent_signal;
  struct sigaction old_int {
  }, old_term{};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);

  CANN_RETURN_IF_ERROR(start_elastic());
  workers_.resize(P_);
  for (int l = 0; l < P_; ++l) CANN_RETURN_IF_ERROR(spawn(l, nullptr));
  if (config_.elastic) CANN_RETURN_IF_ERROR(publish_membership(nullptr));
  rendezvous_pending_ = config_.elastic;
  while (true) {
    CANN_ASSIGN_OR_RETURN(const bool more, supervise());
    if (!more) break;
  }
  for (auto& w : workers_) {
    w.out->finish();
    w.err->finish();
  }
  if (job_monitor_) job_monitor_->finish();
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  if (!temp_dir_.empty()) (void)remove_all(temp_dir_);
  return outcome();
}

StatusOr<bool> LocalAgent::supervise() {
  pump_all(workers_, 50);
  if (job_monitor_ && job_monitor_->stop_requested() && g_agent_signal == 0)
    g_agent_signal = SIGTERM;
  if (g_agent_signal != 0 && !interrupted_) {
    interrupted_ = true;
    signal_workers(workers_, SIGTERM);
    stop_deadline_ = now_seconds() + config_.grace_s;
  }
  bool failure_seen = false;
  const Worker* first_failed = nullptr;
  for (auto& w : workers_) {
    if (!w.running) continue;
    int status = 0;
    if (waitpid(w.pid, &status, WNOHANG) != w.pid) continue;
    w.running = false;
    w.status = status;
    w.exit_order = exits_++;
    failure_seen |= failed(status);
    // The cause, when several exit at once: a worker killed by a signal over its survivors.
    if (failed(status) &&
        (first_failed == nullptr || (WIFSIGNALED(status) && !WIFSIGNALED(first_failed->status))))
      first_failed = &w;
    if (job_monitor_ && failed(status))
      job_monitor_->hub().add_event(
          {unix_seconds(), "worker_exited", w.rank, describe_exit(status)});
  }
  if (config_.elastic && !interrupted_ && !any_failure_) {
    CANN_ASSIGN_OR_RETURN(const bool restarted, recover(failure_seen, first_failed));
    if (restarted) return true;
  }
  // After the first failure, let exits settle for a moment before stopping the rest: the
  // workers that fail on their own (a killed peer's survivors, which fail within
  // milliseconds) then count as failures, not as workers the agent stopped, and the cause
  // can be told from its consequences.
  if (failure_seen && !any_failure_ && !interrupted_) {
    any_failure_ = true;
    settle_deadline_ = now_seconds() + kSettleSeconds;
  }
  if (settle_deadline_ > 0 && now_seconds() > settle_deadline_) {
    settle_deadline_ = 0;
    signal_workers(workers_, SIGTERM);
    stop_deadline_ = now_seconds() + config_.grace_s;
  }
  if (stop_deadline_ > 0 && now_seconds() > stop_deadline_) signal_workers(workers_, SIGKILL);
  bool any_running = false, any_open = false;
  for (auto& w : workers_) {
    any_running |= w.running;
    any_open |= w.out_fd >= 0 || w.err_fd >= 0;
  }
  if (!any_running && !any_open) return false;
  if (!any_running && stop_deadline_ == 0) stop_deadline_ = now_seconds() + 1.0;  // drain pipes
  return true;
}

StatusOr<bool> LocalAgent::recover(bool failure_seen, const Worker* first_failed) {
  std::optional<HeartbeatFailure> hang;
  if (!failure_seen) {
    std::vector<bool> running;
    for (const auto& w : workers_) running.push_back(w.running);
    hang = heartbeats_->poll(*store_, running, now_seconds());
    if (rendezvous_pending_ && heartbeats_->all_joined()) {
      rendezvous_pending_ = false;
      std::string detail = "generation " + std::to_string(generation_) + ": " +
                           std::to_string(world_) + " workers joined";
      if (generation_ > 0)
        detail += ", " + seconds_text(now_seconds() - failure_at_) + " after the failure";
      (void)events_.append({"rendezvous_complete", unix_seconds(), -1, generation_, detail});
    }
  }
  // A usage error (exit 2) is the same in every generation: no restart for it.
  const bool usage_error =
      failure_seen && WIFEXITED(first_failed->status) && WEXITSTATUS(first_failed->status) == 2;
  // A stopped worker may hold a lock of the file store that the others' heartbeats wait on,
  // so theirs go stale too: the stopped process is the one to blame.
  if (hang && hang->verdict == HeartbeatVerdict::kStale) {
    for (const auto& w : workers_)
      if (w.running && process_stopped(w.pid)) {
        hang->rank = w.rank;
        hang->detail = "rank " + std::to_string(w.rank) + " (pid " + std::to_string(w.pid) +
                       ") is stopped: its heartbeat is stale";
        break;
      }
  }
  // A worker that beats but makes no progress may only be waiting on the hung one: replace
  // them all. A dead or silent worker is replaced alone.
  const bool whole = hang && hang->verdict == HeartbeatVerdict::kNoProgress;
  std::string kept;  // why the failed rank is not replaced
  if ((failure_seen || hang) && config_.irreplaceable) {
    const int rank = hang ? hang->rank : first_failed->rank;
    kept = whole ? "a hang that would replace every rank; " + config_.irreplaceable(-1)
                 : config_.irreplaceable(rank);
  }
  if ((failure_seen || hang) && !usage_error && restarts_ < config_.max_restarts && kept.empty()) {
    const int rank = hang ? hang->rank : first_failed->rank;
    const std::string cause = hang ? hang->detail
                                   : "rank " + std::to_string(first_failed->rank) + " (pid " +
                                         std::to_string(first_failed->pid) + ") " +
                                         describe_exit(first_failed->status);
    CANN_RETURN_IF_ERROR(restart_generation(rank, cause, whole));
    return true;
  }
  if (!kept.empty() && !usage_error) {
    std::fprintf(stderr, "cann-train run: not restarted: %s\n", kept.c_str());
    std::fflush(stderr);
  }
  if (hang) {
    // Out of restarts: the hung worker is stopped and counts as the failure.
    for (auto& w : workers_)
      if (w.rank == hang->rank && w.running) kill(w.pid, SIGKILL);
    std::fprintf(stderr, "cann-train run: %s\n", hang->detail.c_str());
  }
  return false;
}

int LocalAgent::outcome() const {
  if (any_failure_) {
    // The cause: a worker that failed on its own (not stopped by the agent), preferring one
    // killed by a signal: survivors of a killed peer fail within milliseconds and may be seen
    // first, but they exit with an error that names the peer, not by a signal.
    const Worker* cause = nullptr;
    for (const Worker& o : workers_) {
      if (!failed(o.status) || o.stopped_by_agent) continue;
      const bool better =
          cause == nullptr || (WIFSIGNALED(o.status) && !WIFSIGNALED(cause->status)) ||
          (WIFSIGNALED(o.status) == WIFSIGNALED(cause->status) && o.exit_order < cause->exit_order);
      if (better) cause = &o;
    }
    if (cause == nullptr) cause = &workers_[0];
    const Worker& w = *cause;
    int stopped = 0;
    for (const auto& o : workers_) stopped += (&o != &w);
    const std::string after = config_.elastic && restarts_ > 0
                                  ? " after " + std::to_string(restarts_) + " restart" +
                                        (restarts_ == 1 ? "" : "s") + " (--max-restarts " +
                                        std::to_string(config_.max_restarts) + ")"
                                  : std::string();
    std::fprintf(stderr, "cann-train run: rank %d (pid %d) %s%s; the other %d worker%s stopped\n",
                 w.rank, static_cast<int>(w.pid), describe_exit(w.status).c_str(), after.c_str(),
                 stopped, stopped == 1 ? "" : "s");
    return WIFEXITED(w.status) && WEXITSTATUS(w.status) == 2 ? 2 : 1;
  }
  return interrupted_ ? 130 : 0;
}

}  // namespace cann::elastic
