// `cann-train search`: every way to split a model over a cluster, priced, ranked and
// explained: the table of the best, why the winner wins, and how to launch it (cann-train,
// Megatron-LM, DeepSpeed); --json for machines, --report for a self-contained HTML page.
// The planner itself lives in src/plan; this file is flags in, text out.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/plan_flags.h"
#include "cli/validators.h"
#include "core/fs.h"
#include "plan/baseline.h"
#include "plan/launch.h"
#include "plan/plan_file.h"
#include "plan/plan_input.h"
#include "plan/report_html.h"
#include "plan/report_json.h"
#include "plan/report_text.h"
#include "plan/search.h"

namespace cann::cli {
namespace {

struct SearchFlags {
  std::string model, cluster;
  int global_batch = 0;
  plan::PlanOverrides input;
  int top = 5;
  double max_comm = 1.0;
  bool json = false;
  bool engine_only = false;
  std::string report;
  std::string out;
  std::string objective = "throughput";
  double max_cost_per_hour = -1;  // < 0: not given
  double min_goodput = -1;        // < 0: not given
  std::string baseline;
};

constexpr const char* kSearchFailure = "cann-train search: error";

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

using plan::with_commas;

int run_search(const SearchFlags& f, const CLI::App& cmd) {
  auto objective = plan::parse_objective(f.objective);
  if (!objective.ok()) return fail_line(kSearchFailure, objective.status());
  const bool cost_given = cmd.count("--max-cost-per-hour") > 0;
  const bool goodput_given = cmd.count("--min-goodput") > 0;
  if (cost_given && !(f.max_cost_per_hour >= 0))
    return fail_line(
        kSearchFailure,
        InvalidArgument("--max-cost-per-hour: expected a cost in USD of 0 or more, got " +
                        number_text(f.max_cost_per_hour) +
                        "; hint: e.g. --max-cost-per-hour 5000"));
  if (goodput_given && !(f.min_goodput >= 0 && f.min_goodput <= 1))
    return fail_line(
        kSearchFailure,
        InvalidArgument("--min-goodput: expected a fraction in 0..1, got " +
                        number_text(f.min_goodput) + "; hint: e.g. --min-goodput 0.95"));
  auto in = plan::load_plan_input(f.model, f.cluster, f.input);
  if (!in.ok()) return fail_line(kSearchFailure, in.status());
  const plan::DeviceSpec& dev = in->cluster.device;
  if ((cost_given || *objective == plan::Objective::kCost) && dev.hourly_cost_usd <= 0)
    return fail_line(
        kSearchFailure,
        InvalidArgument(
            std::string(cost_given ? "--max-cost-per-hour" : "--objective cost") + ": cluster " +
            in->cluster.name + " (" + in->cluster.source +
            ") has no device price; hint: set device.hourly_cost_usd in the cluster's YAML"));
  if (*objective == plan::Objective::kEnergy && dev.tdp_watts <= 0)
    return fail_line(kSearchFailure,
                     InvalidArgument("--objective energy: cluster " + in->cluster.name + " (" +
                                     in->cluster.source +
                                     ") has no device power; hint: set device.tdp_watts in the "
                                     "cluster's YAML"));
  plan::SearchOptions opt;
  opt.global_batch = f.global_batch;
  opt.max_comm_ratio = f.max_comm;
  opt.top_k = f.top;
  opt.objective = *objective;
  if (cost_given) opt.max_usd_per_hour = f.max_cost_per_hour;
  if (goodput_given) opt.min_goodput = f.min_goodput;
  if (f.engine_only) opt.engine_only = true;
  // The baseline first: a bad --baseline is bad usage, refused before the search runs.
  const int gbs = f.global_batch > 0 ? f.global_batch : plan::default_global_batch(in->model);
  StatusOr<plan::Prediction> base = f.baseline.empty() ? plan::default_baseline(*in, gbs)
                                                       : plan::baseline_of(*in, f.baseline, gbs);
  if (!base.ok() && !f.baseline.empty()) return fail_line(kSearchFailure, base.status());
  const plan::Prediction* baseline = base.ok() ? &*base : nullptr;
  auto r = plan::search(*in, opt);
  if (!r.ok()) return fail_line(kSearchFailure, r.status());
  if (r->top.empty())
    return fail_line(
        kSearchFailure,
        Internal("the search found feasible candidates but none survived exact pricing; "
                 "hint: relax --max-memory-per-device or --max-comm-overhead slightly"));
  const plan::Prediction& w = r->top[0];
  const plan::Prediction* runner = r->top.size() > 1 ? &r->top[1] : nullptr;
  const std::string explanation = plan::explain_winner(*in, w, runner, r->objective);
  const std::string launch = "cann-train:\n  " + plan::cann_train_args(*in, w) +
                             "\n\nMegatron-LM:\n  " + plan::megatron_args(*in, w) +
                             "\n\nDeepSpeed config:\n" + plan::deepspeed_config(*in, w) + "\n";
  if (!f.report.empty()) {
    Status s =
        write_file_atomic(f.report, plan::html_report(*in, *r, explanation, launch, baseline));
    if (!s.ok()) return fail_line(kSearchFailure, s);
  }
  if (!f.out.empty()) {
    plan::PlanFile plan = plan::make_plan_file(*in, w, f.model, f.cluster, f.out);
    if (baseline) {
      plan.predicted["estimated_speedup"] = plan::estimated_speedup(*baseline, w);
      plan.baseline = plan::strategy_string(baseline->strategy);
    }
    Status s = plan::write_plan_file(f.out, plan);
    if (!s.ok()) return fail_line(kSearchFailure, s);
  }
  if (f.json) {
    std::printf("%s\n", plan::search_json(*in, *r, 2, baseline,
                                          baseline ? std::string() : base.status().message())
                            .c_str());
    return 0;
  }
  const double tokens = static_cast<double>(r->global_batch) * in->model.seq_length;
  const double params = in->shape.total_params;
  std::printf(
      "cann-train search: %s (%.4g%s parameters) on %s (%d x %s), global batch %d "
      "sequences (%.3g M tokens)\n",
      in->model.name.c_str(),
      params >= 1e12  ? params / 1e12
      : params >= 1e9 ? params / 1e9
                      : params / 1e6,
      params >= 1e12  ? "T"
      : params >= 1e9 ? "B"
                      : "M",
      in->cluster.name.c_str(), in->cluster.num_devices(), in->cluster.device.name.c_str(),
      r->global_batch, tokens / 1e6);
  std::printf("%s\n", plan::model_summary(*in).c_str());
  std::printf(
      "searched %s strategies: %s priced, %s cut early by the memory bound, in %.3f s "
      "(%s candidates/s); %s feasible, %d on the Pareto front\n",
      with_commas(r->space).c_str(), with_commas(r->evaluated).c_str(),
      with_commas(r->pruned).c_str(), r->search_time_s,
      with_commas(static_cast<long long>(r->space / std::max(r->search_time_s, 1e-9))).c_str(),
      with_commas(static_cast<long long>(r->feasible.size())).c_str(), r->pareto_count);
  if (cost_given || goodput_given)
    std::printf("constraints: --max-cost-per-hour removed %s, --min-goodput removed %s\n",
                with_commas(r->removed_by_cost).c_str(),
                with_commas(r->removed_by_goodput).c_str());
  if (baseline)
    std::printf("baseline: %s, %.3f s per step (%s)\n",
                plan::strategy_string(baseline->strategy).c_str(), baseline->step_time_s,
                f.baseline.empty() ? "pure data parallelism, the smallest ZeRO stage that fits"
                                   : "--baseline");
  else
    std::printf("%s; give one with --baseline STRATEGY\n", base.status().message().c_str());
  std::printf(
      "\n%s\n%s\n%s\nLaunch\n%s", plan::strategy_table(*in, r->top, r->objective, baseline).c_str(),
      explanation.c_str(), plan::pareto_table(r->feasible, r->objective).c_str(), launch.c_str());
  if (!f.report.empty()) std::printf("\nreport: %s\n", f.report.c_str());
  if (!f.out.empty())
    std::printf("plan: %s (train it with `cann-train run --plan %s`)\n", f.out.c_str(),
                f.out.c_str());
  return 0;
}

}  // namespace

CommandMain add_search_command(CLI::App& app) {
  auto f = std::make_shared<SearchFlags>();
  CLI::App* cmd = app.add_subcommand(
      "search",
      "Search every way to split a model over a cluster (dp, tp, pp, ep, cp, sp, micro-batch, "
      "ZeRO, recomputation, vpp); rank by predicted throughput and explain the winner.");
  cmd->add_option("--model", f->model,
                  "Model: a shipped name (moe_bert, gpt_175b, gpt_1t, llama3_405b, mixtral_8x7b, "
                  "vit_g, ...) or a YAML/config.json path")
      ->required();
  cmd->add_option("--cluster", f->cluster,
                  "Cluster: a preset (1024_ascend910b, 3072_a100, 16384_h100, 2048_h800) or a "
                  "YAML path")
      ->required();
  cmd->add_option("--global-batch", f->global_batch,
                  "Sequences per optimizer step (default: about 4M tokens)")
      ->check(kPositive);
  add_plan_input_options(cmd, &f->input);
  cmd->add_option("--top", f->top, "Strategies to list")->check(kPositive)->capture_default_str();
  cmd->add_option("--max-comm-overhead", f->max_comm,
                  "Largest exposed-communication share of a step to accept (0..1)")
      ->check(kPositive);
  cmd->add_flag("--json", f->json, "Print the result as JSON (see docs/planner.md)");
  cmd->add_flag("--engine-only", f->engine_only,
                "Only strategies cann-train's own engine trains (`run` refuses the others)");
  cmd->add_option("--objective", f->objective,
                  "What ranks the candidates: throughput (tokens/s), cost ($ per million "
                  "tokens), energy (joules per token), goodput (tokens/s x goodput) or tei")
      ->capture_default_str();
  cmd->add_option("--max-cost-per-hour", f->max_cost_per_hour,
                  "Largest cluster cost per hour in USD (devices x the preset's hourly price)");
  cmd->add_option("--min-goodput", f->min_goodput,
                  "Smallest goodput to accept (0..1): the share of wall time kept under failures");
  cmd->add_option("--baseline", f->baseline,
                  "Strategy the speed-ups are stated against, as --strategy of simulate takes it "
                  "(default: pure data parallelism with the smallest ZeRO stage that fits)");
  cmd->add_option("--report", f->report,
                  "Write a self-contained HTML report (scatter, Pareto front, winner's stages)");
  cmd->add_option("--out", f->out,
                  "Write the winner as a plan file that `cann-train run --plan FILE` trains");
  return [f, cmd]() { return run_search(*f, *cmd); };
}

}  // namespace cann::cli
