// Published runs against the planner (see validation.h).
#include "plan/validation.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "plan/plan_input.h"

namespace cann::plan {
namespace {

Status case_error(const std::string& source, const std::string& id, const std::string& what) {
  return InvalidArgument(source + ": case '" + id + "': " + what);
}

StatusOr<Measure> parse_measure(const std::string& m) {
  if (m == "iteration_time_s") return Measure::kIterationTime;
  if (m == "layer_time_ms") return Measure::kLayerTime;
  if (m == "tflops_per_gpu") return Measure::kTflopsPerGpu;
  if (m == "mfu") return Measure::kMfu;
  if (m == "tokens_per_s_per_gpu") return Measure::kTokensPerGpu;
  return InvalidArgument("unknown measure '" + m + "'");
}

StatusOr<FlopFormula> parse_formula(const std::string& f) {
  if (f.empty() || f == "none") return FlopFormula::kNone;
  if (f == "narayanan") return FlopFormula::kNarayanan;
  if (f == "megatron") return FlopFormula::kMegatron;
  if (f == "palm") return FlopFormula::kPalm;
  if (f == "6n_all") return FlopFormula::kSixNAll;
  return InvalidArgument("unknown FLOP formula '" + f + "'");
}

// FLOPs of one iteration of `s` under the source's formula.
double iteration_flops(const PlanInput& in, const Strategy& s, FlopFormula f) {
  const model::ModelSpec& m = in.model;
  const double B = s.gbs, seq = m.seq_length, l = m.num_hidden_layers, h = m.hidden_size;
  const double V = m.vocab_size;
  switch (f) {
    case FlopFormula::kNarayanan:
      return 96 * B * seq * l * h * h * (1 + seq / (6 * h) + V / (16 * l * h));
    case FlopFormula::kMegatron:
      return 72 * B * seq * l * h * h * (1 + seq / (6 * h) + V / (12 * l * h));
    case FlopFormula::kPalm:
      return in.shape.flops_per_token * B * seq;
    case FlopFormula::kSixNAll:
      return (6 * in.shape.total_params + 12 * l * h * seq) * B * seq;
    case FlopFormula::kNone:
      break;
  }
  return 0;
}

// Linear interpolation between order statistics (the common "type 7" quantile).
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * (v.size() - 1);
  const size_t i = static_cast<size_t>(pos);
  return i + 1 < v.size() ? v[i] + (pos - i) * (v[i + 1] - v[i]) : v[i];
}

}  // namespace

StatusOr<std::vector<ValidationCase>> parse_validation_cases(const std::string& text,
                                                             const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    return InvalidArgument(source + ":" + std::to_string(e.mark.line + 1) +
                           ": malformed YAML: " + e.msg);
  }
  if (!root["cases"] || !root["cases"].IsSequence())
    return InvalidArgument(source + ": expected a list under 'cases'");
  std::vector<ValidationCase> out;
  std::set<std::string> ids;
  for (const auto& n : root["cases"]) {
    ValidationCase c;
    try {
      c.id = n["id"].as<std::string>();
      if (!ids.insert(c.id).second) return case_error(source, c.id, "given twice");
      c.source = n["source"].as<std::string>();
      c.kind = n["kind"].as<std::string>();
      const YAML::Node model = n["model"];
      if (model.IsScalar()) {
        c.model = model.Scalar();
      } else {
        YAML::Emitter e;
        e << model;
        c.model = e.c_str();
      }
      c.cluster = n["cluster"].as<std::string>();
      c.overrides.nodes = n["gpus"].as<int>();  // converted to nodes below
      if (n["attention"]) c.overrides.attention = n["attention"].as<std::string>();
      if (n["precision"]) c.overrides.precision = n["precision"].as<std::string>();
      if (n["memory_gb"]) c.memory_gb = n["memory_gb"].as<double>();
      if (n["inter_node_GBps"]) c.inter_node_GBps = n["inter_node_GBps"].as<double>();
      c.strategy = n["strategy"].as<std::string>();
      if (n["zero3_gather"]) {
        const std::string g = n["zero3_gather"].as<std::string>();
        if (g != "tensor" && g != "layer")
          return case_error(source, c.id, "zero3_gather must be tensor or layer, not '" + g + "'");
        c.zero3_per_tensor = g == "tensor";
      }
      if (n["optimizer_state"]) {
        const std::string o = n["optimizer_state"].as<std::string>();
        if (o != "bf16" && o != "fp32")
          return case_error(source, c.id, "optimizer_state must be bf16 or fp32, not '" + o + "'");
        c.bf16_optimizer_state = o == "bf16";
      }
      CANN_ASSIGN_OR_RETURN(c.measure, parse_measure(n["measure"].as<std::string>()));
      CANN_ASSIGN_OR_RETURN(c.formula,
                            parse_formula(n["formula"] ? n["formula"].as<std::string>() : ""));
      c.published = n["published"].as<double>();
      if (n["calibration"]) c.calibration = n["calibration"].as<bool>();
      if (n["assumptions"]) c.assumptions = n["assumptions"].as<std::string>();
    } catch (const YAML::Exception& e) {
      return case_error(source, c.id.empty() ? "?" : c.id,
                        std::string("bad or missing field: ") + e.what());
    }
    if ((c.measure == Measure::kTflopsPerGpu || c.measure == Measure::kMfu ||
         c.measure == Measure::kTokensPerGpu) &&
        c.formula == FlopFormula::kNone && c.measure != Measure::kTokensPerGpu)
      return case_error(source, c.id, "a TFLOP/s or MFU figure needs its source's formula");
    if (!(c.published > 0)) return case_error(source, c.id, "published must be positive");
    out.push_back(std::move(c));
  }
  return out;
}

