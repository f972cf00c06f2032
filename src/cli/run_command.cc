// `cann-train run`: flags to TrainConfig, then the trainer.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <optional>

#include "cli/auto_strategy.h"
#include "cli/commands.h"
#include "cli/launch_flags.h"
#include "cli/local_cluster.h"
#include "cli/resilience_flags.h"
#include "cli/run_plan.h"
#include "cli/run_recsys.h"
#include "cli/validators.h"
#include "core/threads.h"
#include "elastic/agent.h"
#include "model/spec.h"
#include "plan/engine_support.h"
#include "plan/strategy.h"
#include "recsys/rec_spec.h"
#include "train/comm_config.h"
#include "train/dist_env.h"
#include "train/expert_rebalance.h"
#include "train/run_layout.h"
#include "train/trainer.h"

namespace cann::cli {

namespace {

struct LaunchFlags : RendezvousFlags {
  int nproc_per_node = 1;
  std::string nnodes_text = "1";
  int nnodes = 1;  // the static count, or MAX of MIN:MAX
  int min_nodes = 1;
  std::string comm_config;  // --comm-config, else CANN_COMM_CONFIG
};

// --nnodes N or MIN:MAX (a range needs --elastic). Returns an error line, or "".
std::string parse_nnodes(LaunchFlags& launch, bool elastic) {
  const std::string& t = launch.nnodes_text;
  const size_t colon = t.find(':');
  auto number = [](const std::string& s, int* out) {
    char* end = nullptr;
    const long v = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || v < 1 || v > 100000) return false;
    *out = static_cast<int>(v);
    return true;
  };
  int lo = 0, hi = 0;
  const bool ok = colon == std::string::npos
                      ? number(t, &lo) && (hi = lo) > 0
                      : number(t.substr(0, colon), &lo) && number(t.substr(colon + 1), &hi);
  if (!ok || lo > hi)
    return "--nnodes '" + t + "': expected a node count N or a range MIN:MAX with 1 <= MIN <= MAX";
  if (lo != hi && !elastic)
    return "--nnodes " + t +
           ": a range of nodes needs --elastic; hint: add --elastic, or give "
           "one node count";
  launch.min_nodes = lo;
  launch.nnodes = hi;
  return "";
}

// The workers' arguments with the layout `--strategy auto` chose in place of "auto".
std::vector<std::string> with_chosen_layout(const std::vector<std::string>& worker_args,
                                            const AutoChoice& choice) {
  std::vector<std::string> args;
  for (size_t i = 0; i < worker_args.size(); ++i) {
    const std::string& a = worker_args[i];
    if (a == "--strategy" || a == "--nproc-per-node") {
      ++i;
      continue;
    }
    if (a.rfind("--strategy=", 0) == 0 || a.rfind("--nproc-per-node=", 0) == 0) continue;
    args.push_back(a);
  }
  args.insert(args.end(), {"--strategy", plan::strategy_brief(choice.strategy), "--nproc-per-node",
                           std::to_string(choice.processes)});
  return args;
}

int report(const Status& s) {
  std::fprintf(stderr, "cann-train run: error: %s\n", s.message().c_str());
  return s.exit_code();
}

}  // namespace

