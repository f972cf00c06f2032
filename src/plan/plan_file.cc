#include "plan/plan_file.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/fs.h"
#include "core/numbers.h"
#include "model/spec_json.h"
#include "plan/yaml_read.h"

namespace cann::plan {
namespace {

constexpr int kFormat = 1;

// The predicted figures a plan keeps, in the order it writes them.
const std::vector<std::string>& predicted_keys() {
  static const std::vector<std::string> keys = {
      "step_time_s", "step_time_s_low", "step_time_s_high", "tokens_per_s",
      "mfu",         "memory_peak_gb",  "comm_ratio"};
  return keys;
}

// Predicted figures a plan carries when its planner priced them (older plans lack them): the
// efficiency figures a run measures too (core/efficiency.h).
const std::vector<std::string>& optional_predicted_keys() {
  static const std::vector<std::string> keys = {"scaling_efficiency", "goodput", "tei",
                                                "cost_usd_per_hour", "energy_kwh_per_step"};
  return keys;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

Status bad(const std::string& path, const std::string& what) {
  return InvalidArgument("plan file " + path + ": " + what +
                         "; hint: write plans with `cann-train search --out FILE` or "
                         "`cann-train simulate --out FILE`");
}

// Reads key `k` of map `n` as T; a missing or malformed key is one line naming it.
template <typename T>
StatusOr<T> get(const YAML::Node& n, const std::string& k, const std::string& path,
                const std::string& where = "") {
  return yaml_get<T>(n, k, where, [&](const std::string& what) { return bad(path, what); });
}

}  // namespace

std::string model_fingerprint(const model::ModelSpec& spec) {
  model::ModelSpec s = spec;
  s.name.clear();
  s.source.clear();
  s.seq_length = 0;  // the plan keeps its sequence length apart (a planner override sets it)
  const std::string text = model::spec_to_json(s);
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  return hex64(h);
}

PlanFile make_plan_file(const PlanInput& in, const Prediction& p, const std::string& model_arg,
                        const std::string& cluster_arg, const std::string& path) {
  PlanFile f;
  f.model = model_arg;
  f.model_name = in.model.name;
  f.model_fingerprint = model_fingerprint(in.model);
  f.model_params = in.shape.total_params;
  f.cluster = cluster_arg;
  f.nodes = in.cluster.nodes;
  f.devices_per_node = in.cluster.devices_per_node;
  f.global_batch = p.strategy.gbs;
  f.seq_len = in.seq_len > 0 ? in.seq_len : in.model.seq_length;
  if (in.cluster.device.precision == Precision::kFp32)
    f.precision = in.cluster.device.bf16_gemms ? "bf16" : "fp32";
  f.strategy = p.strategy;
  f.predicted = {{"step_time_s", p.step_time_s},
                 {"step_time_s_low", p.step_time_s_low},
                 {"step_time_s_high", p.step_time_s_high},
                 {"tokens_per_s", p.tokens_per_s},
                 {"mfu", p.mfu},
                 {"memory_peak_gb", p.memory_peak_bytes / 1e9},
                 {"comm_ratio", p.comm_ratio},
                 {"scaling_efficiency", p.scaling_efficiency},
                 {"goodput", p.goodput.ratio},
                 {"tei", p.tei},
                 {"cost_usd_per_hour", p.cost_usd_per_day / 24},
                 {"energy_kwh_per_step", p.energy_kwh_per_step}};
  f.launch = "cann-train run --plan " + path;
  if (f.nodes > 1) f.launch += " --nnodes " + std::to_string(f.nodes) + " --rdzv redis://HOST:PORT";
  return f;
}

std::string plan_file_text(const PlanFile& f) {
  YAML::Emitter out;
  out.SetIndent(2);
  out << YAML::Comment(
             "cann-train plan: `cann-train run --plan THIS_FILE` trains it; `cann-train plan "
             "diff A B` compares two")
      << YAML::Newline;
  out << YAML::BeginMap;
  out << YAML::Key << "format" << YAML::Value << kFormat;
  out << YAML::Key << "model" << YAML::Value << f.model;
  out << YAML::Key << "model_name" << YAML::Value << f.model_name;
  out << YAML::Key << "model_fingerprint" << YAML::Value << f.model_fingerprint;
  out << YAML::Key << "model_params" << YAML::Value << number(f.model_params);
  out << YAML::Key << "cluster" << YAML::Value << f.cluster;
  out << YAML::Key << "nodes" << YAML::Value << f.nodes;
  out << YAML::Key << "devices_per_node" << YAML::Value << f.devices_per_node;
  out << YAML::Key << "global_batch" << YAML::Value << f.global_batch;
  out << YAML::Key << "seq_len" << YAML::Value << f.seq_len;
  if (!f.precision.empty()) out << YAML::Key << "precision" << YAML::Value << f.precision;
  out << YAML::Key << "strategy" << YAML::Value << strategy_string(f.strategy);
  out << YAML::Key << "predicted" << YAML::Value << YAML::BeginMap;
  for (const auto* keys : {&predicted_keys(), &optional_predicted_keys()})
    for (const std::string& k : *keys)
      if (auto it = f.predicted.find(k); it != f.predicted.end())
        out << YAML::Key << k << YAML::Value << number(it->second);
  if (auto it = f.predicted.find("estimated_speedup"); it != f.predicted.end())
    out << YAML::Key << "estimated_speedup" << YAML::Value << number(it->second);
  out << YAML::EndMap;
  if (!f.baseline.empty()) out << YAML::Key << "baseline" << YAML::Value << f.baseline;
  out << YAML::Key << "launch" << YAML::Value << f.launch;
  if (f.measured) {
    const PlanMeasured& m = *f.measured;
    out << YAML::Key << "measured" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "world" << YAML::Value << m.world;
    out << YAML::Key << "steps" << YAML::Value << m.steps;
    out << YAML::Key << "step_time_s" << YAML::Value << number(m.step_time_s);
    out << YAML::Key << "tokens_per_s" << YAML::Value << number(m.tokens_per_s);
    out << YAML::Key << "memory_peak_gb" << YAML::Value << number(m.memory_peak_gb);
    out << YAML::Key << "loss_first" << YAML::Value << number(m.loss_first);
    out << YAML::Key << "loss_last" << YAML::Value << number(m.loss_last);
    if (m.val_loss >= 0) out << YAML::Key << "val_loss" << YAML::Value << number(m.val_loss);
    for (const auto& [k, v] : m.efficiency) out << YAML::Key << k << YAML::Value << number(v);
    out << YAML::Key << "finished_at" << YAML::Value << m.finished_at;
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

Status write_plan_file(const std::string& path, const PlanFile& plan) {
  Status s = write_file_atomic(path, plan_file_text(plan));
  if (!s.ok())
    return IoError("cannot write plan file " + path + ": " + s.message() +
                   "; hint: check the directory exists and is writable");
  return OkStatus();
}

StatusOr<PlanFile> read_plan_file(const std::string& path) {
  CANN_ASSIGN_OR_RETURN(
      const YAML::Node n,
      load_yaml_map(path, "plan file", [&](const std::string& what) { return bad(path, what); }));
  PlanFile f;
  CANN_ASSIGN_OR_RETURN(const int format, get<int>(n, "format", path));
  if (format != kFormat)
    return bad(path, "format " + std::to_string(format) + ", this build reads format " +
                         std::to_string(kFormat));
  CANN_ASSIGN_OR_RETURN(f.model, get<std::string>(n, "model", path));
  CANN_ASSIGN_OR_RETURN(f.model_name, get<std::string>(n, "model_name", path));
  CANN_ASSIGN_OR_RETURN(f.model_fingerprint, get<std::string>(n, "model_fingerprint", path));
  CANN_ASSIGN_OR_RETURN(f.model_params, get<double>(n, "model_params", path));
  CANN_ASSIGN_OR_RETURN(f.cluster, get<std::string>(n, "cluster", path));
  CANN_ASSIGN_OR_RETURN(f.nodes, get<int>(n, "nodes", path));
  CANN_ASSIGN_OR_RETURN(f.devices_per_node, get<int>(n, "devices_per_node", path));
  CANN_ASSIGN_OR_RETURN(f.global_batch, get<int>(n, "global_batch", path));
  CANN_ASSIGN_OR_RETURN(f.seq_len, get<int>(n, "seq_len", path));
  if (f.nodes < 1 || f.devices_per_node < 1 || f.global_batch < 1 || f.seq_len < 1)
    return bad(path, "nodes, devices_per_node, global_batch and seq_len must be positive");
  if (n["precision"]) {
    CANN_ASSIGN_OR_RETURN(f.precision, get<std::string>(n, "precision", path));
    if (f.precision != "fp32" && f.precision != "bf16")
      return bad(path, "precision '" + f.precision + "': the engine trains fp32 or bf16 GEMMs");
  }
  CANN_ASSIGN_OR_RETURN(const std::string strategy, get<std::string>(n, "strategy", path));
  StatusOr<Strategy> s = parse_strategy(strategy);
  if (!s.ok()) return bad(path, "strategy: " + s.status().message());
  f.strategy = *s;
  const YAML::Node pred = n["predicted"];
  if (!pred || !pred.IsMap()) return bad(path, "missing map 'predicted'");
  for (const std::string& k : predicted_keys()) {
    CANN_ASSIGN_OR_RETURN(const double v, get<double>(pred, k, path, "predicted"));
    f.predicted[k] = v;
  }
  for (const std::string& k : optional_predicted_keys()) {
    if (!pred[k]) continue;
    CANN_ASSIGN_OR_RETURN(const double v, get<double>(pred, k, path, "predicted"));
    f.predicted[k] = v;
  }
  if (pred["estimated_speedup"]) {
    CANN_ASSIGN_OR_RETURN(f.predicted["estimated_speedup"],
                          get<double>(pred, "estimated_speedup", path, "predicted"));
    CANN_ASSIGN_OR_RETURN(f.baseline, get<std::string>(n, "baseline", path));
  }
  CANN_ASSIGN_OR_RETURN(f.launch, get<std::string>(n, "launch", path));
  if (const YAML::Node m = n["measured"]) {
    if (!m.IsMap()) return bad(path, "'measured' is not a map");
    PlanMeasured r;
    CANN_ASSIGN_OR_RETURN(r.world, get<int>(m, "world", path, "measured"));
    CANN_ASSIGN_OR_RETURN(r.steps, get<int>(m, "steps", path, "measured"));
    CANN_ASSIGN_OR_RETURN(r.step_time_s, get<double>(m, "step_time_s", path, "measured"));
    CANN_ASSIGN_OR_RETURN(r.tokens_per_s, get<double>(m, "tokens_per_s", path, "measured"));
    CANN_ASSIGN_OR_RETURN(r.memory_peak_gb, get<double>(m, "memory_peak_gb", path, "measured"));
    CANN_ASSIGN_OR_RETURN(r.loss_first, get<double>(m, "loss_first", path, "measured"));
    CANN_ASSIGN_OR_RETURN(r.loss_last, get<double>(m, "loss_last", path, "measured"));
    if (m["val_loss"]) {
      CANN_ASSIGN_OR_RETURN(r.val_loss, get<double>(m, "val_loss", path, "measured"));
    }
    CANN_ASSIGN_OR_RETURN(r.finished_at, get<std::string>(m, "finished_at", path, "measured"));
    for (const char* k : {"tei", "mfu", "scaling_efficiency", "comm_ratio", "goodput"}) {
      if (!m[k]) continue;
      CANN_ASSIGN_OR_RETURN(r.efficiency[k], get<double>(m, k, path, "measured"));
    }
    f.measured = r;
  }
  return f;
}

std::string plan_diff(const PlanFile& a, const PlanFile& b, const std::string& a_name,
                      const std::string& b_name) {
  struct Row {
    std::string key, left, right, ratio;
  };
  std::vector<Row> rows;
  auto text = [&](const std::string& k, const std::string& l, const std::string& r) {
    if (l != r) rows.push_back({k, l, r, ""});
  };
  auto num = [&](const std::string& k, std::optional<double> l, std::optional<double> r) {
    if (!l && !r) return;
    const std::string ls = l ? number(*l) : "-", rs = r ? number(*r) : "-";
    if (ls == rs) return;
    std::string ratio;
    if (l && r && *l != 0) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.3fx", *r / *l);
      ratio = buf;
    }
    rows.push_back({k, ls, rs, ratio});
  };
  text("model", a.model_name, b.model_name);
  text("model_fingerprint", a.model_fingerprint, b.model_fingerprint);
  num("model_params", a.model_params, b.model_params);
  text("cluster", a.cluster, b.cluster);
  num("devices", a.devices(), b.devices());
  num("global_batch", a.global_batch, b.global_batch);
  num("seq_len", a.seq_len, b.seq_len);
  text("precision", a.precision, b.precision);
  text("strategy", strategy_string(a.strategy), strategy_string(b.strategy));
  for (const std::string& k : predicted_keys()) {
    auto pick = [&](const PlanFile& f) -> std::optional<double> {
      auto it = f.predicted.find(k);
      return it == f.predicted.end() ? std::nullopt : std::optional<double>(it->second);
    };
    num("predicted." + k, pick(a), pick(b));
  }
  auto meas = [](const PlanFile& f, double PlanMeasured::*field) -> std::optional<double> {
    return f.measured ? std::optional<double>((*f.measured).*field) : std::nullopt;
  };
  num("measured.step_time_s", meas(a, &PlanMeasured::step_time_s),
      meas(b, &PlanMeasured::step_time_s));
  num("measured.tokens_per_s", meas(a, &PlanMeasured::tokens_per_s),
      meas(b, &PlanMeasured::tokens_per_s));
  num("measured.memory_peak_gb", meas(a, &PlanMeasured::memory_peak_gb),
      meas(b, &PlanMeasured::memory_peak_gb));
  num("measured.loss_last", meas(a, &PlanMeasured::loss_last), meas(b, &PlanMeasured::loss_last));
  for (const char* k : {"tei", "mfu"}) {
    auto fig = [k](const PlanFile& f) -> std::optional<double> {
      if (!f.measured) return std::nullopt;
      const auto it = f.measured->efficiency.find(k);
      return it == f.measured->efficiency.end() ? std::nullopt : std::optional<double>(it->second);
    };
    num(std::string("measured.") + k, fig(a), fig(b));
  }
  if (rows.empty()) return "the plans are the same\n";
  size_t w0 = 5, w1 = a_name.size(), w2 = b_name.size();
  for (const Row& r : rows) {
    w0 = std::max(w0, r.key.size());
    w1 = std::max(w1, r.left.size());
    w2 = std::max(w2, r.right.size());
  }
  auto pad = [](std::string s, size_t w) {
    s.resize(std::max(s.size(), w), ' ');
    return s;
  };
  std::string out = pad("field", w0) + "  " + pad(a_name, w1) + "  " + pad(b_name, w2) + "  B/A\n";
  for (const Row& r : rows)
    out +=
        pad(r.key, w0) + "  " + pad(r.left, w1) + "  " + pad(r.right, w2) + "  " + r.ratio + "\n";
  return out;
}

}  // namespace cann::plan