StatusOr<ValidationOutcome> run_validation_case(const ValidationCase& c) {
  ValidationOutcome o;
  o.c = c;
  StatusOr<model::ModelSpec> spec =
      c.model.find('\n') == std::string::npos && c.model.find(':') == std::string::npos
          ? model::load_model_spec(c.model)
          : model::parse_model_spec(c.model, c.id);
  if (!spec.ok()) return spec.status();
  CANN_ASSIGN_OR_RETURN(ClusterSpec cluster, load_cluster_spec(c.cluster));
  const int gpus = c.overrides.nodes;
  if (gpus % cluster.devices_per_node != 0)
    return InvalidArgument(c.id + ": " + std::to_string(gpus) + " GPUs are not whole nodes");
  cluster.nodes = gpus / cluster.devices_per_node;
  if (c.memory_gb > 0) cluster.device.memory_gb = c.memory_gb;
  if (c.inter_node_GBps > 0) cluster.inter_node.bandwidth_GBps = c.inter_node_GBps;
  if (!c.overrides.attention.empty())
    CANN_RETURN_IF_ERROR(select_attention(&cluster.device, c.overrides.attention, c.id + ": "));
  if (!c.overrides.precision.empty()) {
    CANN_ASSIGN_OR_RETURN(cluster.device.precision, parse_precision(c.overrides.precision));
    CANN_RETURN_IF_ERROR(check_precision(cluster));
  }
  CANN_ASSIGN_OR_RETURN(PlanInput in, make_plan_input(*spec, cluster, 0));
  in.zero3_per_tensor = c.zero3_per_tensor;
  // The CPU engine keeps its optimizer state in fp32: bf16 state there would be read and
  // ignored.
  if (c.bf16_optimizer_state && in.cluster.device.precision == Precision::kFp32)
    return InvalidArgument(c.id + ": optimizer_state bf16 on cluster " + c.cluster +
                           ", whose fp32 device keeps its optimizer state in fp32; hint: use a "
                           "bf16 or fp8 cluster, or drop the key");
  in.bf16_optimizer_state = c.bf16_optimizer_state;
  CANN_ASSIGN_OR_RETURN(Strategy parsed, parse_strategy(c.strategy));
  CANN_ASSIGN_OR_RETURN(Strategy s, resolve_strategy(parsed, in.model, in.cluster, 0));
  CANN_ASSIGN_OR_RETURN(Prediction p, predict(in, s, Fidelity::kExact));
  o.kind = layout_kind(s, in.model);
  if (layout_kind_name(o.kind) != c.kind)
    return InvalidArgument(c.id + ": kind '" + c.kind + "' but the layout " + c.strategy +
                           " is of kind '" + std::string(layout_kind_name(o.kind)) +
                           "'; hint: kinds are dp, tp (tensor or context), pipeline, moe");
  o.prediction = p;
  o.fits = p.fits;
  o.memory_peak_bytes = p.memory_peak_bytes;
  o.memory_limit_bytes = p.memory_limit_bytes;
  o.predicted_s = p.step_time_s;
  const double gpus_d = gpus;
  switch (c.measure) {
    case Measure::kIterationTime:
      o.published_s = c.published;
      break;
    case Measure::kLayerTime: {
      // One layer's forward and backward (recomputation included) for one micro-batch.
      const BlockCosts b = block_costs(make_cost_context(in.model, in.cluster, in.shape, s));
      o.predicted_s = b.dense.total_s();
      o.published_s = c.published / 1e3;
      break;
    }
    case Measure::kTflopsPerGpu:
      o.published_s = iteration_flops(in, s, c.formula) / (c.published * 1e12 * gpus_d);
      break;
    case Measure::kMfu:
      o.published_s = iteration_flops(in, s, c.formula) /
                      (c.published * in.cluster.device.peak_tflops * 1e12 * gpus_d);
      break;
    case Measure::kTokensPerGpu:
      o.published_s = static_cast<double>(s.gbs) * in.model.seq_length / (c.published * gpus_d);
      break;
  }
  o.error = o.predicted_s / o.published_s - 1;
  return o;
}

