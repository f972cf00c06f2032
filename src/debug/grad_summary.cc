// Per-layer gradient-norm statistics of a step log (see grad_summary.h).
#include "debug/grad_summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

namespace cann::debug {
namespace {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double hi = v[mid];
  if (v.size() % 2 == 1) return hi;
  return (*std::max_element(v.begin(), v.begin() + mid) + hi) / 2.0;
}

struct Series {
  std::vector<int> steps;
  std::vector<double> norms;  // NaN where the log has null (non-finite)
};

}  // namespace

StatusOr<GradLogSummary> summarize_grad_log(const std::string& text, const std::string& name) {
  GradLogSummary out;
  std::vector<std::string> order;  // layer names, forward order
  std::map<std::string, Series> series;
  std::string event_layer;
  int event_step = -1;
  size_t pos = 0;
  int line_no = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object())
      return InvalidArgument(name + ":" + std::to_string(line_no) +
                             ": not a JSON object; hint: pass a step log written by `cann-train "
                             "run --log-json FILE --grad-norms`");
    if (j.contains("event") && j["event"] == "nonfinite_grad") {
      if (event_step < 0 && j.contains("step") && j["step"].is_number_integer()) {
        event_step = j["step"].get<int>();
        if (j.contains("layer") && j["layer"].is_string()) event_layer = j["layer"];
      }
      continue;
    }
    if (!j.contains("grad_norms") || !j["grad_norms"].is_object()) continue;
    if (!j.contains("step") || !j["step"].is_number_integer())
      return InvalidArgument(name + ":" + std::to_string(line_no) +
                             ": a grad_norms line without an integer \"step\"");
    const int step = j["step"].get<int>();
    if (out.lines == 0) out.first_step = step;
    out.last_step = step;
    ++out.lines;
    for (const auto& [layer, value] : j["grad_norms"].items()) {
      if (!series.count(layer)) order.push_back(layer);
      Series& s = series[layer];
      s.steps.push_back(step);
      s.norms.push_back(value.is_number() ? value.get<double>()
                                          : std::numeric_limits<double>::quiet_NaN());
    }
  }
  if (out.lines == 0)
    return InvalidArgument(name +
                           ": no step line has per-layer gradient norms; hint: run with "
                           "--grad-norms --log-json FILE");
  for (const std::string& layer : order) {
    const Series& s = series[layer];
    LayerGradSummary ls;
    ls.name = layer;
    std::vector<double> finite;
    for (size_t i = 0; i < s.norms.size(); ++i) {
      const double v = s.norms[i];
      if (!std::isfinite(v)) {
        if (ls.first_nonfinite_step < 0) ls.first_nonfinite_step = s.steps[i];
        continue;
      }
      if (finite.size() >= 5) {
        const size_t from =
            finite.size() > static_cast<size_t>(kSpikeWindow) ? finite.size() - kSpikeWindow : 0;
        const double base = median_of({finite.begin() + from, finite.end()});
        if (v > kSpikeFactor * base && base > 0) ls.spike_steps.push_back(s.steps[i]);
      }
      finite.push_back(v);
    }
    ls.steps = static_cast<int>(finite.size());
    if (!finite.empty()) {
      ls.min = *std::min_element(finite.begin(), finite.end());
      ls.max = *std::max_element(finite.begin(), finite.end());
      ls.median = median_of(finite);
    }
    if (finite.size() >= 10) {
      const size_t tenth = finite.size() / 10;
      const double first = median_of({finite.begin(), finite.begin() + tenth});
      const double last = median_of({finite.end() - tenth, finite.end()});
      ls.trend = first > 0 ? last / first : 0.0;
    }
    out.layers.push_back(std::move(ls));
  }
  // The first non-finite step; at it, the first layer in backward order (the log lists layers
  // forward, so the last one that is non-finite there). The trainer's own event says the same
  // when present, and it also covers a rank whose layers the log does not show.
  for (const LayerGradSummary& l : out.layers)
    if (l.first_nonfinite_step >= 0 &&
        (out.first_nonfinite_step < 0 || l.first_nonfinite_step < out.first_nonfinite_step))
      out.first_nonfinite_step = l.first_nonfinite_step;
  if (out.first_nonfinite_step >= 0) {
    for (const LayerGradSummary& l : out.layers)
      if (l.first_nonfinite_step == out.first_nonfinite_step) out.first_nonfinite_layer = l.name;
  }
  if (event_step >= 0 && (out.first_nonfinite_step < 0 || event_step <= out.first_nonfinite_step)) {
    out.first_nonfinite_step = event_step;
    if (!event_layer.empty()) out.first_nonfinite_layer = event_layer;
  }
  return out;
}

std::string format_grad_summary(const GradLogSummary& s, const std::string& name) {
  std::string out;
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%s: per-layer gradient norms over %d steps (%d..%d)\n",
                name.c_str(), s.lines, s.first_step, s.last_step);
  out += buf;
  std::snprintf(buf, sizeof(buf), "  %-10s %6s %11s %11s %11s %7s  %s\n", "layer", "steps", "min",
                "median", "max", "trend", "spikes (>3x the last 20 steps' median)");
  out += buf;
  for (const LayerGradSummary& l : s.layers) {
    std::string trend = "-";
    if (l.trend > 0) {
      std::snprintf(buf, sizeof(buf), "x%.2f", l.trend);
      trend = buf;
    }
    std::string spikes;
    for (size_t i = 0; i < l.spike_steps.size() && i < 8; ++i) {
      if (!spikes.empty()) spikes += ",";
      spikes += std::to_string(l.spike_steps[i]);
    }
    if (l.spike_steps.size() > 8)
      spikes += " (+" + std::to_string(l.spike_steps.size() - 8) + " more)";
    if (spikes.empty()) spikes = "none";
    std::snprintf(buf, sizeof(buf), "  %-10s %6d %11.4g %11.4g %11.4g %7s  %s\n", l.name.c_str(),
                  l.steps, l.min, l.median, l.max, trend.c_str(), spikes.c_str());
    out += buf;
  }
  if (s.first_nonfinite_step >= 0) {
    out += "  first non-finite gradient: step " + std::to_string(s.first_nonfinite_step);
    if (!s.first_nonfinite_layer.empty())
      out += ", layer " + s.first_nonfinite_layer + " (first in backward order)";
    out += "\n";
  } else {
    out += "  every gradient finite\n";
  }
  return out;
}

}  // namespace cann::debug
