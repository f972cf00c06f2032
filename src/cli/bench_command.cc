// `cann-train bench`: measurements of this machine and of cann-train's own components, each
// validated and set beside a peer. Subcommands: comm, calibrate, plan-vs-real.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/bench_calibrate.h"
#include "cli/bench_comm.h"
#include "cli/bench_plan_vs_real.h"
#include "cli/commands.h"
#include "cli/validators.h"
#include "core/threads.h"
#include "elastic/agent.h"
#include "train/dist_env.h"

namespace cann::cli {
namespace {

std::vector<std::string> split_list(const std::string& text, const std::vector<std::string>& all) {
  if (text == "all") return all;
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    out.push_back(
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

CommandMain add_bench_command(CLI::App& app, std::vector<std::string> argv_after_binary) {
  CLI::App* bench =
      app.add_subcommand("bench", "Benchmarks: validated, beside a peer, with ratios");
  bench->require_subcommand(1);

  struct CommFlags {
    int nproc = 2;
    std::string backend = "all";
    std::string op = "allreduce";
    std::string sizes = "4K:256M";
    int factor = 4;
    bool json = false;
    double timeout_s = 60.0;
    double seconds_per_size = 0.2;
  };
  auto f = std::make_shared<CommFlags>();
  CLI::App* comm = bench->add_subcommand(
      "comm",
      "Collective bandwidth (nccl-tests style: size, time, algbw, busbw) of shm, gloo and "
      "hierarchical, beside raw Gloo's ring all-reduce");
  comm->add_option("--nproc", f->nproc, "Processes on this machine")
      ->check(kPositive)
      ->capture_default_str();
  comm->add_option("--backend", f->backend, "shm, gloo, hierarchical, a comma list, or all")
      ->capture_default_str();
  comm->add_option("--op", f->op,
                   "allreduce, allgather, reduce_scatter, alltoall, a comma list, or all")
      ->capture_default_str();
  comm->add_option("--sizes", f->sizes, "Buffer sizes MIN:MAX in bytes (K, M, G suffixes)")
      ->capture_default_str();
  comm->add_option("--factor", f->factor, "Size step multiplier")
      ->check(CLI::Range(2, 1024))
      ->capture_default_str();
  comm->add_option("--seconds-per-size", f->seconds_per_size, "Timing budget per size")
      ->check(kPositive)
      ->capture_default_str();
  comm->add_option("--comm-timeout", f->timeout_s, "Seconds to wait for a peer")
      ->check(kPositive)
      ->capture_default_str();
  comm->add_flag("--json", f->json,
                 "Print a JSON list of {backend, op, nproc, size_bytes, time_s, algbw_GBps, "
                 "busbw_GBps}");

  struct CalibrateFlags {
    int nproc = 0;
    std::string output;
    bool accept_busy = false;
  };
  auto cf = std::make_shared<CalibrateFlags>();
  CLI::App* calibrate = bench->add_subcommand(
      "calibrate",
      "Measure this machine (GEMM rate, memory bandwidth, collective bandwidth and latency) and "
      "write the cluster spec 'local' for the planner");
  calibrate->add_option("--nproc", cf->nproc, "Devices (processes of one thread); default: cores")
      ->check(kNonNegative);
  calibrate->add_option("--output", cf->output,
                        "Where to write the spec (default: $CANN_TRAIN_HOME/clusters/local.yaml, "
                        "$CANN_TRAIN_HOME defaulting to ~/.cann-train)");
  calibrate->add_flag("--accept-busy", cf->accept_busy,
                      "Write the spec even when the machine is busy (marked measured under load)");

  auto [plan_vs_real, plan_vs_real_main] = add_plan_vs_real_command(bench);

  return [bench, comm, calibrate, plan_vs_real, plan_vs_real_main, f, cf,
          argv_after_binary]() -> int {
    auto fail = [](const Status& s) {
      std::fprintf(stderr, "cann-train bench: error: %s\n", s.message().c_str());
      return s.exit_code();
    };
    if (plan_vs_real->parsed()) return plan_vs_real_main();
    auto env = train::detect_dist_env();
    if (!env.ok()) return fail(env.status());
    if (calibrate->parsed()) {
      if (!env->has_value())
        return run_calibrate_agent(cf->nproc, cf->accept_busy, argv_after_binary);
      Status s = run_calibrate_worker(**env, cf->output, cf->accept_busy);
      return s.ok() ? 0 : fail(s);
    }
    if (!comm->parsed()) return 2;
    CommBenchConfig c;
    c.backends = split_list(f->backend, {"shm", "gloo", "hierarchical"});
    c.ops = split_list(f->op, {"allreduce", "allgather", "reduce_scatter", "alltoall"});
    for (const auto& b : c.backends)
      if (b != "shm" && b != "gloo" && b != "hierarchical")
        return fail(InvalidArgument("--backend: unknown backend '" + b +
                                    "'; hint: use shm, gloo, hierarchical or all"));
    for (const auto& o : c.ops)
      if (o != "allreduce" && o != "allgather" && o != "reduce_scatter" && o != "alltoall")
        return fail(InvalidArgument("--op: unknown collective '" + o +
                                    "'; hint: use allreduce, allgather, reduce_scatter, "
                                    "alltoall or all"));
    Status s = parse_size_range(f->sizes, &c.min_bytes, &c.max_bytes);
    if (!s.ok()) return fail(s);
    c.factor = f->factor;
    c.json = f->json;
    c.timeout_s = f->timeout_s;
    c.seconds_per_size = f->seconds_per_size;
    if (!env->has_value()) {
      elastic::AgentConfig ac;
      ac.nproc_per_node = f->nproc;
      ac.worker_args = argv_after_binary;
      ac.plain_rank0_stdout = true;
      auto code = elastic::run_agent(ac);
      if (!code.ok()) return fail(code.status());
      return *code;
    }
    s = run_comm_bench_worker(c, **env);
    if (!s.ok()) return fail(s);
    return 0;
  };
}

}  // namespace cann::cli
