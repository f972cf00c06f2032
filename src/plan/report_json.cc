// JSON serialization of predictions and searches (see report_json.h and docs/planner.md).
#include "plan/report_json.h"

#include <nlohmann/json.hpp>

#include "plan/baseline.h"
#include "plan/error_band.h"

namespace cann::plan {
namespace {

using Json = nlohmann::ordered_json;

Json prediction_object(const PlanInput& in, const Prediction& p) {
  Json j;
  j["strategy"] = strategy_string(p.strategy);
  j["step_time_s"] = p.step_time_s;
  j["step_time_s_low"] = p.step_time_s_low;
  j["step_time_s_high"] = p.step_time_s_high;
  j["tokens_per_s"] = p.tokens_per_s;
  j["model_tflops_per_device"] = p.model_tflops_per_device;
  j["mfu"] = p.mfu;
  j["hfu"] = p.hfu;
  j["memory_peak_bytes"] = p.memory_peak_bytes;
  j["memory_limit_bytes"] = p.memory_limit_bytes;
  j["fits"] = p.fits;
  j["comm_ratio"] = p.comm_ratio;
  j["bubble_ratio"] = p.bubble_ratio;
  j["goodput"] = p.goodput.ratio;
  j["tei"] = p.tei;
  j["scaling_efficiency"] = p.scaling_efficiency;
  j["energy_kwh_per_step"] = p.energy_kwh_per_step;
  j["cost_usd_per_day"] = p.cost_usd_per_day;
  j["cost_usd_per_million_tokens"] = usd_per_million_tokens(in.cluster, p.tokens_per_s);
  j["cost_usd_per_hour"] = usd_per_hour(in.cluster);
  j["energy_j_per_token"] = joules_per_token(in.cluster, p.tokens_per_s);
  const TimeBreakdown& t = p.time;
  j["time_breakdown_s"] = {{"gemm", t.gemm_s},           {"memory_bound", t.stream_s},
                           {"recompute", t.recompute_s}, {"tp_comm", t.tp_comm_s},
                           {"ep_comm", t.ep_comm_s},     {"cp_comm", t.cp_comm_s},
                           {"pp_p2p", t.p2p_s},          {"dp_comm", t.dp_comm_s},
                           {"bubble", t.bubble_s},       {"optimizer", t.optimizer_s}};
  j["bottleneck_stage"] = p.bottleneck_stage;
  j["failures"] = {{"job_mtbf_s", p.goodput.job_mtbf_s},
                   {"checkpoint_s", p.goodput.checkpoint_s},
                   {"recovery_s", p.goodput.recovery_s},
                   {"checkpoint_interval_s", p.goodput.interval_s},
                   {"device_mtbf_hours", in.cluster.reliability.device_mtbf_hours}};
  Json stages = Json::array();
  for (const StageReport& s : p.stages) {
    Json layers = Json::array();
    for (const auto& [first, last] : s.layers) layers.push_back({first, last});
    stages.push_back({{"layers", layers},
                      {"embedding", s.embedding},
                      {"head", s.head},
                      {"fwd_s_per_micro_batch", s.fwd_s},
                      {"bwd_s_per_micro_batch", s.bwd_s},
                      {"dp_comm_s", s.dp_comm_s},
                      {"optimizer_s", s.optimizer_s},
                      {"memory_bytes",
                       {{"weights", s.weights_bytes},
                        {"gradients", s.grads_bytes},
                        {"optimizer", s.optimizer_bytes},
                        {"activations", s.activation_bytes},
                        {"transient", s.transient_bytes},
                        {"reserved", s.reserved_bytes},
                        {"total", s.total_bytes}}}});
  }
  j["stages"] = stages;
  return j;
}

Json context(const PlanInput& in) {
  Json j;
  j["model"] = in.model.name;
  j["model_family"] = std::string(model::family_name(in.model.family));
  j["model_params"] = static_cast<long long>(in.shape.total_params);
  if (in.shape.mtp_params > 0) j["mtp_params"] = static_cast<long long>(in.shape.mtp_params);
  j["seq_length"] = in.model.seq_length;
  j["attention"] = std::string(attention_kernel_name(in.cluster.device.attention));
  if (in.cluster.device.attention == AttentionKernel::kFused &&
      !in.cluster.device.fused_kernel.empty())
    j["attention_kernel"] = in.cluster.device.fused_kernel;
  j["precision"] = std::string(precision_name(in.cluster.device.precision));
  j["cluster"] = in.cluster.name;
  j["devices"] = in.cluster.num_devices();
  return j;
}

}  // namespace

std::string prediction_json(const PlanInput& in, const Prediction& p, int indent) {
  Json j = context(in);
  j.update(prediction_object(in, p));
  return j.dump(indent);
}

std::string search_json(const PlanInput& in, const SearchResult& r, int indent,
                        const Prediction* baseline, const std::string& no_baseline) {
  Json j = context(in);
  j["global_batch"] = r.global_batch;
  j["objective"] = std::string(objective_name(r.objective));
  j["objective_quantity"] = std::string(objective_quantity(r.objective));
  j["candidates_within_limits"] = r.within_limits;
  j["removed_by_cost"] = r.removed_by_cost;
  j["removed_by_goodput"] = r.removed_by_goodput;
  if (baseline) {
    j["baseline"] = {{"strategy", strategy_string(baseline->strategy)},
                     {"step_time_s", baseline->step_time_s},
                     {"tokens_per_s", baseline->tokens_per_s}};
  } else {
    j["baseline"] = nullptr;
    if (!no_baseline.empty()) j["baseline_missing"] = no_baseline;
  }
  j["candidates_in_space"] = r.space;
  j["candidates_evaluated"] = r.evaluated;
  j["candidates_pruned"] = r.pruned;
  j["search_time_s"] = r.search_time_s;
  j["feasible"] = r.feasible.size();
  j["pareto"] = r.pareto_count;
  Json list = Json::array();
  for (const Prediction& p : r.top) {
    Json o = prediction_object(in, p);
    o["objective_value"] = objective_value(r.objective, figures_of(in, p));
    // Whether the model can rank it apart from the best: their error bands on the objective
    // do not overlap.
    const ScoreBand a = objective_band(r.objective, figures_of(in, r.top[0]));
    const ScoreBand b = objective_band(r.objective, figures_of(in, p));
    o["within_band_of_best"] = bands_overlap({a.low, a.high}, {b.low, b.high});
    if (baseline) o["estimated_speedup"] = estimated_speedup(*baseline, p);
    list.push_back(o);
  }
  j["strategies"] = list;
  Json front = Json::array();
  for (const Candidate& c : r.feasible)
    if (c.pareto)
      front.push_back({{"strategy", strategy_string(c.strategy)},
                       {"step_time_s", c.step_time_s},
                       {"step_time_s_low", c.step_time_s_low},
                       {"step_time_s_high", c.step_time_s_high},
                       {"tokens_per_s", c.tokens_per_s},
                       {"memory_peak_bytes", c.memory_peak_bytes},
                       {"goodput", c.goodput},
                       {"tei", c.tei},
                       {"cost_usd_per_million_tokens", c.usd_per_million_tokens},
                       {"energy_j_per_token", c.joules_per_token}});
  j["pareto_front"] = front;
  return j.dump(indent);
}

}  // namespace cann::plan
