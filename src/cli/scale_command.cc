// `cann-train scale`: changes the node bounds of a running multi-node elastic job through its
// store, once (--min-nodes/--max-nodes) or by a time-window policy (--auto FILE) until
// interrupted. The job's leader agent reacts at its next poll: below the current size, the
// surplus nodes stop at a step boundary and leave (exit 0); above it, waiting nodes are admitted.
#include <CLI/CLI.hpp>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <thread>

#include "cli/commands.h"
#include "cli/validators.h"
#include "comm/store.h"
#include "elastic/node_membership.h"
#include "elastic/scale_policy.h"

namespace cann::cli {
namespace {

struct ScaleFlags {
  std::string job;
  std::string rdzv;
  int min_nodes = 0;
  int max_nodes = 0;
  std::string policy;
  double interval_s = 30.0;
};

std::atomic<int> g_scale_signal{0};
void on_scale_signal(int sig) {
  g_scale_signal = sig;
}

int fail(const Status& s) {
  std::fprintf(stderr, "cann-train scale: %s\n", s.message().c_str());
  return s.exit_code();
}

std::string clock_text() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// Applies one change and prints it as a line; returns the exit status for an error, else 0.
int apply(comm::Store& store, const ScaleFlags& f, int min_nodes, int max_nodes,
          const std::string& why) {
  elastic::NodeRecord record;
  auto old = elastic::set_node_bounds(store, f.job, min_nodes, max_nodes, &record);
  if (!old.ok()) return fail(old.status());
  std::printf("%s job %s: nodes %d..%d -> %d..%d (generation %d runs on %zu node%s)%s\n",
              clock_text().c_str(), f.job.c_str(), old->min_nodes, old->max_nodes, min_nodes,
              max_nodes, record.generation, record.nodes.size(),
              record.nodes.size() == 1 ? "" : "s", why.c_str());
  std::fflush(stdout);
  return 0;
}

int run_policy(comm::Store& store, const ScaleFlags& f,
               const std::vector<elastic::ScaleWindow>& policy) {
  g_scale_signal = 0;
  signal(SIGINT, on_scale_signal);
  signal(SIGTERM, on_scale_signal);
  std::optional<size_t> applied;
  bool first = true;
  while (g_scale_signal == 0) {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    const auto window = elastic::window_in_force(policy, tm.tm_hour * 60 + tm.tm_min);
    if (window && (first || window != applied)) {
      const elastic::ScaleWindow& w = policy[*window];
      auto s = elastic::set_node_bounds(store, f.job, w.min_nodes, w.max_nodes);
      if (!s.ok() && s.status().code() == StatusCode::kFailedPrecondition) {
        std::printf("%s job %s: %s; the policy stops\n", clock_text().c_str(), f.job.c_str(),
                    s.status().message().c_str());
        return 0;
      }
      if (!s.ok()) return fail(s.status());
      std::printf("%s job %s: window %s in force: nodes %d..%d -> %d..%d\n", clock_text().c_str(),
                  f.job.c_str(), w.text.c_str(), s->min_nodes, s->max_nodes, w.min_nodes,
                  w.max_nodes);
      std::fflush(stdout);
      applied = window;
    } else if (!window && (first || applied)) {
      std::printf("%s job %s: no window in force; bounds left as they are\n", clock_text().c_str(),
                  f.job.c_str());
      std::fflush(stdout);
      applied.reset();
    }
    first = false;
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(static_cast<long>(f.interval_s * 1000));
    while (g_scale_signal == 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return 0;
}

}  // namespace

CommandMain add_scale_command(CLI::App& app) {
  auto f = std::make_shared<ScaleFlags>();
  CLI::App* scale = app.add_subcommand(
      "scale", "Change the node bounds of a running elastic job (--elastic --nnodes MIN:MAX)");
  scale->add_option("--job", f->job, "The job: the run's --rdzv-id")->required();
  scale->add_option("--rdzv", f->rdzv, "The job's store: redis://[:PASSWORD@]HOST:PORT")
      ->required();
  scale->add_option("--min-nodes", f->min_nodes, "New lower bound on the nodes")->check(kPositive);
  scale->add_option("--max-nodes", f->max_nodes, "New upper bound on the nodes")->check(kPositive);
  scale->add_option("--auto", f->policy,
                    "Time-window policy file (YAML/JSON list of {from, to, min_nodes, "
                    "max_nodes}); applied until interrupted");
  scale->add_option("--interval", f->interval_s, "Seconds between policy checks (--auto)")
      ->check(kPositive)
      ->capture_default_str();
  return [f]() -> int {
    const bool manual = f->min_nodes > 0 || f->max_nodes > 0;
    if (manual == !f->policy.empty()) {
      std::fprintf(stderr,
                   "cann-train scale: give either --min-nodes and --max-nodes, or --auto FILE; "
                   "hint: see 'cann-train scale --help'\n");
      return 2;
    }
    if (manual && (f->min_nodes == 0 || f->max_nodes == 0 || f->min_nodes > f->max_nodes)) {
      std::fprintf(stderr,
                   "cann-train scale: --min-nodes %d --max-nodes %d: both are needed, with "
                   "1 <= min <= max\n",
                   f->min_nodes, f->max_nodes);
      return 2;
    }
    // A bad policy is a usage error before any store is needed.
    std::vector<elastic::ScaleWindow> policy;
    if (!manual) {
      auto loaded = elastic::load_scale_policy(f->policy);
      if (!loaded.ok()) return fail(loaded.status());
      policy = std::move(*loaded);
    }
    auto store = comm::open_store(f->rdzv, std::chrono::seconds(5));
    if (!store.ok())
      return fail(IoError("cannot reach the job's store: " + store.status().message()));
    if (manual) return apply(**store, *f, f->min_nodes, f->max_nodes, "");
    return run_policy(**store, *f, policy);
  };
}

}  // namespace cann::cli