ValidationSummary summarize(const std::vector<ValidationOutcome>& outcomes) {
  ValidationSummary s;
  std::vector<double> abs_err, signed_err;
  std::set<std::string> sources;
  for (const auto& o : outcomes) {
    if (o.c.calibration) continue;
    abs_err.push_back(std::fabs(o.error));
    signed_err.push_back(o.error);
    sources.insert(o.c.source.substr(0, o.c.source.find(',')));
    if (std::fabs(o.error) > std::fabs(s.worst)) {
      s.worst = o.error;
      s.worst_id = o.c.id;
    }
  }
  s.rows = static_cast<int>(abs_err.size());
  s.sources = static_cast<int>(sources.size());
  if (abs_err.empty()) return s;
  s.median_abs = quantile(abs_err, 0.5);
  double sum = 0;
  for (double e : signed_err) sum += e;
  s.mean_signed = sum / signed_err.size();
  s.p10 = quantile(signed_err, 0.1);
  s.p90 = quantile(signed_err, 0.9);
  return s;
}

std::vector<ErrorBand> error_bands(const std::vector<ValidationOutcome>& outcomes) {
  constexpr int kKinds = 4;
  std::vector<std::vector<double>> by_kind(kKinds);
  std::vector<double> all;
  for (const auto& o : outcomes) {
    if (o.c.calibration) continue;
    by_kind[static_cast<int>(o.kind)].push_back(o.error);
    all.push_back(o.error);
  }
  std::vector<ErrorBand> out(kKinds);
  for (int k = 0; k < kKinds; ++k) {
    const std::vector<double>& e =
        static_cast<int>(by_kind[k].size()) >= kMinBandRows ? by_kind[k] : all;
    if (e.empty()) continue;
    out[k] = {quantile(e, 0.1), quantile(e, 0.9), static_cast<int>(by_kind[k].size())};
  }
  return out;
}

std::string validation_table(const std::vector<ValidationOutcome>& outcomes) {
  std::string out;
  char line[400];
  std::snprintf(line, sizeof(line), "%-44s %-9s %12s %12s %8s %10s\n", "case", "kind",
                "published s", "predicted s", "error", "memory");
  out += line;
  for (const auto& o : outcomes) {
    std::snprintf(line, sizeof(line), "%-44s %-9s %12.3f %12.3f %+7.1f%% %7.1f GB%s%s\n",
                  o.c.id.c_str(), o.c.kind.c_str(), o.published_s, o.predicted_s, 100 * o.error,
                  o.memory_peak_bytes / 1073741824.0,
                  o.fits ? "" : (o.memory_judged() ? " (over)" : " (over; one layer ran)"),
                  o.c.calibration ? " (calibration)" : "");
    out += line;
  }
  const ValidationSummary s = summarize(outcomes);
  std::snprintf(line, sizeof(line),
                "%d out-of-sample rows from %d sources: median |error| %.1f%%, mean signed "
                "error %+.1f%%, worst %s %+.1f%%, 10th-90th percentile %+.1f%% .. %+.1f%%\n",
                s.rows, s.sources, 100 * s.median_abs, 100 * s.mean_signed, s.worst_id.c_str(),
                100 * s.worst, 100 * s.p10, 100 * s.p90);
  out += line;
  const std::vector<ErrorBand> bands = error_bands(outcomes);
  out += "error bands (10th, 90th percentile of signed error, rows; fewer than " +
         std::to_string(kMinBandRows) + " rows: all rows' band):\n";
  for (size_t k = 0; k < bands.size(); ++k) {
    std::snprintf(line, sizeof(line), "  %-9s {%.3f, %.3f, %d}\n",
                  std::string(layout_kind_name(static_cast<LayoutKind>(k))).c_str(), bands[k].p10,
                  bands[k].p90, bands[k].rows);
    out += line;
  }
  return out;
}

}  // namespace cann::plan
