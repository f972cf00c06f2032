// `cann-train bench`: measurements of this machine and of cann-train's own components, each
// validated and set beside a peer. Subcommands: comm, calibrate, tune, plan-vs-real.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/bench_calibrate.h"
#include "cli/bench_comm.h"
#include "cli/bench_plan_vs_real.h"
#include "cli/bench_tune.h"
#include "cli/commands.h"
#include "cli/launch_flags.h"
#include "cli/validators.h"
#include "core/threads.h"
#include "elastic/agent.h"
#include "model/spec.h"
#include "train/dist_env.h"
#include "train/run_layout.h"

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
    int repeat = 3;
  };
  auto f = std::make_shared<CommFlags>();
  CLI::App* comm = bench->add_subcommand(
      "comm",
      "Collective bandwidth (nccl-tests style: size, time, algbw, busbw) of shm, gloo and "
      "hierarchical, beside raw Gloo's ring all-reduce (target: the shm all-reduce at 64 MiB at "
      "least 3x raw Gloo's bus bandwidth; exit 1 when missed)");
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
  comm->add_option("--seconds-per-size", f->seconds_per_size, "Timing budget per size and repeat")
      ->check(kPositive)
      ->capture_default_str();
  comm->add_option("--repeat", f->repeat,
                   "Timings per size: the table shows their median and min..max")
      ->check(kPositive)
      ->capture_default_str();
  comm->add_option("--comm-timeout", f->timeout_s, "Seconds to wait for a peer")
      ->check(kPositive)
      ->capture_default_str();
  comm->add_flag("--json", f->json,
                 "Print a JSON list of {backend, op, nproc, size_bytes, time_s, time_min_s, "
                 "time_max_s, algbw_GBps, busbw_GBps, busbw_vs_raw_gloo}");

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

  struct TuneFlags : RendezvousFlags {
    TuneConfig config;
    int nproc_per_node = 2;
    int nnodes = 1;
    std::string sizes = "4K:64M";
    std::string channels = "1,2,4";
    std::string buckets = "1,2,4,8,16,25,64";
  };
  auto tf = std::make_shared<TuneFlags>();
  CLI::App* tune = bench->add_subcommand(
      "tune",
      "Measure this job's collectives under every setting (backend, Gloo channels, split size, "
      "all-reduce algorithm by size) and the bucket size against the model's backward; write "
      "comm.yaml for `run --comm-config`");
  tune->add_option("--nproc-per-node", tf->nproc_per_node, "Processes on this node")
      ->check(kPositive)
      ->capture_default_str();
  tune->add_option("--nnodes", tf->nnodes, "Nodes (one `cann-train bench tune` per node)")
      ->check(kPositive)
      ->capture_default_str();
  add_rendezvous_flags(tune, tf.get(), "");
  tune->add_option("--transport", tf->config.transport,
                   "Gloo transport between nodes: tcp, ibverbs")
      ->check(CLI::IsMember({"tcp", "ibverbs"}))
      ->capture_default_str();
  tune->add_option("--sizes", tf->sizes, "All-reduce sizes MIN:MAX in bytes (K, M, G suffixes)")
      ->capture_default_str();
  tune->add_option("--factor", tf->config.factor, "Size step multiplier")
      ->check(CLI::Range(2, 1024))
      ->capture_default_str();
  tune->add_option("--seconds-per-size", tf->config.seconds_per_size,
                   "Timing budget per setting and size")
      ->check(kPositive)
      ->capture_default_str();
  tune->add_option("--channels", tf->channels, "Gloo channel counts to try, a comma list")
      ->capture_default_str();
  tune->add_option("--buckets", tf->buckets, "Bucket sizes in MiB to train with, a comma list")
      ->capture_default_str();
  tune->add_option("--bucket-steps", tf->config.bucket_steps,
                   "Steps per bucket size (0: leave the bucket size to run)")
      ->check(kNonNegative)
      ->capture_default_str();
  tune->add_option("--model", tf->config.train.model, "Model the bucket sizes are timed with")
      ->capture_default_str();
  tune->add_option("--data", tf->config.train.data, "Data the bucket trials read")
      ->capture_default_str();
  tune->add_option("--batch-size", tf->config.train.batch_size, "Global batch of the trials")
      ->check(kPositive)
      ->capture_default_str();
  tune->add_option("--seq-len", tf->config.train.seq_len, "Sequence length (0: the model's)")
      ->check(kNonNegative);
  tune->add_option("--threads", tf->config.train.threads,
                   "Compute threads per process in the trials (0: cores / processes)")
      ->check(kNonNegative);
  tune->add_option("--output", tf->config.output, "Where to write the tuning")
      ->capture_default_str();
  tune->add_option("--comm-timeout", tf->config.timeout_s, "Seconds to wait for a peer")
      ->check(kPositive)
      ->capture_default_str();

  auto [plan_vs_real, plan_vs_real_main] = add_plan_vs_real_command(bench);

  return [bench, comm, calibrate, tune, plan_vs_real, plan_vs_real_main, f, cf, tf,
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
    if (tune->parsed()) {
      TuneConfig c = tf->config;
      if (Status s = parse_size_range(tf->sizes, &c.min_bytes, &c.max_bytes); !s.ok())
        return fail(s);
      c.channels.clear();
      for (const std::string& item : split_list(tf->channels, {})) {
        char* end = nullptr;
        const long v = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || v < 1 || v > 16)
          return fail(InvalidArgument("--channels '" + tf->channels +
                                      "': expected a comma list of counts in 1..16, e.g. 1,2,4"));
        c.channels.push_back(static_cast<int>(v));
      }
      c.buckets_mb.clear();
      for (const std::string& item : split_list(tf->buckets, {})) {
        char* end = nullptr;
        const double v = std::strtod(item.c_str(), &end);
        if (item.empty() || *end != '\0' || !(v > 0) ||
            (!c.buckets_mb.empty() && v <= c.buckets_mb.back()))
          return fail(InvalidArgument("--buckets '" + tf->buckets +
                                      "': expected increasing sizes in MiB, e.g. 1,4,16"));
        c.buckets_mb.push_back(v);
      }
      if (env->has_value()) {
        Status s = run_tune_worker(c, **env);
        return s.ok() ? 0 : fail(s);
      }
      if (tf->nnodes > 1 && tf->rdzv.empty())
        return fail(InvalidArgument("--nnodes " + std::to_string(tf->nnodes) +
                                    " needs --rdzv, the store every node's agent meets at; hint: "
                                    "--rdzv redis://HOST:6379 --rdzv-id JOB on every node"));
      if (tf->nproc_per_node * tf->nnodes < 2)
        return fail(InvalidArgument(
            "bench tune: one process has nothing to communicate; hint: give --nproc-per-node 2 "
            "or more, or several nodes"));
      if (c.bucket_steps > 0) {
        auto spec = model::load_model_spec(c.train.model);
        if (!spec.ok()) return fail(spec.status());
        if (Status st = train::check_launch(c.train, *spec, tf->nproc_per_node * tf->nnodes, false);
            !st.ok())
          return fail(st);
      }
      elastic::AgentConfig ac;
      ac.nproc_per_node = tf->nproc_per_node;
      ac.nnodes = tf->nnodes;
      apply_rendezvous_flags(*tf, &ac);
      ac.worker_args = argv_after_binary;
      ac.plain_rank0_stdout = true;
      auto code = elastic::run_agent(ac);
      if (!code.ok()) return fail(code.status());
      return *code;
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
    c.repeat = f->repeat;
    if (!env->has_value()) {
      elastic::AgentConfig ac;
      ac.nproc_per_node = f->nproc;
      ac.worker_args = argv_after_binary;
      ac.plain_rank0_stdout = true;
      auto code = elastic::run_agent(ac);
      if (!code.ok()) return fail(code.status());
      return *code;
    }
    StatusOr<bool> met = run_comm_bench_worker(c, **env);
    if (!met.ok()) return fail(met.status());
    return *met ? 0 : 1;  // a missed target fails the run, on every rank alike
  };
}

}  // namespace cann::cli
