// `cann-train scale`: changes the node bounds of a running multi-node elastic job through its
// store: once (--min-nodes/--max-nodes), or with --auto until interrupted, moving the bounds
// inside those given by measured signals (auto_scaler.h: a queue file, the job's throughput
// per node, time windows), with a cooldown. The job is named by --job/--rdzv, else by the
// environment a job's processes have (CANN_TRAIN_JOB, CANN_TRAIN_STORE), else found in this
// machine's job registry. The job's leader agent reacts at its next poll: below the current
// size, the surplus nodes stop at a step boundary and leave (exit 0); above it, waiting nodes
// are admitted; each change is a bounds_changed event with its reason.
#include <CLI/CLI.hpp>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <thread>

#include "cli/commands.h"
#include "cli/validators.h"
#include "comm/store.h"
#include "core/fs.h"
#include "debug/job_registry.h"
#include "elastic/auto_scaler.h"
#include "elastic/node_membership.h"
#include "monitor/snapshot.h"

namespace cann::cli {
namespace {

struct ScaleFlags {
  std::string job;
  std::string rdzv;
  int min_nodes = 0;
  int max_nodes = 0;
  bool auto_mode = false;
  std::string schedule;  // --auto FILE
  std::string queue;
  double min_node_tokens_per_s = 0;
  double cooldown_s = 300.0;
  double interval_s = 30.0;
};

std::atomic<int> g_scale_signal{0};
void on_scale_signal(int sig) {
  g_scale_signal = sig;
}

constexpr const char* kScaleFailure = "cann-train scale";

std::string clock_text() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

void say(const ScaleFlags& f, const std::string& line) {
  std::printf("%s job %s: %s\n", clock_text().c_str(), f.job.c_str(), line.c_str());
  std::fflush(stdout);
}

// The job and its store: the flags, else the environment, else this machine's registry.
Status resolve_job(ScaleFlags& f) {
  if (f.job.empty())
    if (const char* j = std::getenv("CANN_TRAIN_JOB")) f.job = j;
  if (f.rdzv.empty())
    if (const char* s = std::getenv("CANN_TRAIN_STORE")) f.rdzv = s;
  if (!f.job.empty() && !f.rdzv.empty()) return OkStatus();
  auto found = debug::find_job(f.job);
  if (!found.ok())
    return Status(found.status().code(),
                  "which job? " + found.status().message() +
                      "; hint: pass --job ID --rdzv URL (the run's --rdzv-id and --rdzv)");
  f.job = found->id;
  if (f.rdzv.empty()) f.rdzv = found->store_url;
  return OkStatus();
}

// The queue file holds the number of jobs waiting for nodes; nullopt while it cannot be read
// (said once per change of state by the caller's line).
StatusOr<int> read_queue(const std::string& path) {
  CANN_ASSIGN_OR_RETURN(std::string text, read_file(path));
  char* end = nullptr;
  const long n = std::strtol(text.c_str(), &end, 10);
  while (end != nullptr && (*end == ' ' || *end == '\n' || *end == '\t' || *end == '\r')) ++end;
  if (end == text.c_str() || (end != nullptr && *end != '\0') || n < 0)
    return InvalidArgument(path + ": expected the number of queued jobs (0 or more), got '" +
                           text.substr(0, 40) + "'");
  return static_cast<int>(n);
}

// Rank 0's last snapshot: the job's tokens/s per node, when fresh (a minute at most).
std::optional<double> node_throughput(comm::Store& store, const std::string& job, int nodes) {
  auto raw = store.try_get("cann/" + job + "/monitor/rank0");
  if (!raw.ok() || !raw->has_value() || nodes <= 0) return std::nullopt;
  auto snap = monitor::RankSnapshot::from_json(**raw);
  if (!snap.ok() || snap->tokens_per_s <= 0) return std::nullopt;
  const double age = static_cast<double>(std::time(nullptr)) - snap->time;
  if (age > 60.0) return std::nullopt;
  return snap->tokens_per_s / nodes;
}

int run_auto(comm::Store& store, ScaleFlags& f, elastic::AutoScaleConfig config) {
  g_scale_signal = 0;
  signal(SIGINT, on_scale_signal);
  signal(SIGTERM, on_scale_signal);
  elastic::AutoScaler scaler(std::move(config));
  std::string queue_problem;
  while (g_scale_signal == 0) {
    elastic::NodeRecord record;
    auto raw = store.try_get("cann/" + f.job + "/membership");
    auto bounds = elastic::get_node_bounds(store, f.job);
    if (raw.ok() && raw->has_value() && bounds.ok()) {
      auto parsed = elastic::parse_node_record(**raw);
      if (parsed.ok()) record = *parsed;
      if (record.state != elastic::JobState::kRunning) {
        say(f, "the job has ended; scaling stops");
        return 0;
      }
      elastic::ScaleSignals s;
      const std::time_t t = std::time(nullptr);
      std::tm tm{};
      localtime_r(&t, &tm);
      s.minute = tm.tm_hour * 60 + tm.tm_min;
      s.nodes = static_cast<int>(record.nodes.size());
      if (!f.queue.empty()) {
        auto q = read_queue(f.queue);
        const std::string problem = q.ok() ? "" : q.status().message();
        if (problem != queue_problem && !problem.empty())
          say(f, problem + "; the queue is not watched until it reads");
        queue_problem = problem;
        if (q.ok()) s.queued = *q;
      }
      if (f.min_node_tokens_per_s > 0) s.node_tokens_per_s = node_throughput(store, f.job, s.nodes);
      const double now = std::chrono::duration<double>(
                             std::chrono::steady_clock::now().time_since_epoch())
                             .count();
      auto change = scaler.decide(s, bounds->min_nodes, bounds->max_nodes, now);
      if (change) {
        auto old = elastic::set_node_bounds(store, f.job, change->min_nodes, change->max_nodes,
                                            change->reason);
        if (!old.ok() && old.status().code() == StatusCode::kFailedPrecondition) {
          say(f, old.status().message() + "; scaling stops");
          return 0;
        }
        if (!old.ok()) return fail_line(kScaleFailure, old.status());
        say(f, "nodes " + std::to_string(old->min_nodes) + ".." + std::to_string(old->max_nodes) +
                   " -> " + std::to_string(change->min_nodes) + ".." +
                   std::to_string(change->max_nodes) + ": " + change->reason);
      } else if (!scaler.held().empty()) {
        say(f, scaler.held());
      }
    } else if (raw.ok() && !raw->has_value()) {
      return fail_line(kScaleFailure,
                       NotFound("no elastic job '" + f.job + "' at " + store.address() +
                                " (no membership record); hint: --job is the run's --rdzv-id"));
    }
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(static_cast<long>(f.interval_s * 1000));
    while (g_scale_signal == 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

}  // namespace

CommandMain add_scale_command(CLI::App& app) {
  auto f = std::make_shared<ScaleFlags>();
  CLI::App* scale = app.add_subcommand(
      "scale", "Change the node bounds of a running elastic job (--elastic --nnodes MIN:MAX)");
  scale->add_option("--job", f->job,
                    "The job: the run's --rdzv-id (default: $CANN_TRAIN_JOB, else the one job "
                    "running on this machine)");
  scale->add_option("--rdzv", f->rdzv,
                    "The job's store: redis://[:PASSWORD@]HOST:PORT (default: $CANN_TRAIN_STORE, "
                    "else the job's, from this machine's job registry)");
  scale->add_option("--min-nodes", f->min_nodes,
                    "Lower bound on the nodes (with --auto: the least any decision sets)")
      ->check(kPositive);
  scale->add_option("--max-nodes", f->max_nodes,
                    "Upper bound on the nodes (with --auto: the most any decision sets)")
      ->check(kPositive);
  scale->add_option("--auto", f->schedule,
                    "Keep scaling until interrupted, on the signals below; an optional FILE of "
                    "time windows (YAML/JSON list of {from, to, min_nodes, max_nodes})")
      ->expected(0, 1);
  scale->add_option("--queue", f->queue,
                    "--auto: a file holding the number of jobs waiting for nodes (more than 0: "
                    "yield down to --min-nodes; 0: up to --max-nodes)");
  scale->add_option("--min-node-throughput", f->min_node_tokens_per_s,
                    "--auto: tokens/s per node under which the job sheds a node (above 1.25x "
                    "it may take one more)")
      ->check(kPositive);
  scale->add_option("--cooldown", f->cooldown_s, "--auto: seconds between two changes")
      ->check(kNonNegative)
      ->capture_default_str();
  scale->add_option("--interval", f->interval_s, "--auto: seconds between two looks at the signals")
      ->check(kPositive)
      ->capture_default_str();
  return [f, scale]() -> int {
    f->auto_mode = scale->count("--auto") > 0;
    const bool signals = !f->queue.empty() || f->min_node_tokens_per_s > 0;
    if (signals && !f->auto_mode) {
      std::fprintf(stderr,
                   "cann-train scale: --queue and --min-node-throughput are signals for --auto; "
                   "hint: add --auto\n");
      return 2;
    }
    if (f->auto_mode && f->schedule.empty() && !signals) {
      std::fprintf(stderr,
                   "cann-train scale: --auto needs something to act on: a window FILE, --queue "
                   "FILE or --min-node-throughput T\n");
      return 2;
    }
    if (!f->auto_mode && (f->min_nodes == 0 || f->max_nodes == 0)) {
      std::fprintf(stderr,
                   "cann-train scale: give --min-nodes and --max-nodes, or --auto; hint: see "
                   "'cann-train scale --help'\n");
      return 2;
    }
    if (f->min_nodes > 0 && f->max_nodes > 0 && f->min_nodes > f->max_nodes) {
      std::fprintf(stderr,
                   "cann-train scale: --min-nodes %d is above --max-nodes %d; hint: 1 <= min <= "
                   "max\n",
                   f->min_nodes, f->max_nodes);
      return 2;
    }
    // A bad policy is a usage error before any store is needed.
    elastic::AutoScaleConfig config;
    if (!f->schedule.empty()) {
      auto loaded = elastic::load_scale_policy(f->schedule);
      if (!loaded.ok()) return fail_line(kScaleFailure, loaded.status());
      config.windows = std::move(*loaded);
    }
    if (Status s = resolve_job(*f); !s.ok()) return fail_line(kScaleFailure, s);
    auto store = comm::open_store(f->rdzv, std::chrono::seconds(5));
    if (!store.ok())
      return fail_line(kScaleFailure,
                       IoError("cannot reach the job's store: " + store.status().message()));
    if (!f->auto_mode) {
      elastic::NodeRecord record;
      auto old = elastic::set_node_bounds(**store, f->job, f->min_nodes, f->max_nodes, "scale",
                                          &record);
      if (!old.ok()) return fail_line(kScaleFailure, old.status());
      say(*f, "nodes " + std::to_string(old->min_nodes) + ".." + std::to_string(old->max_nodes) +
                  " -> " + std::to_string(f->min_nodes) + ".." + std::to_string(f->max_nodes) +
                  " (generation " + std::to_string(record.generation) + " runs on " +
                  std::to_string(record.nodes.size()) + " node" +
                  (record.nodes.size() == 1 ? "" : "s") + ")");
      return 0;
    }
    // The bounds every decision stays inside: the flags, else the job's launch range.
    auto launch = elastic::get_node_bounds(**store, f->job);
    if (!launch.ok()) return fail_line(kScaleFailure, launch.status());
    config.min_nodes = f->min_nodes > 0 ? f->min_nodes
                                        : (launch->launch_min > 0 ? launch->launch_min : 1);
    config.max_nodes = f->max_nodes > 0 ? f->max_nodes
                                        : (launch->launch_max > 0 ? launch->launch_max
                                                                  : launch->max_nodes);
    if (Status s = elastic::check_launch_range(*launch, f->job, config.min_nodes,
                                               config.max_nodes);
        !s.ok())
      return fail_line(kScaleFailure, s);
    if (config.min_nodes > config.max_nodes) {
      std::fprintf(stderr, "cann-train scale: --min-nodes %d is above the job's %d nodes at most\n",
                   config.min_nodes, config.max_nodes);
      return 2;
    }
    config.min_node_tokens_per_s = f->min_node_tokens_per_s;
    config.cooldown_s = f->cooldown_s;
    return run_auto(**store, *f, std::move(config));
  };
}

}  // namespace cann::cli
