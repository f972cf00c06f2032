#include "cli/run_plan.h"

#include <CLI/CLI.hpp>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>

#include "core/timer.h"
#include "kernels/cpu/gemm.h"
#include "model/spec.h"
#include "plan/cluster.h"
#include "plan/plan_file.h"
#include "plan/plan_input.h"
#include "plan/search.h"

namespace cann::cli {
namespace {

bool given(CLI::App* run, const char* flag) { return run->get_option(flag)->count() > 0; }

Status disagrees(const std::string& path, const std::string& flag, const std::string& value,
                 const std::string& planned) {
  return InvalidArgument("--plan " + path + " sets " + flag + " " + planned + "; " + flag + " " +
                         value + " disagrees; hint: drop " + flag +
                         ", or plan again with `cann-train search --out`");
}

// The plan's cluster resized to `world` processes over `nnodes` nodes, searched again for the
// same model, global batch and sequence over layouts the engine trains.
StatusOr<plan::PlanFile> replan(const plan::PlanFile& old, const std::string& new_path,
                                const train::TrainConfig& config, int nnodes, int world) {
  if (world % nnodes != 0)
    return InvalidArgument("--replan: " + std::to_string(world) + " processes do not split over " +
                           std::to_string(nnodes) + " nodes");
  plan::PlanOverrides o;
  o.seq_len = old.seq_len;
  if (old.precision == "bf16") o.precision = "bf16";
  CANN_ASSIGN_OR_RETURN(plan::PlanInput in, plan::load_plan_input(old.model, old.cluster, o));
  in.cluster.nodes = nnodes;
  in.cluster.devices_per_node = world / nnodes;
  plan::SearchOptions opt;
  opt.global_batch = old.global_batch;
  opt.engine_only = true;
  opt.engine.world = world;
  opt.engine.seq_len = old.seq_len;
  opt.engine.compress = config.compress;
  opt.top_k = 1;
  CANN_ASSIGN_OR_RETURN(plan::SearchResult r, plan::search(in, opt));
  if (r.top.empty())
    return InvalidArgument("--replan: no layout the engine trains fits model " + old.model_name +
                           " on " + std::to_string(world) + " devices of cluster " + old.cluster +
                           " with global batch " + std::to_string(old.global_batch) +
                           "; hint: launch the plan's " + std::to_string(old.devices()) +
                           " processes");
  return plan::make_plan_file(in, r.top[0], old.model, old.cluster, new_path);
}

std::string resized_path(const std::string& path, int world) {
  std::filesystem::path p(path);
  const std::string ext = p.extension().string();
  return (p.parent_path() / (p.stem().string() + "-" + std::to_string(world) + "dev" +
                             (ext.empty() ? ".yaml" : ext)))
      .string();
}

}  // namespace

void add_plan_flags(CLI::App* run, PlanFlags* flags) {
  const char* kPlan = "Plans";
  run->add_option("--plan", flags->path,
                  "Train a plan file written by `search --out` or `simulate --out` (model, "
                  "strategy, batch, sequence, processes); the measured figures are written "
                  "into it at the end")
      ->group(kPlan);
  run->add_flag("--replan", flags->replan,
                "With --plan: when this launch's processes differ from the plan's devices, plan "
                "again for them on the plan's cluster (written beside the plan)")
      ->group(kPlan);
  run->add_option("--plan-out", flags->out,
                  "With --plan: write the plan with the measured figures here instead of into "
                  "the plan file")
      ->group(kPlan);
}

Status apply_plan(CLI::App* run, PlanFlags* flags, train::TrainConfig* config,
                  int* nproc_per_node, bool nproc_given, int nnodes, int world) {
  if (flags->path.empty()) {
    if (flags->replan || !flags->out.empty())
      return InvalidArgument(std::string(flags->replan ? "--replan" : "--plan-out") +
                             " needs --plan FILE; hint: write one with `cann-train search --out "
                             "FILE`");
    return OkStatus();
  }
  const std::string path = flags->path;
  CANN_ASSIGN_OR_RETURN(plan::PlanFile plan, plan::read_plan_file(path));
  if (given(run, "--model")) {
    CANN_ASSIGN_OR_RETURN(model::ModelSpec spec, model::load_model_spec(config->model));
    if (plan::model_fingerprint(spec) != plan.model_fingerprint)
      return InvalidArgument("--plan " + path + " was made for model '" + plan.model_name +
                             "' (fingerprint " + plan.model_fingerprint + "); --model " +
                             config->model + " is '" + spec.name + "' (fingerprint " +
                             plan::model_fingerprint(spec) +
                             "); hint: drop --model, or plan this model with `cann-train search "
                             "--model " +
                             config->model + " --out FILE`");
  } else {
    config->model = plan.model;
    CANN_ASSIGN_OR_RETURN(model::ModelSpec spec, model::load_model_spec(config->model));
    if (plan::model_fingerprint(spec) != plan.model_fingerprint)
      return InvalidArgument("--plan " + path + ": model " + plan.model +
                             " has changed since it was planned (fingerprint " +
                             plan::model_fingerprint(spec) + ", planned " +
                             plan.model_fingerprint + "); hint: plan it again with `cann-train "
                             "search --model " +
                             plan.model + " --out " + path + "`");
  }
  if (given(run, "--strategy"))
    return disagrees(path, "--strategy", run->get_option("--strategy")->as<std::string>(),
                     plan::strategy_string(plan.strategy));
  if (given(run, "--batch-size") && config->batch_size != plan.global_batch)
    return disagrees(path, "--batch-size", std::to_string(config->batch_size),
                     std::to_string(plan.global_batch));
  if (given(run, "--seq-len") && config->seq_len != plan.seq_len)
    return disagrees(path, "--seq-len", std::to_string(config->seq_len),
                     std::to_string(plan.seq_len));
  if (!plan.precision.empty()) {
    const std::string mine = kernels::precision_name(config->precision);
    if (given(run, "--precision") && mine != plan.precision)
      return disagrees(path, "--precision", mine, plan.precision);
    CANN_ASSIGN_OR_RETURN(config->precision, kernels::parse_gemm_precision(plan.precision));
  }
  if (!nproc_given && world <= 0 && nnodes == plan.nodes) *nproc_per_node = plan.devices_per_node;
  const int processes = world > 0 ? world : *nproc_per_node * nnodes;
  if (processes != plan.devices()) {
    if (!flags->replan)
      return InvalidArgument("--plan " + path + " was made for " +
                             std::to_string(plan.devices()) + " devices (" +
                             std::to_string(plan.nodes) + " nodes x " +
                             std::to_string(plan.devices_per_node) + "); this launch has " +
                             std::to_string(processes) + " processes; hint: launch " +
                             std::to_string(plan.nodes) + " node(s) of " +
                             std::to_string(plan.devices_per_node) +
                             " processes, or add --replan to plan again for " +
                             std::to_string(processes));
    const std::string new_path = flags->out.empty() ? resized_path(path, processes) : flags->out;
    CANN_ASSIGN_OR_RETURN(plan::PlanFile fresh, replan(plan, new_path, *config, nnodes, processes));
    CANN_RETURN_IF_ERROR(plan::write_plan_file(new_path, fresh));
    if (!config->quiet)
      std::printf("re-planned %s for %d devices: strategy %s (planned %s), predicted %.3g s/step; "
                  "written to %s\n",
                  path.c_str(), processes, plan::strategy_string(fresh.strategy).c_str(),
                  plan::strategy_string(plan.strategy).c_str(), fresh.predicted["step_time_s"],
                  new_path.c_str());
    plan = fresh;
    flags->path = new_path;
    flags->out = new_path;
    flags->replan = false;
  }
  config->strategy = plan.strategy;
  config->batch_size = plan.global_batch;
  config->seq_len = plan.seq_len;
  if (flags->out.empty()) flags->out = flags->path;
  // The efficiency figures: the plan's predictions beside the measured ones, and its
  // cluster's devices for the price and power (a cluster that no longer loads: unknown).
  config->predicted = plan.predicted;
  if (auto cluster = plan::load_cluster_spec(plan.cluster); cluster.ok()) {
    // A bf16 plan's MFU is against the bf16 GEMM rate, as the planner's is.
    cluster->device.bf16_gemms = plan.precision == "bf16" && cluster->device.bf16_gemm_tflops > 0;
    config->devices = {cluster->device.mfu_peak_tflops(), cluster->device.tdp_watts,
                       cluster->device.hourly_cost_usd,
                       "cluster " + plan.cluster + " of plan " + flags->path};
  }
  return OkStatus();
}

std::vector<std::string> plan_worker_args(const std::vector<std::string>& args,
                                          const PlanFlags& flags) {
  if (flags.path.empty()) return args;
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--plan" || a == "--plan-out") {
      ++i;
      continue;
    }
    if (a == "--replan" || a.rfind("--plan=", 0) == 0 || a.rfind("--plan-out=", 0) == 0) continue;
    out.push_back(a);
  }
  out.insert(out.end(), {"--plan", flags.path, "--plan-out", flags.out});
  return out;
}

Status record_plan_run(const PlanFlags& flags, const train::TrainConfig& config,
                       const train::RunSummary& summary, int world) {
  if (flags.out.empty() || summary.step_times_s.empty()) return OkStatus();
  CANN_ASSIGN_OR_RETURN(plan::PlanFile plan, plan::read_plan_file(flags.path));
  std::vector<double> t = summary.step_times_s;
  // The first two steps warm caches and threads up; leave them out when there are more.
  if (t.size() > 4) t.erase(t.begin(), t.begin() + 2);
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  plan::PlanMeasured m;
  m.world = world;
  m.steps = static_cast<int>(summary.step_times_s.size());
  m.step_time_s = t[t.size() / 2];
  m.tokens_per_s = static_cast<double>(config.batch_size) * plan.seq_len / m.step_time_s;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  m.memory_peak_gb = static_cast<double>(usage.ru_maxrss) * 1024.0 / 1e9;
  m.loss_first = summary.first_loss;
  m.loss_last = summary.last_loss;
  m.val_loss = summary.last_val_loss;
  m.efficiency = summary.efficiency;
  m.finished_at = utc_timestamp(std::time(nullptr));
  plan.measured = m;
  return plan::write_plan_file(flags.out, plan);
}

}  // namespace cann::cli
