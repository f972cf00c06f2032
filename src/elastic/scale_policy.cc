// Parsing of scale policies and the window in force.
#include "elastic/scale_policy.h"

#include <yaml-cpp/yaml.h>

#include "core/fs.h"

namespace cann::elastic {
namespace {

// "HH:MM" -> minutes after midnight, or -1.
int parse_clock(const std::string& s) {
  int h = -1, m = -1;
  char tail = 0;
  if (std::sscanf(s.c_str(), "%d:%d%c", &h, &m, &tail) != 2) return -1;
  if (h < 0 || h > 24 || m < 0 || m > 59 || (h == 24 && m != 0)) return -1;
  return h * 60 + m;
}

}  // namespace

StatusOr<std::vector<ScaleWindow>> parse_scale_policy(const std::string& text,
                                                      const std::string& where) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(where + ": not YAML or JSON (" + e.what() + ")");
  }
  if (root.IsMap() && root["windows"]) root = root["windows"];
  if (!root.IsSequence() || root.size() == 0)
    return InvalidArgument(where +
                           ": expected a list of windows {from, to, min_nodes, "
                           "max_nodes}; hint: see docs/elastic.md, \"Scaling\"");
  std::vector<ScaleWindow> out;
  for (size_t i = 0; i < root.size(); ++i) {
    const YAML::Node w = root[i];
    const std::string at = where + ": window " + std::to_string(i + 1);
    if (!w.IsMap()) return InvalidArgument(at + " is not a map");
    for (const auto& kv : w) {
      const std::string key = kv.first.as<std::string>();
      if (key != "from" && key != "to" && key != "min_nodes" && key != "max_nodes")
        return InvalidArgument(at + ": unknown key '" + key +
                               "'; hint: the keys are from, to, min_nodes, max_nodes");
    }
    ScaleWindow s;
    try {
      for (const char* key : {"from", "to", "min_nodes", "max_nodes"})
        if (!w[key]) return InvalidArgument(at + ": '" + key + "' is missing");
      const std::string from = w["from"].as<std::string>(), to = w["to"].as<std::string>();
      s.from_min = parse_clock(from);
      s.to_min = parse_clock(to);
      if (s.from_min < 0 || s.to_min < 0)
        return InvalidArgument(at + ": times must be \"HH:MM\" (got '" + from + "' and '" + to +
                               "')");
      s.min_nodes = w["min_nodes"].as<int>();
      s.max_nodes = w["max_nodes"].as<int>();
      s.text = from + "-" + to;
    } catch (const YAML::Exception& e) {
      return InvalidArgument(at + ": " + e.what());
    }
    if (s.min_nodes < 1 || s.max_nodes < s.min_nodes)
      return InvalidArgument(at + ": needs 1 <= min_nodes <= max_nodes (got " +
                             std::to_string(s.min_nodes) + " and " + std::to_string(s.max_nodes) +
                             ")");
    out.push_back(s);
  }
  return out;
}

StatusOr<std::vector<ScaleWindow>> load_scale_policy(const std::string& path) {
  auto text = read_file(path);
  if (!text.ok())
    return InvalidArgument(path + ": cannot read the scale policy: " + text.status().message());
  return parse_scale_policy(*text, path);
}

std::optional<size_t> window_in_force(const std::vector<ScaleWindow>& policy, int minute) {
  for (size_t i = 0; i < policy.size(); ++i) {
    const ScaleWindow& w = policy[i];
    const bool holds = w.from_min < w.to_min ? minute >= w.from_min && minute < w.to_min
                                             : minute >= w.from_min || minute < w.to_min;
    if (holds) return i;
  }
  return std::nullopt;
}

}  // namespace cann::elastic
