// `cann-train simulate`: predict one strategy in detail: step time and where it goes, the
// pipeline schedule simulated op by op, memory per stage, goodput under failures, energy and
// cost; --trace writes the simulated schedule as a Chrome trace for Perfetto.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/plan_flags.h"
#include "cli/validators.h"
#include "core/fs.h"
#include "plan/plan_file.h"
#include "plan/plan_input.h"
#include "plan/report_json.h"
#include "plan/report_text.h"
#include "plan/search.h"
#include "plan/trace.h"

namespace cann::cli {
namespace {

struct SimulateFlags {
  std::string model, cluster, strategy, trace, out;
  int global_batch = 0;
  plan::PlanOverrides input;
  bool json = false;
};

constexpr const char* kSimulateFailure = "cann-train simulate: error";

void print_text(const plan::PlanInput& in, const plan::Prediction& p) {
  std::printf("cann-train simulate: %s on %s (%d devices)\n%s\n\n", in.model.name.c_str(),
              in.cluster.name.c_str(), in.cluster.num_devices(), plan::model_summary(in).c_str());
  std::printf("%s\n", plan::strategy_table(in, {p}).c_str());
  std::printf("step %.4f s: %s\n", p.step_time_s, plan::time_shares(p).c_str());
  std::printf("memory peak %s of %s per device: %s\n",
              plan::format_bytes(p.memory_peak_bytes).c_str(),
              plan::format_bytes(p.memory_limit_bytes).c_str(),
              p.fits ? "fits"
                     : "DOES NOT FIT; hint: more recomputation, a higher ZeRO stage, "
                       "a smaller micro-batch or more pipeline stages");
  std::printf("\n%-6s %-16s %10s %10s %9s %9s %9s %9s %9s %9s %9s\n", "stage", "layers",
              "fwd ms/mb", "bwd ms/mb", "dp ms", "opt ms", "weights", "grads", "optim", "activ",
              "total");
  for (size_t i = 0; i < p.stages.size(); ++i) {
    const plan::StageReport& st = p.stages[i];
    std::string layers;
    for (const auto& [a, b] : st.layers) {
      if (!layers.empty()) layers += ',';
      layers += std::to_string(a);
      layers += '-';
      layers += std::to_string(b);
    }
    if (st.embedding) layers += "+E";
    if (st.head) layers += "+H";
    const double gb = 1073741824.0;
    std::printf("%-6zu %-16s %10.2f %10.2f %9.1f %9.1f %8.2fG %8.2fG %8.2fG %8.2fG %8.2fG\n", i,
                layers.c_str(), st.fwd_s * 1e3, st.bwd_s * 1e3, st.dp_comm_s * 1e3,
                st.optimizer_s * 1e3, st.weights_bytes / gb, st.grads_bytes / gb,
                st.optimizer_bytes / gb, st.activation_bytes / gb, st.total_bytes / gb);
  }
  const plan::Goodput& g = p.goodput;
  std::printf(
      "\nfailures: job MTBF %.1f h (%.0f device-hours / %d devices); checkpoint %.1f s "
      "every %.1f min (Young/Daly); recovery %.0f s; goodput %.2f%%\n",
      g.job_mtbf_s / 3600, in.cluster.reliability.device_mtbf_hours, in.cluster.num_devices(),
      g.checkpoint_s, g.interval_s / 60, g.recovery_s, 100 * g.ratio);
  std::printf(
      "TEI %.3f = scaling efficiency %.3f x (1 - comm %.3f) x goodput %.3f; energy %.3g "
      "kWh/step; cost $%.0f/day\n",
      p.tei, p.scaling_efficiency, p.comm_ratio, g.ratio, p.energy_kwh_per_step,
      p.cost_usd_per_day);
}

int run_simulate(const SimulateFlags& f) {
  auto in = plan::load_plan_input(f.model, f.cluster, f.input);
  if (!in.ok()) return fail_line(kSimulateFailure, in.status());
  auto parsed = plan::parse_strategy(f.strategy);
  if (!parsed.ok()) return fail_line(kSimulateFailure, parsed.status());
  const int gbs = f.global_batch > 0 ? f.global_batch : plan::default_global_batch(in->model);
  auto s = plan::resolve_strategy(*parsed, in->model, in->cluster, gbs);
  if (!s.ok()) return fail_line(kSimulateFailure, s.status());
  auto p = plan::predict(*in, *s, plan::Fidelity::kExact, !f.trace.empty());
  if (!p.ok()) return fail_line(kSimulateFailure, p.status());
  if (!f.trace.empty()) {
    Status st = write_file_atomic(f.trace, plan::chrome_trace(*in, *p));
    if (!st.ok()) return fail_line(kSimulateFailure, st);
  }
  if (!f.out.empty()) {
    Status st =
        plan::write_plan_file(f.out, plan::make_plan_file(*in, *p, f.model, f.cluster, f.out));
    if (!st.ok()) return fail_line(kSimulateFailure, st);
  }
  if (f.json) {
    std::printf("%s\n", plan::prediction_json(*in, *p, 2).c_str());
  } else {
    print_text(*in, *p);
    if (!f.trace.empty())
      std::printf("trace: %s (open in ui.perfetto.dev or chrome://tracing)\n", f.trace.c_str());
    if (!f.out.empty())
      std::printf("plan: %s (train it with `cann-train run --plan %s`)\n", f.out.c_str(),
                  f.out.c_str());
  }
  return 0;
}

}  // namespace

CommandMain add_simulate_command(CLI::App& app) {
  auto f = std::make_shared<SimulateFlags>();
  CLI::App* cmd =
      app.add_subcommand("simulate",
                         "Predict one strategy: step time, pipeline schedule, memory per stage, "
                         "goodput under failures, energy and cost.");
  cmd->add_option("--model", f->model, "Model: a shipped name or a YAML/config.json path")
      ->required();
  cmd->add_option("--cluster", f->cluster, "Cluster: a preset name or a YAML path")->required();
  cmd->add_option("--strategy", f->strategy,
                  "e.g. dp=8,tp=4,pp=2,ep=1,cp=1,sp=on,mbs=1,gbs=512,zero=1,"
                  "recompute=selective,vpp=1 (omitted keys take defaults; dp is derived)")
      ->required();
  cmd->add_option("--global-batch", f->global_batch,
                  "Sequences per step when the strategy has no gbs (default: about 4M tokens)")
      ->check(kPositive);
  add_plan_input_options(cmd, &f->input);
  cmd->add_flag("--json", f->json, "Print the prediction as JSON (see docs/planner.md)");
  cmd->add_option("--out", f->out,
                  "Write the strategy as a plan file that `cann-train run --plan FILE` trains");
  cmd->add_option("--trace", f->trace, "Write the simulated schedule as a Chrome trace JSON");
  return [f]() { return run_simulate(*f); };
}

}  // namespace cann::cli
