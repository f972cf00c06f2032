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

Status select_training_precision(ClusterSpec* c, const std::string& precision) {
  auto p = parse_precision(precision);
  if (!p.ok() || *p == Precision::kFp32)
    return InvalidArgument("--precision: '" + precision +
                           "'; hint: bf16 or fp8 (fp32 is the CPU engine's, from `cann-train "
                           "bench calibrate`)");
  if (c->device.precision == Precision::kFp32) {
    // The CPU engine: bf16 is `run --precision bf16`, bf16 GEMM inputs in an fp32 engine.
    if (*p == Precision::kBf16 && c->device.bf16_gemm_tflops > 0) {
      c->device.bf16_gemms = true;
      return OkStatus();
    }
    return InvalidArgument(
        "--precision " + precision + " on cluster " + c->name +
        ", which describes cann-train's fp32 CPU engine" +
        (*p == Precision::kBf16
             ? " without a measured bf16 GEMM rate; hint: rerun `cann-train bench calibrate` "
               "on a processor with AVX-512 BF16"
             : "; hint: the engine trains fp32 or bf16 GEMMs; plan fp8 on an accelerator "
               "cluster"));
  }
  c->device.precision = *p;
  return check_precision(*c);
}

StatusOr<PlanInput> load_plan_input(const std::string& model, const std::string& cluster,
                                    const PlanOverrides& o) {
  CANN_ASSIGN_OR_RETURN(model::ModelSpec m, model::load_model_spec(model));
  CANN_ASSIGN_OR_RETURN(ClusterSpec c, load_cluster_spec(cluster));
  if (o.nodes > 0) c.nodes = o.nodes;
  double limit = 0;
  if (!o.max_memory.empty()) {
    auto bytes = parse_byte_size(o.max_memory);
    if (!bytes.ok()) return InvalidArgument("--max-memory-per-device: " + bytes.status().message());
    limit = *bytes;
  }
  if (o.seq_len > 0) {
    if (m.positions == model::PositionKind::kLearned && o.seq_len > m.position_rows())
      return InvalidArgument("--seq-len " + std::to_string(o.seq_len) + " exceeds the " +
                             std::to_string(m.position_rows()) + "-row position table of model " +
                             m.name + "; hint: at most " + std::to_string(m.position_rows()));
    m.seq_length = o.seq_len;
  }
  if (!o.attention.empty())
    CANN_RETURN_IF_ERROR(select_attention(&c.device, o.attention, "--attention: "));
  if (!o.precision.empty()) CANN_RETURN_IF_ERROR(select_training_precision(&c, o.precision));
  return make_plan_input(m, c, limit);
}

StatusOr<PlanInput> load_plan_input(const std::string& model, const std::string& cluster, int nodes,
                                    const std::string& max_memory) {
  PlanOverrides o;
  o.nodes = nodes;
  o.max_memory = max_memory;
  return load_plan_input(model, cluster, o);
}

}  // namespace cann::plan
