// Model, cluster and limit loading for the planner commands (see plan_input.h).
#include "plan/plan_input.h"

#include <cctype>
#include <cstdlib>

#include "model/spec.h"

namespace cann::plan {

StatusOr<double> parse_byte_size(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  std::string unit = end ? std::string(end) : "";
  for (char& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  double scale = 0;
  if (unit.empty() || unit == "G" || unit == "GB" || unit == "GIB") scale = 1073741824.0;
  if (unit == "M" || unit == "MB" || unit == "MIB") scale = 1048576.0;
  if (unit == "T" || unit == "TB" || unit == "TIB") scale = 1099511627776.0;
  if (text.empty() || end == text.c_str() || scale == 0 || !(v > 0))
    return InvalidArgument("expected a positive size like 32GB, 500MB or 1.5TB, got '" + text +
                           "'");
  return v * scale;
}

StatusOr<PlanInput> load_plan_input(const std::string& model, const std::string& cluster, int nodes,
                                    const std::string& max_memory) {
  CANN_ASSIGN_OR_RETURN(model::ModelSpec m, model::load_model_spec(model));
  CANN_ASSIGN_OR_RETURN(ClusterSpec c, load_cluster_spec(cluster));
  if (nodes > 0) c.nodes = nodes;
  double limit = 0;
  if (!max_memory.empty()) {
    auto bytes = parse_byte_size(max_memory);
    if (!bytes.ok()) return InvalidArgument("--max-memory-per-device: " + bytes.status().message());
    limit = *bytes;
  }
  return make_plan_input(m, c, limit);
}

}  // namespace cann::plan
