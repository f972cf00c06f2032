// The agent's process management: fork/exec of workers with their environment, output
// forwarding through poll(), exit-status supervision, and the stop-the-rest policy.
#include "elastic/agent.h"

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
  const int P = config.nproc_per_node;
  if (config.elastic && config.max_nodes > 1) return run_node_agent(config);
  std::string job = config.rdzv_id.empty() ? random_id() : config.rdzv_id;
  std::string store_url = config.rdzv;
  std::string temp_dir;
  NodeAssignment node;
  if (config.nnodes > 1) {
    if (store_url.empty())
      return InvalidArgument("--nnodes " + std::to_string(config.nnodes) +
                             " needs --rdzv redis://HOST:PORT so the nodes can find each other");
    CANN_ASSIGN_OR_RETURN(auto store, comm::open_store(store_url));
    CANN_ASSIGN_OR_RETURN(node, join_nodes(*store, job, config.nnodes, config.rdzv_timeout_s));
  } else {
    if (store_url.empty()) {
      std::string templ = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                          "/cann-train-XXXXXX";
      std::vector<char> buf(templ.begin(), templ.end());
      buf.push_back('\0');
      if (mkdtemp(buf.data()) == nullptr)
        return IoError(templ +
                       ": cannot create the job's store directory: " + std::strerror(errno));
      temp_dir = buf.data();
      store_url = "file://" + temp_dir + "/store";
    }
    node.job_prefix = job + "/round0";
  }
  const std::string comm_addr =
      !config.comm_addr.empty() ? config.comm_addr : local_address_towards(store_url);
  const int world = config.nnodes * P;
  const int threads_per_worker = std::max(1, hardware_threads() / P);
  const bool tty = isatty(1) != 0;

  // Node 0 gathers and serves the job's metrics.
  std::unique_ptr<monitor::JobMonitor> job_monitor;
  if (config.monitor && node.node_rank == 0) {
    CANN_ASSIGN_OR_RETURN(std::shared_ptr<comm::Store> store, comm::open_store(store_url));
    monitor::JobMonitorConfig mc;
    mc.job = node.job_prefix;
    mc.world_size = world;
    mc.server = config.monitor_server;
    mc.alerts = config.alerts;
    mc.get = [store](const std::string& key) -> StatusOr<std::string> {
      CANN_ASSIGN_OR_RETURN(auto v, store->try_get(key));
      if (!v) return NotFound(key);
      return *v;
    };
    mc.snapshot_prefix = "cann/" + node.job_prefix + "/monitor";
    CANN_ASSIGN_OR_RETURN(job_monitor, monitor::JobMonitor::start(std::move(mc)));
    std::printf("dashboard: %s\n", job_monitor->url().c_str());
    std::fflush(stdout);
  }

  // Let `cann-train debug hang --job ID` find this job's store.
  const std::string job_id = job;
  (void)debug::register_job(
      {job_id, store_url, node.job_prefix, world, static_cast<int>(getpid())});
  struct Unregister {
    std::string id;
    ~Unregister() { debug::unregister_job(id); }
  } unregister{job_id};

  g_agent_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_agent_signal;
  struct sigaction old_int {
  }, old_term{};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);

  // Elastic state: snapshots in memory, events, heartbeats, the membership record.
  std::string snapshot_root;
  std::shared_ptr<comm::Store> store;
  EventLog events;
  std::unique_ptr<HeartbeatMonitor> heartbeats;
  const std::string job_keys = "cann/" + node.job_prefix;
  if (config.elastic) {
    CANN_ASSIGN_OR_RETURN(snapshot_root, make_snapshot_root(job));
    CANN_ASSIGN_OR_RETURN(store, comm::open_store(store_url));
    CANN_RETURN_IF_ERROR(events.open(config.log_json));
    heartbeats = std::make_unique<HeartbeatMonitor>(job_keys, config.heartbeat_timeout_s,
                                                    config.start_timeout_s);
  }
  struct RemoveSnapshots {
    const std::string& root;
    ~RemoveSnapshots() {
      if (!root.empty()) (void)remove_all(root);
    }
  } remove_snapshots{snapshot_root};
  int generation = 0;
  int restarts = 0;

  std::vector<Worker> workers(P);
  // Starts local worker l of the current generation (a replacement loads plan's copies).
  auto spawn_worker = [&](int l, const ckpt::ReplicaPlan* plan) -> Status {
    {
      Worker& w = workers[l];
      w = Worker();
      w.local_rank = l;
      w.rank = node.node_rank * P + l;
      std::vector<std::string> env = {
          "RANK=" + std::to_string(w.rank),
          "WORLD_SIZE=" + std::to_string(world),
          "LOCAL_RANK=" + std::to_string(l),
          "LOCAL_WORLD_SIZE=" + std::to_string(P),
          "GROUP_RANK=" + std::to_string(node.node_rank),
          "CANN_TRAIN_STORE=" + store_url,
          "CANN_TRAIN_JOB=" + node.job_prefix,
          "CANN_TRAIN_HOST_ID=" + job + "/node" + std::to_string(node.node_rank),
          "CANN_TRAIN_COMM_ADDR=" + comm_addr,
          "CANN_TRAIN_BACKEND=" + config.backend,
          "CANN_TRAIN_DEFAULT_THREADS=" + std::to_string(threads_per_worker),
          "CANN_TRAIN_TTY=" + std::string(tty && w.rank == 0 ? "1" : "0"),
          "CANN_TRAIN_MONITOR=" + std::string(config.monitor ? "1" : "0"),
      };
      if (config.elastic) {
        char interval[32];
        std::snprintf(interval, sizeof(interval), "%g", config.heartbeat_interval_s);
        env.push_back("CANN_TRAIN_GENERATION=" + std::to_string(generation));
        env.push_back("CANN_TRAIN_SNAPSHOT_DIR=" + snapshot_root);
        env.push_back("CANN_TRAIN_SNAPSHOT_EVERY=" + std::to_string(config.snapshot_every));
        env.push_back(std::string("CANN_TRAIN_HEARTBEAT_INTERVAL=") + interval);
        if (plan != nullptr && plan->step >= 0)
          env.push_back("CANN_TRAIN_RESTORE_FROM=" + plan->candidates[w.rank]);
      }
      CANN_RETURN_IF_ERROR(start_worker(w, config.worker_args, env, config.plain_rank0_stdout));
    }
    return OkStatus();
  };
  // The membership record: which generation is current, who is in it, and which snapshot copies
  // each rank loads (survivors read theirs here; replacements get them in the environment).
  auto publish_membership = [&](const ckpt::ReplicaPlan* plan) -> Status {
    std::string members, restore;
    for (int r = 0; r < world; ++r) {
      if (!restore.empty()) restore += ",";
      restore += "\"" +
                 (plan != nullptr && plan->step >= 0 ? plan->candidates[r] : std::string()) + "\"";
    }
    for (const Worker& w : workers) {
      if (!members.empty()) members += ",";
      members += "{\"rank\":" + std::to_string(w.rank) + ",\"pid\":" + std::to_string(w.pid) +
                 ",\"node\":" + std::to_string(node.node_rank) + "}";
    }
    CANN_RETURN_IF_ERROR(store->set(job_keys + "/membership",
                                    "{\"generation\":" + std::to_string(generation) +
                                        ",\"world_size\":" + std::to_string(world) +
                                        ",\"members\":[" + members + "],\"restore_step\":" +
                                        std::to_string(plan != nullptr ? plan->step : -1) +
                                        ",\"restore_from\":[" + restore + "]}"));
    heartbeats->start_generation(generation, world, now_seconds());
    return OkStatus();
  };
  for (int l = 0; l < P; ++l) CANN_RETURN_IF_ERROR(spawn_worker(l, nullptr));
  if (config.elastic) CANN_RETURN_IF_ERROR(publish_membership(nullptr));
  bool rendezvous_pending = config.elastic;
  double failure_at = 0.0;  // steady time the last failure was detected

  // Elastic recovery. The failed worker is replaced by a fresh process; the survivors keep
  // theirs: their collectives fail on the lost peer, they wait for the new generation in the
  // membership record and load the committed step from their own snapshot. With `whole`
  // (a hang that cannot be pinned on one rank) every worker of the node is replaced.
  auto restart_generation = [&](int rank, const std::string& cause, bool whole) -> Status {
    failure_at = now_seconds();
    (void)events.append({"failure_detected", unix_seconds(), rank, generation, cause});
    if (job_monitor)
      job_monitor->hub().add_event({unix_seconds(), "failure_detected", rank, cause});
    for (auto& w : workers)
      if (w.running && (whole || w.rank == rank)) kill(w.pid, SIGKILL);
    int replaced = 0;
    for (auto& w : workers) {
      if (w.running && (whole || w.rank == rank)) {
        waitpid(w.pid, &w.status, 0);
        w.running = false;
      }
      if (w.running) continue;
      drain(w);
      ++replaced;
    }
    ++generation;
    ++restarts;
    const ckpt::ReplicaPlan plan = ckpt::plan_replica_restore(snapshot_root, world);
    const std::string from =
        plan.step >= 0 ? "the in-memory snapshot of step " + std::to_string(plan.step)
                       : std::string("the newest disk checkpoint (no snapshot survived)");
    std::fprintf(stderr,
                 "cann-train run: %s; restart %d of %d: generation %d replaces %d worker%s and "
                 "resumes from %s\n",
                 cause.c_str(), restarts, config.max_restarts, generation, replaced,
                 replaced == 1 ? "" : "s", from.c_str());
    std::fflush(stderr);
    rendezvous_pending = true;
    CANN_RETURN_IF_ERROR(publish_membership(&plan));
    for (int l = 0; l < P; ++l)
      if (!workers[l].running) CANN_RETURN_IF_ERROR(spawn_worker(l, &plan));
    return OkStatus();
  };

  bool any_failure = false;
  double settle_deadline = 0.0;
  int exits = 0;
  double stop_deadline = 0.0;
  bool interrupted = false;
  auto stop_others = [&](int sig) {
    for (auto& w : workers) {
      if (!w.running) continue;
      kill(w.pid, sig);
      w.stopped_by_agent = true;
    }
  };
  while (true) {
    pump_all(workers, 50);
    if (job_monitor && job_monitor->stop_requested() && g_agent_signal == 0)
      g_agent_signal = SIGTERM;
    if (g_agent_signal != 0 && !interrupted) {
      interrupted = true;
      stop_others(SIGTERM);
      stop_deadline = now_seconds() + config.grace_s;
    }
    bool failure_seen = false;
    const Worker* first_failed = nullptr;
    for (auto& w : workers) {
      if (!w.running) continue;
      int status = 0;
      if (waitpid(w.pid, &status, WNOHANG) != w.pid) continue;
      w.running = false;
      w.status = status;
      w.exit_order = exits++;
      failure_seen |= failed(status);
      // The cause, when several exit at once: a worker killed by a signal over its survivors.
      if (failed(status) && (first_failed == nullptr ||
                             (WIFSIGNALED(status) && !WIFSIGNALED(first_failed->status))))
        first_failed = &w;
      if (job_monitor && failed(status))
        job_monitor->hub().add_event(
            {unix_seconds(), "worker_exited", w.rank, describe_exit(status)});
    }
    if (config.elastic && !interrupted && !any_failure) {
      std::optional<HeartbeatFailure> hang;
      if (!failure_seen) {
        std::vector<bool> running;
        for (const auto& w : workers) running.push_back(w.running);
        hang = heartbeats->poll(*store, running, now_seconds());
        if (rendezvous_pending && heartbeats->all_joined()) {
          rendezvous_pending = false;
          std::string detail = "generation " + std::to_string(generation) + ": " +
                               std::to_string(world) + " workers joined";
          if (generation > 0)
            detail += ", " + seconds_text(now_seconds() - failure_at) + " after the failure";
          (void)events.append({"rendezvous_complete", unix_seconds(), -1, generation, detail});
        }
      }
      // A usage error (exit 2) is the same in every generation: no restart for it.
      const bool usage_error = failure_seen && WIFEXITED(first_failed->status) &&
                               WEXITSTATUS(first_failed->status) == 2;
      // A stopped worker may hold a lock of the file store that the others' heartbeats wait
      // on, so theirs go stale too: the stopped process is the one to blame.
      if (hang && hang->verdict == HeartbeatVerdict::kStale) {
        for (const auto& w : workers)
          if (w.running && process_stopped(w.pid)) {
            hang->rank = w.rank;
            hang->detail = "rank " + std::to_string(w.rank) + " (pid " + std::to_string(w.pid) +
                           ") is stopped: its heartbeat is stale";
            break;
          }
      }
      if ((failure_seen || hang) && !usage_error && restarts < config.max_restarts) {
        const int rank = hang ? hang->rank : first_failed->rank;
        const std::string cause =
            hang ? hang->detail
                 : "rank " + std::to_string(first_failed->rank) + " (pid " +
                       std::to_string(first_failed->pid) + ") " +
                       describe_exit(first_failed->status);
        // A worker that beats but makes no progress may only be waiting on the hung one:
        // replace them all. A dead or silent worker is replaced alone.
        const bool whole = hang && hang->verdict == HeartbeatVerdict::kNoProgress;
        CANN_RETURN_IF_ERROR(restart_generation(rank, cause, whole));
        continue;
      }
      if (hang) {
        // Out of restarts: the hung worker is stopped and counts as the failure.
        for (auto& w : workers)
          if (w.rank == hang->rank && w.running) kill(w.pid, SIGKILL);
        std::fprintf(stderr, "cann-train run: %s\n", hang->detail.c_str());
      }
    }
    // After the first failure, let exits settle for a moment before stopping the rest: the
    // workers that fail on their own (a killed peer's survivors, which fail within
    // milliseconds) then count as failures, not as workers the agent stopped, and the cause
    // can be told from its consequences.
    if (failure_seen && !any_failure && !interrupted) {
      any_failure = true;
      settle_deadline = now_seconds() + kSettleSeconds;
    }
    if (settle_deadline > 0 && now_seconds() > settle_deadline) {
      settle_deadline = 0;
      stop_others(SIGTERM);
      stop_deadline = now_seconds() + config.grace_s;
    }
    if (stop_deadline > 0 && now_seconds() > stop_deadline) stop_others(SIGKILL);
    bool any_running = false, any_open = false;
    for (auto& w : workers) {
      any_running |= w.running;
      any_open |= w.out_fd >= 0 || w.err_fd >= 0;
    }
    if (!any_running && !any_open) break;
    if (!any_running && stop_deadline == 0) stop_deadline = now_seconds() + 1.0;  // drain pipes
  }
  for (auto& w : workers) {
    w.out->finish();
    w.err->finish();
  }
  if (job_monitor) job_monitor->finish();
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  if (!temp_dir.empty()) (void)remove_all(temp_dir);

  if (any_failure) {
    // The cause: a worker that failed on its own (not stopped by the agent), preferring one
    // killed by a signal: survivors of a killed peer fail within milliseconds and may be seen
    // first, but they exit with an error that names the peer, not by a signal.
    const Worker* cause = nullptr;
    for (const Worker& o : workers) {
      if (!failed(o.status) || o.stopped_by_agent) continue;
      const bool better =
          cause == nullptr || (WIFSIGNALED(o.status) && !WIFSIGNALED(cause->status)) ||
          (WIFSIGNALED(o.status) == WIFSIGNALED(cause->status) && o.exit_order < cause->exit_order);
      if (better) cause = &o;
    }
    if (cause == nullptr) cause = &workers[0];
    const Worker& w = *cause;
    int stopped = 0;
    for (const auto& o : workers) stopped += (&o != &w);
    const std::string after =
        config.elastic && restarts > 0 ? " after " + std::to_string(restarts) + " restart" +
                             (restarts == 1 ? "" : "s") + " (--max-restarts " +
                             std::to_string(config.max_restarts) + ")"
                       : std::string();
    std::fprintf(stderr, "cann-train run: rank %d (pid %d) %s%s; the other %d worker%s stopped\n",
                 w.rank, static_cast<int>(w.pid), describe_exit(w.status).c_str(), after.c_str(),
                 stopped, stopped == 1 ? "" : "s");
    return WIFEXITED(w.status) && WEXITSTATUS(w.status) == 2 ? 2 : 1;
  }
  if (interrupted) return 130;
  return 0;
}

}  // namespace cann::elastic