CommandMain add_run_command(CLI::App& app, std::vector<std::string> argv_after_binary) {
  auto config = std::make_shared<train::TrainConfig>();
  auto launch = std::make_shared<LaunchFlags>();
  // --strategy and --compress as written; parsed once, below, into the config.
  auto strategy_text = std::make_shared<std::string>();
  auto compress_text = std::make_shared<std::string>("none");
  auto onebit_warmup_precision = std::make_shared<std::string>("bf16");
  auto precision_text = std::make_shared<std::string>("fp32");
  auto comm = std::make_shared<train::CommConfig>();
  CLI::App* run = app.add_subcommand(
      "run", "Train a model. With no flags: gpt_tiny on the fortunes corpus for a few minutes.");
  run->add_option("--model", config->model,
                  "Model: a shipped name (gpt_tiny, llama_tiny, qwen3_moe_tiny, deepseek_tiny, "
                  "moe_bert_tiny, gpt2_124m, bert_base, bert_large; recommendation: dlrm_tiny, "
                  "two_tower_tiny, dlrm_criteo_kaggle) or a YAML/config.json path")
      ->capture_default_str();
  run->add_option("--data", config->data,
                  "Training data: 'fortunes', a text file, a directory of text files, or llm.c "
                  "token shards (.bin file or directory)")
      ->capture_default_str();
  run->add_option("--steps", config->steps, "Optimizer steps")
      ->check(kPositive)
      ->capture_default_str();
  run->add_option("--batch-size", config->batch_size, "Global batch: sequences per optimizer step")
      ->check(kPositive)
      ->capture_default_str();
  run->add_option("--seq-len", config->seq_len,
                  "Tokens per sequence (default: the model's seq_length)")
      ->check(kPositive);
  run->add_option("--lr", config->lr, "Peak learning rate")
      ->check(kPositive)
      ->capture_default_str();
  run->add_option("--warmup", config->warmup,
                  "Linear warmup steps before cosine decay (default: 5% of --steps, at most 200)")
      ->check(kNonNegative);
  run->add_option("--weight-decay", config->weight_decay, "AdamW decoupled weight decay")
      ->check(kNonNegative)
      ->capture_default_str();
  run->add_option("--grad-clip", config->grad_clip, "Max global gradient norm (0: no clipping)")
      ->check(kNonNegative)
      ->capture_default_str();
  run->add_option("--expert-bias-update-speed", config->expert_bias_update_speed,
                  "noaux_tc MoE models: how far each expert's selection bias moves per step "
                  "towards balance (default: the model spec's expert_bias_update_speed, 0.001; "
                  "0 freezes it)")
      ->check(kNonNegative);
  run->add_option("--precision", *precision_text,
                  "GEMM inputs: fp32, or bf16 (rounded to bfloat16, multiplied with fp32 "
                  "accumulation; weights, gradients and optimizer state stay fp32; needs AVX-512 "
                  "BF16)")
      ->capture_default_str();
  run->add_option("--seed", config->seed, "Seed for initialization, sampling and masking")
      ->capture_default_str();
  run->add_option("--threads", config->threads,
                  "Threads for BLAS and kernels together (default: every core)")
      ->check(kNonNegative);
  run->add_option("--eval-every", config->eval_every,
                  "Validation loss every K steps (0: only at the end)")
      ->check(kNonNegative)
      ->capture_default_str();
  run->add_option("--eval-batches", config->eval_batches, "Batches per validation")
      ->check(kPositive)
      ->capture_default_str();
  run->add_option("--log-json", config->log_json,
                  "Write one JSON object per step to FILE (step, loss, lr, grad_norm, "
                  "step_time_s, tokens_per_s; val_loss on evaluation steps)");
  run->add_option("--checkpoint-dir", config->checkpoint_dir,
                  "Directory for checkpoints (written at the end, and every K steps with "
                  "--checkpoint-every)");
  run->add_option("--checkpoint-every", config->checkpoint_every, "Checkpoint every K steps")
      ->check(kNonNegative);
  run->add_option("--keep-checkpoints", config->keep_checkpoints, "Checkpoints to keep")
      ->check(kPositive)
      ->capture_default_str();
  run->add_flag("--resume", config->resume,
                "Continue from the newest valid checkpoint in --checkpoint-dir");
  run->add_option("--exit-interval", config->exit_interval,
                  "Checkpoint and exit at the first step that is a multiple of K (for jobs "
                  "with a time limit)")
      ->check(kNonNegative);
  run->add_option("--sample-tokens", config->sample_tokens,
                  "gpt: bytes of text to generate after training (0: none)")
      ->check(kNonNegative)
      ->capture_default_str();
  run->add_flag("--quiet", config->quiet, "Print no progress lines");

  const char* kParallel = "Data parallelism";
  run->add_option(
         "--strategy", *strategy_text,
         "Parallel layout: dp=P,tp=T,pp=S,cp=C,sp=on|off,zero=0-3,mbs=M,gbs=G (dp*tp*pp*cp = "
         "the processes launched; gbs = --batch-size; mbs sets the micro-batch, hence "
         "gradient accumulation or pipeline micro-batches), or auto: the planner picks "
         "processes, threads and layout for this machine's cores (or --nproc-per-node); "
         "`run` with no arguments uses auto")
      ->group(kParallel);
  run->add_option("--pipeline-schedule", config->pipeline_schedule,
                  "Pipeline schedule when the strategy has pp > 1: gpipe, 1f1b or interleaved "
                  "(vpp > 1); auto picks 1f1b, or interleaved when the strategy has vpp > 1")
      ->check(CLI::IsMember({"auto", "gpipe", "1f1b", "interleaved"}))
      ->group(kParallel)
      ->capture_default_str();
  run->add_option("--grad-accum", config->grad_accum,
                  "Micro-steps per optimizer step (gradients accumulate; only the last one "
                  "communicates)")
      ->check(kPositive)
      ->group(kParallel);
  run->add_option("--compress", *compress_text,
                  "Gradient compression: none, bf16, onebit (1-bit Adam), topk:RATIO")
      ->group(kParallel)
      ->capture_default_str();
  run->add_option("--onebit-warmup", config->onebit_warmup,
                  "Full-gradient steps before 1-bit Adam or top-k compresses (default: 15% of "
                  "--steps)")
      ->check(kNonNegative)
      ->group(kParallel);
  run->add_option("--onebit-warmup-precision", *onebit_warmup_precision,
                  "Precision of the gradients all-reduced in those warmup steps")
      ->check(CLI::IsMember({"bf16", "fp32"}))
      ->group(kParallel)
      ->capture_default_str();
  run->add_option("--bucket-size-mb", config->bucket_mb,
                  "Gradient bucket size in MiB (the first bucket is 1 MiB); 0: a sixteenth of "
                  "the rank's gradients, between 1 and 25 MiB")
      ->check(kNonNegative)
      ->group(kParallel)
      ->capture_default_str();
  auto rebalance_text = std::make_shared<std::string>();
  run->add_option("--expert-rebalance", *rebalance_text,
                  "MoE under ep > 1: every=K[,cooldown=C][,replicas=R]. Every K steps the "
                  "experts' measured load decides a balanced placement over the expert-parallel "
                  "ranks, and the experts move (with their optimizer state) where the planner "
                  "prices the saved compute above the move; with R, up to R of a layer's hottest "
                  "experts also get a copy on every expert-parallel rank (their gradients summed "
                  "at the owner) where that pays for its traffic; C decisions after a change "
                  "keep it (default 1)")
      ->group(kParallel);
  run->add_option("--compute-nice", config->compute_nice,
                  "Nice value for the compute threads of a multi-process run (0-19), so that "
                  "communication threads run first when cores are scarce; 0: equal priority")
      ->check(CLI::Range(0, 19))
      ->group(kParallel)
      ->capture_default_str();

  const char* kMonitor = "Monitoring";
  auto monitor_list = std::make_shared<std::string>("dashboard,prometheus");
  auto monitor_port = std::make_shared<int>(9999);
  run->add_option("--monitor", *monitor_list,
                  "Any of dashboard (HTTP), prometheus (/metrics), tensorboard (event files in "
                  "--tensorboard-dir), as a comma list, or off")
      ->group(kMonitor)
      ->capture_default_str();
  run->add_option("--monitor-port", *monitor_port,
                  "HTTP port (default 9999, or the next free one when taken)")
      ->check(CLI::Range(0, 65535))
      ->group(kMonitor);
  run->add_option("--monitor-bind", config->monitor_server.bind,
                  "Address the HTTP server binds (127.0.0.1: this machine only)")
      ->group(kMonitor)
      ->capture_default_str();
  auto tensorboard_dir = std::make_shared<std::string>("runs");
  run->add_option("--tensorboard-dir", *tensorboard_dir,
                  "Where --monitor tensorboard writes events.out.tfevents.* files")
      ->group(kMonitor)
      ->capture_default_str();
  run->add_option("--monitor-token", config->monitor_server.token,
                  "Token for endpoints that change anything (POST /api/stop); default: random, "
                  "printed with the URL")
      ->group(kMonitor);

  add_run_alert_flags(run, config.get());
  add_run_debug_flags(run, config.get());
  add_run_weights_flags(run, config.get());

  const char* kLaunch = "Processes";
  run->add_option("--nproc-per-node", launch->nproc_per_node,
                  "Worker processes on this node (data parallel; each gets --threads or "
                  "cores / P threads)")
      ->check(kPositive)
      ->group(kLaunch)
      ->capture_default_str();
  run->add_option("--nnodes", launch->nnodes_text,
                  "Nodes in the job (one `cann-train run` per node): N, or MIN:MAX with --elastic")
      ->group(kLaunch)
      ->capture_default_str();
  add_rendezvous_flags(run, launch.get(), kLaunch);
  run->add_option("--backend", comm->backend,
                  "Collectives: auto (shm on one node, hierarchical across nodes), shm, gloo, "
                  "hierarchical")
      ->check(CLI::IsMember({"auto", "shm", "gloo", "hierarchical"}))
      ->group(kLaunch)
      ->capture_default_str();
  run->add_option("--comm-config", launch->comm_config,
                  "Communication tuning written by `cann-train bench tune` (comm.yaml: backend, "
                  "Gloo channels and algorithms by size, bucket size); default: $CANN_COMM_CONFIG")
      ->group(kLaunch);
  run->add_option("--transport", comm->transport, "Gloo transport between nodes: tcp, ibverbs")
      ->check(CLI::IsMember({"tcp", "ibverbs"}))
      ->group(kLaunch)
      ->capture_default_str();
  run->add_option("--comm-timeout", comm->timeout_s,
                  "Seconds a collective waits for a peer before failing with the peer named")
      ->check(kPositive)
      ->group(kLaunch)
      ->capture_default_str();
  run->add_flag("--debug-comm", comm->debug,
                "Check that every rank issues the same collective (op, size, type) before it runs")
      ->group(kLaunch);

  auto resilience = std::make_shared<ResilienceFlags>();
  add_resilience_flags(run, config.get(), resilience.get());
  auto plan_flags = std::make_shared<PlanFlags>();
  add_plan_flags(run, plan_flags.get());
  auto recsys_flags = std::make_shared<RecsysFlags>();
  add_recsys_flags(run, recsys_flags.get());

  auto threads_given = run->get_option("--threads");
  auto nproc_given = run->get_option("--nproc-per-node");
  auto port_given = run->get_option("--monitor-port");
  return [run, config, launch, comm, resilience, threads_given, nproc_given, port_given,
          precision_text, monitor_list, monitor_port, tensorboard_dir, strategy_text, compress_text,
          onebit_warmup_precision, plan_flags, recsys_flags, argv_after_binary,
          rebalance_text]() -> int {
    if (recsys::is_recsys_model(config->model)) {
      if (const std::string bad = parse_nnodes(*launch, false); !bad.empty()) {
        std::fprintf(stderr, "cann-train run: %s\n", bad.c_str());
        return 2;
      }
      if (const std::string bad = check_resilience_flags(*resilience); !bad.empty()) {
        std::fprintf(stderr, "cann-train run: %s\n", bad.c_str());
        return 2;
      }
      elastic::AgentConfig ac;
      ac.nproc_per_node = launch->nproc_per_node;
      ac.nnodes = launch->nnodes;
      apply_rendezvous_flags(*launch, &ac);
      ac.backend = comm->backend;
      ac.worker_args = argv_after_binary;
      apply_resilience_flags(*resilience, *config, &ac);
      return run_recsys(*run, *config, *recsys_flags, ac, *comm);
    }
    if (const std::string bad = refuse_recsys_flags(*run); !bad.empty()) {
      std::fprintf(stderr, "cann-train run: %s\n", bad.c_str());
      return 2;
    }
    // --monitor: which parts of the HTTP server run.
    config->monitor_server.dashboard = false;
    config->monitor_server.prometheus = false;
    size_t start = 0;
    while (start <= monitor_list->size()) {
      const size_t comma = monitor_list->find(',', start);
      const std::string item = monitor_list->substr(
          start, comma == std::string::npos ? std::string::npos : comma - start);
      if (item == "dashboard") {
        config->monitor_server.dashboard = true;
      } else if (item == "prometheus") {
        config->monitor_server.prometheus = true;
      } else if (item == "tensorboard") {
        config->tensorboard_dir = *tensorboard_dir;
      } else if (item != "off") {
        std::fprintf(stderr,
                     "cann-train run: --monitor: unknown item '%s'; hint: use dashboard, "
                     "prometheus, tensorboard, a comma list of them, or off\n",
                     item.c_str());
        return 2;
      }
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    config->monitor = config->monitor_server.dashboard || config->monitor_server.prometheus;
    if (Status s = monitor::check_alert_routes(config->alerts.routes); !s.ok()) return report(s);
    const monitor::AlertRoutesConfig& routes = config->alerts.routes;
    if (!config->monitor && (!routes.webhooks.empty() || !routes.email.empty()))
      return report(InvalidArgument(
          "--alert-webhook/--alert-email: alerts are raised by the job's monitor, which "
          "--monitor " +
          *monitor_list + " leaves off; hint: add dashboard or prometheus to --monitor"));
    config->monitor_server.port = *monitor_port;
    config->monitor_server.try_next_ports = port_given->count() == 0;
    if (const std::string bad = check_resilience_flags(*resilience); !bad.empty()) {
      std::fprintf(stderr, "cann-train run: %s\n", bad.c_str());
      return 2;
    }
    if (const std::string bad = parse_nnodes(*launch, resilience->elastic); !bad.empty()) {
      std::fprintf(stderr, "cann-train run: %s\n", bad.c_str());
      return 2;
    }
    if (Status s = resolve_init_model(run, config.get()); !s.ok()) return report(s);
    auto env = train::detect_dist_env();
    if (!env.ok()) return report(env.status());
    auto compress = plan::parse_compression(*compress_text);
    if (!compress.ok()) return report(compress.status());
    config->compress = *compress;
    config->onebit_warmup_bf16 = *onebit_warmup_precision == "bf16";
    auto precision = kernels::parse_gemm_precision(*precision_text);
    if (!precision.ok()) return report(precision.status());
    config->precision = *precision;
    if (Status s = apply_plan(run, plan_flags.get(), config.get(), &launch->nproc_per_node,
                              nproc_given->count() > 0, launch->nnodes,
                              env->has_value() ? (*env)->world_size : 0);
        !s.ok())
      return report(s);
    std::vector<std::string> worker_args = plan_worker_args(argv_after_binary, *plan_flags);
    if (argv_after_binary.size() <= 1 && !env->has_value()) *strategy_text = "auto";
    if (!strategy_text->empty() && *strategy_text != "auto" && plan_flags->path.empty()) {
      auto strategy = plan::parse_strategy(*strategy_text);
      if (!strategy.ok()) return report(strategy.status());
      config->strategy = *strategy;
    }
    if (!rebalance_text->empty()) {
      auto rebalance = train::parse_expert_rebalance(*rebalance_text);
      if (!rebalance.ok()) return report(rebalance.status());
      config->expert_rebalance = *rebalance;
      // A model that does not load is reported by the run itself.
      if (auto spec = model::load_model_spec(config->model); spec.ok())
        if (Status st = train::check_expert_rebalance(*config, *spec); !st.ok()) return report(st);
      // The moves are priced on this machine's calibrated spec: the launcher measures it when
      // there is none, its workers read it.
      const int processes = env->has_value() ? (*env)->local_world_size : launch->nproc_per_node;
      auto cluster = local_cluster(processes, hardware_threads(), "expert-rebalance",
                                   config->quiet || env->has_value());
      if (!cluster.ok()) return report(cluster.status());
      cluster->device.bf16_gemms = config->precision == kernels::GemmPrecision::kBf16 &&
                                   cluster->device.bf16_gemm_tflops > 0;
      config->expert_rebalance.cluster =
          std::make_shared<const plan::ClusterSpec>(std::move(*cluster));
    }
    if (launch->comm_config.empty())
      if (const char* path = std::getenv("CANN_COMM_CONFIG")) launch->comm_config = path;
    std::optional<train::CommTuning> tuning;
    if (!launch->comm_config.empty()) {
      auto read = train::read_comm_tuning(launch->comm_config);
      if (!read.ok()) return report(read.status());
      tuning = *read;
      const int nnodes =
          env->has_value() ? (*env)->world_size / (*env)->local_world_size : launch->nnodes;
      // Under --strategy auto the launcher has not chosen the processes yet: no comparison.
      const int per_node = env->has_value()           ? (*env)->local_world_size
                           : *strategy_text == "auto" ? tuning->nproc_per_node
                                                      : launch->nproc_per_node;
      auto line = train::apply_comm_tuning(
          *tuning, launch->comm_config, nnodes, per_node, run->get_option("--backend")->count() > 0,
          run->get_option("--bucket-size-mb")->count() > 0, comm.get(), &config->bucket_mb);
      if (!line.ok()) return report(line.status());
      if (!env->has_value() && !config->quiet) std::printf("%s\n", line->c_str());
    }
    // --strategy auto across nodes: node 0's agent plans after the rendezvous (below).
    bool auto_nodes = false;
    if (*strategy_text == "auto" && launch->nnodes > 1 && !env->has_value()) {
      if (!tuning || !tuning->inter_node)
        return report(InvalidArgument(
            "--strategy auto across nodes plans with the measured link between them; hint: run "
            "`cann-train bench tune --nnodes " +
            std::to_string(launch->nnodes) +
            " --rdzv ...` on every node first and pass its file with --comm-config"));
      auto_nodes = true;
    }
    if (*strategy_text == "auto" && !auto_nodes) {
      if (env->has_value())
        return report(InvalidArgument(
            "--strategy auto plans from its launching process; hint: give workers of another "
            "launcher an explicit --strategy"));
      const int cores = nproc_given->count() > 0 ? launch->nproc_per_node : hardware_threads();
      auto choice = choose_auto_strategy(*config, cores);
      if (!choice.ok()) return report(choice.status());
      if (!config->quiet) std::printf("%s\n", choice->report.c_str());
      std::fflush(stdout);
      launch->nproc_per_node = choice->processes;
      config->strategy = choice->strategy;
      if (choice->processes == 1) {
        if (threads_given->count() == 0) config->threads = choice->threads;
      } else {
        worker_args = with_chosen_layout(worker_args, *choice);
      }
    }
    if (!env->has_value() &&
        (launch->nproc_per_node > 1 || launch->nnodes > 1 || resilience->elastic)) {
      // This process is the agent: launch the workers with the same arguments.
      // The workers report a model that does not load, with its own message.
      // Under auto across nodes, node 0 checks the layout it chooses.
      if (auto spec = model::load_model_spec(config->model); spec.ok() && !auto_nodes)
        if (Status st = train::check_launch(*config, *spec, launch->nproc_per_node * launch->nnodes,
                                            resilience->elastic && launch->nnodes > 1);
            !st.ok())
          return report(st);
      elastic::AgentConfig ac;
      ac.nproc_per_node = launch->nproc_per_node;
      ac.nnodes = launch->nnodes;
      apply_rendezvous_flags(*launch, &ac);
      ac.backend = comm->backend;
      ac.worker_args = worker_args;
      ac.monitor = config->monitor;
      ac.monitor_server = config->monitor_server;
      ac.alerts = config->alerts;
      apply_resilience_flags(*resilience, *config, &ac);
      if (auto_nodes) {
        const int cores = nproc_given->count() > 0 ? launch->nproc_per_node : hardware_threads();
        plan::LinkSpec inter;
        inter.bandwidth_GBps = tuning->inter_node->bandwidth_GBps;
        inter.latency_us = tuning->inter_node->latency_us;
        inter.efficiency = 1.0;  // a measured bus bandwidth, as bench calibrate's links
        inter.interconnect = "measured by bench tune (" + launch->comm_config + ")";
        const bool elastic_nodes = resilience->elastic;
        ac.node0_decides = [cfg = *config, cores, nodes = launch->nnodes,
                            min_nodes = launch->min_nodes, inter, worker_args,
                            elastic_nodes]() -> StatusOr<elastic::AgentConfig::NodeLaunch> {
          // Elastic: planned for the most nodes the job may have; dp and the micro-batch then
          // follow each generation's world, and under model parallelism each node count
          // trains the layout planned for it from this choice (train/elastic_layouts.h).
          CANN_ASSIGN_OR_RETURN(AutoChoice choice,
                                choose_auto_strategy(cfg, cores, nodes, &inter, elastic_nodes));
          if (elastic_nodes) {
            choice.strategy.dp = 0;
            choice.strategy.mbs = 0;
          }
          if (!cfg.quiet) std::printf("%s\n", choice.report.c_str());
          std::fflush(stdout);
          if (auto spec = model::load_model_spec(cfg.model); spec.ok())
            CANN_RETURN_IF_ERROR(
                train::check_launch(cfg, *spec, choice.processes * nodes, elastic_nodes));
          elastic::AgentConfig::NodeLaunch launch;
          launch.nproc_per_node = choice.processes;
          launch.worker_args = with_chosen_layout(worker_args, choice);
          if (elastic_nodes) {
            // Under model parallelism the layout of every node count, planned from the choice.
            train::TrainConfig chosen = cfg;
            chosen.strategy = choice.strategy;
            const std::string bad =
                check_elastic_nodes(chosen, min_nodes, nodes, choice.processes,
                                    &launch.global_batch, &launch.node_layouts, &inter);
            if (!bad.empty()) return InvalidArgument(bad);
          }
          return launch;
        };
      }
      ac.min_nodes = launch->min_nodes;
      ac.max_nodes = launch->nnodes;
      if (resilience->elastic && launch->nnodes > 1 && !auto_nodes) {
        std::optional<plan::LinkSpec> inter;
        if (tuning && tuning->inter_node) {
          inter.emplace();
          inter->bandwidth_GBps = tuning->inter_node->bandwidth_GBps;
          inter->latency_us = tuning->inter_node->latency_us;
          inter->efficiency = 1.0;  // a measured bus bandwidth
          inter->interconnect = "measured by bench tune (" + launch->comm_config + ")";
        }
        if (const std::string bad = check_elastic_nodes(
                *config, launch->min_nodes, launch->nnodes, launch->nproc_per_node,
                &ac.global_batch, &ac.node_layouts, inter ? &*inter : nullptr);
            !bad.empty()) {
          std::fprintf(stderr, "cann-train run: %s\n", bad.c_str());
          return 2;
        }
      }
      auto code = elastic::run_agent(ac);
      if (!code.ok()) return report(code.status());
      return *code;
    }
    std::optional<train::DistEnv> dist = *env;
    if (dist && threads_given->count() == 0) {
      if (const char* t = std::getenv("CANN_TRAIN_DEFAULT_THREADS")) config->threads = std::atoi(t);
    }
    // Workers of another launcher (torchrun, Slurm, MPI) may name the store with --rdzv.
    if (dist && dist->store_url.empty()) dist->store_url = launch->rdzv;
    auto trainer = train::Trainer::create(*config, dist ? &*dist : nullptr, *comm);
    if (!trainer.ok()) return report(trainer.status());
    train::RunSummary summary;
    Status s = (*trainer)->run(&summary);
    if (!s.ok()) return report(s);
    if (dist && dist->rank != 0) return summary.interrupted ? 130 : 0;
    if (Status rec = record_plan_run(*plan_flags, *config, summary, dist ? dist->world_size : 1);
        !rec.ok())
      return report(rec);
    else if (!plan_flags->out.empty() && !summary.step_times_s.empty() && !config->quiet)
      std::printf("plan %s: measured figures written beside the predicted ones\n",
                  plan_flags->out.c_str());
    if (summary.last_step <= summary.first_step) {
      // Resumed at the last step: nothing was trained.
      std::printf("done: nothing to train, already at step %d of --steps %d\n", summary.last_step,
                  config->steps);
      return summary.interrupted ? 130 : 0;
    }
    std::printf("done: steps %d..%d, loss %.4f -> %.4f", summary.first_step + 1, summary.last_step,
                summary.first_loss, summary.last_loss);
    if (summary.last_val_loss >= 0) std::printf(", val loss %.4f", summary.last_val_loss);
    std::printf("\n");
    return summary.interrupted ? 130 : 0;
  };
}

}  // namespace cann::cli
