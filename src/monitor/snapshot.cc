// RankSnapshot <-> JSON.
#include "monitor/snapshot.h"

#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/json_line.h"

namespace cann::monitor {

std::string RankSnapshot::to_json() const {
  JsonLine j;
  j.add("rank", rank)
      .add("host", host)
      .add("time", time)
      .add("step", step)
      .add("total_steps", total_steps)
      .add("samples", samples)
      .add("loss", loss)
      .add("val_loss", val_loss)
      .add("lr", lr)
      .add("grad_norm", grad_norm)
      .add("step_time_s", step_time_s)
      .add("forward_backward_s", forward_backward_s)
      .add("forward_s", forward_s)
      .add("backward_s", backward_s)
      .add("tokens_per_s", tokens_per_s)
      .add("tflops_per_device", tflops_per_device)
      .add("comm_time_s", comm_time_s)
      .add("comm_exposed_s", comm_exposed_s)
      .add("comm_bytes_total", comm_bytes_total)
      .add("memory_bytes", memory_bytes)
      .add("resident_bytes", resident_bytes)
      .add("compute_utilization", compute_utilization)
      .add("expert_tokens", expert_tokens)
      .add("expert_rows", expert_rows);
  if (!nic_errors.empty()) {
    nlohmann::json nics = nlohmann::json::array();
    for (const NicCounter& c : nic_errors) nics.push_back({c.device, c.counter, c.value});
    j.add_raw("nic_errors", nics.dump());
  }
  if (!link_gbps.empty()) {
    std::string links = "[";
    for (size_t i = 0; i < link_gbps.size(); ++i) {
      if (i > 0) links += ",";
      char num[32];
      std::snprintf(num, sizeof(num), "%.6g", std::isfinite(link_gbps[i]) ? link_gbps[i] : 0.0);
      links += num;
    }
    j.add_raw("link_gbps", links + "]");
  }
  const Efficiency& e = efficiency;
  if (e.tei >= 0) {
    nlohmann::json eff = {{"scaling_efficiency", e.scaling_efficiency},
                          {"comm_ratio", e.comm_ratio},
                          {"goodput", e.goodput},
                          {"tei", e.tei}};
    if (e.mfu >= 0) eff["mfu"] = e.mfu;
    if (e.cost_usd_per_hour >= 0) eff["cost_usd_per_hour"] = e.cost_usd_per_hour;
    if (e.energy_kwh_per_step >= 0) eff["energy_kwh_per_step"] = e.energy_kwh_per_step;
    j.add_raw("efficiency", eff.dump());
  }
  if (!predicted.empty()) j.add_raw("predicted", nlohmann::json(predicted).dump());
  return j.str();
}

StatusOr<RankSnapshot> RankSnapshot::from_json(const std::string& text) {
  RankSnapshot s;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    s.rank = j.at("rank").get<int>();
    s.host = j.value("host", std::string());
    s.time = j.value("time", 0.0);
    s.step = j.value("step", int64_t{0});
    s.total_steps = j.value("total_steps", int64_t{0});
    s.samples = j.value("samples", int64_t{0});
    // Non-finite numbers were written as null.
    auto num = [&](const char* k, double fallback) {
      return j.contains(k) && j[k].is_number() ? j[k].get<double>() : fallback;
    };
    // A diverged run's loss and gradient norm are NaN or infinite, written as null: read back
    // as NaN, never as a plausible number, so the hub's detectors and gauges see divergence.
    auto figure = [&](const char* k, double fallback) {
      return j.contains(k) && j[k].is_null() ? std::nan("") : num(k, fallback);
    };
    s.loss = figure("loss", 0.0);
    s.val_loss = figure("val_loss", -1.0);
    s.lr = num("lr", 0.0);
    s.grad_norm = figure("grad_norm", 0.0);
    s.step_time_s = num("step_time_s", 0.0);
    s.forward_backward_s = num("forward_backward_s", 0.0);
    s.forward_s = num("forward_s", 0.0);
    s.backward_s = num("backward_s", 0.0);
    s.tokens_per_s = num("tokens_per_s", 0.0);
    s.tflops_per_device = num("tflops_per_device", 0.0);
    s.comm_time_s = num("comm_time_s", 0.0);
    s.comm_exposed_s = num("comm_exposed_s", 0.0);
    s.comm_bytes_total = j.value("comm_bytes_total", int64_t{0});
    s.memory_bytes = j.value("memory_bytes", int64_t{0});
    s.resident_bytes = j.value("resident_bytes", int64_t{0});
    s.compute_utilization = num("compute_utilization", -1.0);
    if (j.contains("nic_errors") && j["nic_errors"].is_array())
      for (const auto& c : j["nic_errors"])
        s.nic_errors.push_back(
            {c.at(0).get<std::string>(), c.at(1).get<std::string>(), c.at(2).get<int64_t>()});
    if (j.contains("expert_tokens"))
      s.expert_tokens = j["expert_tokens"].get<std::vector<int64_t>>();
    s.expert_rows = j.value("expert_rows", int64_t{-1});
    if (j.contains("link_gbps") && j["link_gbps"].is_array()) {
      for (const auto& v : j["link_gbps"])
        s.link_gbps.push_back(v.is_number() ? v.get<double>() : 0.0);
    }
    if (j.contains("efficiency") && j["efficiency"].is_object()) {
      const nlohmann::json& e = j["efficiency"];
      auto fig = [&](const char* k) {
        return e.contains(k) && e[k].is_number() ? e[k].get<double>() : -1.0;
      };
      s.efficiency = {fig("scaling_efficiency"), fig("comm_ratio"), fig("goodput"), fig("tei"),
                      fig("mfu"), fig("cost_usd_per_hour"), fig("energy_kwh_per_step")};
    }
    if (j.contains("predicted") && j["predicted"].is_object())
      for (const auto& [k, v] : j["predicted"].items())
        if (v.is_number()) s.predicted[k] = v.get<double>();
  } catch (const std::exception& e) {
    return DataLoss(std::string("malformed rank snapshot: ") + e.what());
  }
  return s;
}

}  // namespace cann::monitor
