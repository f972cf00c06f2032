// Cluster spec parsing and validation. Every error names the file and the key and says what to
// do, as the model spec parser does; unknown keys are errors so a typo cannot silently fall
// back to a default.
#include "plan/cluster.h"

#include <cstdlib>
#include "core/paths.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>

#include "core/embedded.h"
#include "core/fs.h"

namespace cann::plan {
namespace {

Status key_error(const std::string& source, const std::string& key, const std::string& what) {
  return InvalidArgument(source + ": key '" + key + "': " + what);
}

StatusOr<double> read_number(const YAML::Node& v, const std::string& source, const std::string& key,
                             bool allow_zero) {
  double d = 0;
  try {
    d = v.as<double>();
  } catch (const YAML::Exception&) {
    return key_error(source, key,
                     "expected a number, got '" +
                         (v.IsScalar() ? v.Scalar() : std::string("<non-scalar>")) + "'");
  }
  if (!(allow_zero ? d >= 0 : d > 0))
    return key_error(source, key,
                     std::string("must be ") + (allow_zero ? "zero or more" : "positive") +
                         ", got '" + v.Scalar() + "'");
  return d;
}

// Reads a mapping whose keys each have a handler; an unknown key is an error that lists the
// accepted ones.
using Handler = std::function<Status(const YAML::Node&, const std::string& key)>;
Status read_map(const YAML::Node& node, const std::string& source, const std::string& where,
                const std::map<std::string, Handler>& handlers) {
  if (!node.IsMap()) return key_error(source, where, "expected a mapping of keys to values");
  for (const auto& item : node) {
    const std::string key = item.first.as<std::string>();
    const std::string full = where.empty() ? key : where + "." + key;
    auto it = handlers.find(key);
    if (it == handlers.end()) {
      std::string names;
      for (const auto& [k, h] : handlers) names += (names.empty() ? "" : ", ") + k;
      return key_error(source, full, "unknown key; hint: the keys here are " + names);
    }
    CANN_RETURN_IF_ERROR(it->second(item.second, full));
  }
  return OkStatus();
}

Handler number(double* out, const std::string& source, bool allow_zero = false) {
  return [=](const YAML::Node& v, const std::string& key) -> Status {
    CANN_ASSIGN_OR_RETURN(*out, read_number(v, source, key, allow_zero));
    return OkStatus();
  };
}

Handler integer(int* out, const std::string& source) {
  return [=](const YAML::Node& v, const std::string& key) -> Status {
    CANN_ASSIGN_OR_RETURN(double d, read_number(v, source, key, false));
    if (d != static_cast<int>(d) || d > 1e7)
      return key_error(source, key, "expected a positive integer, got '" + v.Scalar() + "'");
    *out = static_cast<int>(d);
    return OkStatus();
  };
}

Handler text(std::string* out) {
  return [=](const YAML::Node& v, const std::string&) -> Status {
    *out = v.IsScalar() ? v.Scalar() : "";
    return OkStatus();
  };
}

Handler boolean(bool* out, const std::string& source) {
  return [=](const YAML::Node& v, const std::string& key) -> Status {
    try {
      *out = v.as<bool>();
    } catch (const YAML::Exception&) {
      return key_error(source, key, "expected true or false");
    }
    return OkStatus();
  };
}

Handler fraction(double* out, const std::string& source) {
  return [=](const YAML::Node& v, const std::string& key) -> Status {
    CANN_ASSIGN_OR_RETURN(double d, read_number(v, source, key, false));
    if (d > 1) return key_error(source, key, "is a fraction of peak: at most 1, got " + v.Scalar());
    *out = d;
    return OkStatus();
  };
}

// {dimension: fraction of peak, ...}: a GEMM's efficiency by its smallest dimension.
Handler efficiency_by_dim(std::vector<std::pair<double, double>>* out, const std::string& source) {
  return [=](const YAML::Node& v, const std::string& key) -> Status {
    if (!v.IsMap() || v.size() == 0)
      return key_error(source, key, "expected {smallest dimension: fraction of peak, ...}");
    out->clear();
    for (const auto& point : v) {
      CANN_ASSIGN_OR_RETURN(double dim, read_number(point.first, source, key, false));
      CANN_ASSIGN_OR_RETURN(double eff, read_number(point.second, source, key, false));
      if (eff > 1)
        return key_error(source, key,
                         "is a fraction of peak: at most 1, got " + point.second.Scalar());
      out->emplace_back(dim, eff);
    }
    std::sort(out->begin(), out->end());
    return OkStatus();
  };
}

Handler precision(Precision* out, const std::string& source) {
  return [=](const YAML::Node& v, const std::string& key) -> Status {
    auto p = parse_precision(v.IsScalar() ? v.Scalar() : "");
    if (!p.ok()) return key_error(source, key, p.status().message());
    *out = *p;
    return OkStatus();
  };
}

Status read_link(const YAML::Node& node, const std::string& source, const std::string& where,
                 LinkSpec* link, bool intra) {
  bool has_bw = false;
  std::map<std::string, Handler> h = {
      {"bandwidth_GBps",
       [&](const YAML::Node& v, const std::string& key) -> Status {
         has_bw = true;
         return number(&link->bandwidth_GBps, source)(v, key);
       }},
      {"latency_us", number(&link->latency_us, source, true)},
      {"efficiency", fraction(&link->efficiency, source)},
      {"interconnect", text(&link->interconnect)},
  };
  if (intra)
    h["topology"] = [&](const YAML::Node& v, const std::string& key) -> Status {
      const std::string t = v.IsScalar() ? v.Scalar() : "";
      if (t == "switch") {
        link->topology = IntraTopology::kSwitch;
      } else if (t == "full_mesh") {
        link->topology = IntraTopology::kFullMesh;
      } else {
        return key_error(source, key, "unknown topology '" + t + "'; hint: switch or full_mesh");
      }
      return OkStatus();
    };
  CANN_RETURN_IF_ERROR(read_map(node, source, where, h));
  if (!has_bw) return key_error(source, where + ".bandwidth_GBps", "missing");
  return OkStatus();
}

}  // namespace

std::string_view precision_name(Precision p) {
  return p == Precision::kFp32 ? "fp32" : p == Precision::kFp8 ? "fp8" : "bf16";
}

StatusOr<Precision> parse_precision(std::string_view name) {
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp8") return Precision::kFp8;
  if (name == "fp32") return Precision::kFp32;
  return InvalidArgument("unknown precision '" + std::string(name) +
                         "'; hint: bf16 (mixed precision, the default), fp8 (DeepSeek-V3's "
                         "recipe, on devices with fp8 units) or fp32 (the CPU engine, as "
                         "`cann-train bench calibrate` writes)");
}

Status check_precision(const ClusterSpec& c) {
  if (c.device.precision == Precision::kFp8 && !(c.device.fp8_peak_tflops > 0))
    return InvalidArgument(c.source + ": precision fp8 on device " + c.device.name +
                           ", which has no fp8 peak; hint: set device.fp8_peak_tflops or use "
                           "bf16");
  return OkStatus();
}

std::string_view attention_kernel_name(AttentionKernel a) {
  return a == AttentionKernel::kFused ? "fused" : "materialized";
}

StatusOr<AttentionKernel> parse_attention_kernel(std::string_view name) {
  if (name == "fused") return AttentionKernel::kFused;
  if (name == "materialized") return AttentionKernel::kMaterialized;
  return InvalidArgument("unknown attention kernel '" + std::string(name) +
                         "'; hint: fused (FlashAttention) or materialized (scores in memory)");
}

Status select_attention(DeviceSpec* d, std::string_view name, const std::string& where) {
  if (auto kind = parse_attention_kernel(name); kind.ok()) {
    d->attention = *kind;
    return OkStatus();
  }
  std::string measured;
  for (const AttentionSpeed& a : d->fused_attention) {
    if (a.kernel == name) {
      d->attention = AttentionKernel::kFused;
      d->fused_kernel = a.kernel;
      return OkStatus();
    }
    measured += ", " + a.kernel;
  }
  return InvalidArgument(where + "unknown attention kernel '" + std::string(name) + "' on device " +
                         d->name +
                         "; hint: fused (FlashAttention), materialized (scores in memory)" +
                         (measured.empty() ? std::string()
                                           : " or a kernel measured on it (" +
                                                 measured.substr(2) + ")"));
}

double fused_attention_tflops(const DeviceSpec& d, double seq) {
  for (const AttentionSpeed& a : d.fused_attention) {
    if (a.kernel != d.fused_kernel) continue;
    const auto& p = a.tflops_at_seq;
    if (p.empty()) return 0;
    if (seq <= p.front().first) return p.front().second;
    if (seq >= p.back().first) return p.back().second;
    for (size_t i = 1; i < p.size(); ++i) {
      if (seq > p[i].first) continue;
      const double t = std::log2(seq / p[i - 1].first) / std::log2(p[i].first / p[i - 1].first);
      return p[i - 1].second + t * (p[i].second - p[i - 1].second);
    }
  }
  return 0;
}

StatusOr<ClusterSpec> parse_cluster_spec(const std::string& text_in, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text_in);
  } catch (const YAML::ParserException& e) {
    return InvalidArgument(source + ":" + std::to_string(e.mark.line + 1) +
                           ": malformed YAML: " + e.msg + "; hint: fix the syntax at that line");
  }
  if (!root.IsMap())
    return InvalidArgument(source +
                           ": expected a mapping at the top level; hint: see "
                           "configs/clusters/3072_a100.yaml");
  ClusterSpec c;
  c.source = source;
  c.name = std::filesystem::path(source).stem().string();
  std::string description;
  bool has_device = false, has_intra = false, has_inter = false, has_attention = false;
  bool has_tile = false;
  std::map<std::string, Handler> top = {
      {"name", text(&c.name)},
      {"description", text(&description)},
      {"measured_under_load", text(&c.measured_under_load)},
      {"nodes", integer(&c.nodes, source)},
      {"devices_per_node", integer(&c.devices_per_node, source)},
      {"collective_launch_us", number(&c.collective_launch_us, source, true)},
      {"allow_cross_node_tp", boolean(&c.allow_cross_node_tp, source)},
      {"device",
       [&](const YAML::Node& v, const std::string& key) -> Status {
         has_device = true;
         DeviceSpec& d = c.device;
         double units = 0;
         CANN_RETURN_IF_ERROR(
             read_map(v, source, key,
                      {{"name", text(&d.name)},
                       {"peak_tflops", number(&d.peak_tflops, source)},
                       {"fp8_peak_tflops", number(&d.fp8_peak_tflops, source)},
                       {"bf16_gemm_tflops", number(&d.bf16_gemm_tflops, source, true)},
                       {"memory_gb", number(&d.memory_gb, source)},
                       {"memory_bandwidth_GBps", number(&d.memory_bandwidth_GBps, source)},
                       {"tdp_watts", number(&d.tdp_watts, source, true)},
                       {"hourly_cost_usd", number(&d.hourly_cost_usd, source, true)},
                       {"compute_units", number(&units, source)},
                       {"gemm_efficiency", fraction(&d.gemm_efficiency, source)},
                       {"gemm_tile",
                        [&](const YAML::Node& t, const std::string& k) -> Status {
                          has_tile = true;
                          return number(&d.gemm_tile, source, true)(t, k);
                        }},
                       {"gemm_efficiency_by_min_dim",
                        efficiency_by_dim(&d.gemm_efficiency_by_min_dim, source)},
                       {"bf16_gemm_efficiency_by_min_dim",
                        efficiency_by_dim(&d.bf16_gemm_efficiency_by_min_dim, source)},
                       {"memory_efficiency", fraction(&d.memory_efficiency, source)},
                       {"elementwise_GBps", number(&d.elementwise_GBps, source, true)},
                       {"runtime_reserve_GB", number(&d.runtime_reserve_gb, source, true)},
                       {"huge_pages", boolean(&d.huge_pages, source)},
                       {"overlap_slowdown", fraction(&d.overlap_slowdown, source)},
                       {"fused_attention_kernel", text(&d.fused_kernel)},
                       {"fused_attention_tflops",
                        [&](const YAML::Node& t, const std::string& k) -> Status {
                          if (!t.IsMap())
                            return key_error(source, k, "expected {kernel: {sequence: TFLOP/s}}");
                          for (const auto& kernel : t) {
                            AttentionSpeed a;
                            a.kernel = kernel.first.as<std::string>();
                            const std::string at = k + "." + a.kernel;
                            if (!kernel.second.IsMap() || kernel.second.size() == 0)
                              return key_error(source, at, "expected {sequence: TFLOP/s, ...}");
                            for (const auto& point : kernel.second) {
                              CANN_ASSIGN_OR_RETURN(double seq, read_number(point.first, source, at, false));
                              CANN_ASSIGN_OR_RETURN(double tf, read_number(point.second, source, at, false));
                              a.tflops_at_seq.emplace_back(seq, tf);
                            }
                            std::sort(a.tflops_at_seq.begin(), a.tflops_at_seq.end());
                            d.fused_attention.push_back(std::move(a));
                          }
                          return OkStatus();
                        }},
                       {"precision", precision(&d.precision, source)},
                       {"attention", [&](const YAML::Node& a, const std::string& k) -> Status {
                          auto kind = parse_attention_kernel(a.IsScalar() ? a.Scalar() : "");
                          if (!kind.ok()) return key_error(source, k, kind.status().message());
                          d.attention = *kind;
                          has_attention = true;
                          return OkStatus();
                        }}}));
         d.compute_units = static_cast<int>(units);
         for (auto [k, val] : {std::pair<const char*, double>{"peak_tflops", d.peak_tflops},
                               {"memory_gb", d.memory_gb},
                               {"memory_bandwidth_GBps", d.memory_bandwidth_GBps}})
           if (val <= 0)
             return key_error(source, key + "." + k, "missing; hint: every device needs it");
         return OkStatus();
       }},
      {"intra_node",
       [&](const YAML::Node& v, const std::string& key) -> Status {
         has_intra = true;
         return read_link(v, source, key, &c.intra_node, true);
       }},
      {"inter_node",
       [&](const YAML::Node& v, const std::string& key) -> Status {
         has_inter = true;
         return read_link(v, source, key, &c.inter_node, false);
       }},
      {"reliability",
       [&](const YAML::Node& v, const std::string& key) -> Status {
         Reliability& r = c.reliability;
         return read_map(
             v, source, key,
             {{"device_mtbf_hours", number(&r.device_mtbf_hours, source)},
              {"checkpoint_write_GBps_per_node", number(&r.checkpoint_write_GBps_per_node, source)},
              {"restart_s", number(&r.restart_s, source, true)}});
       }},
  };
  CANN_RETURN_IF_ERROR(read_map(root, source, "", top));
  if (c.nodes <= 0) return key_error(source, "nodes", "missing; hint: how many machines");
  if (c.devices_per_node <= 0)
    return key_error(source, "devices_per_node", "missing; hint: accelerators per machine");
  if (!has_device)
    return key_error(source, "device", "missing; hint: see DESIGN.md \"Cluster spec\"");
  if (!has_intra) return key_error(source, "intra_node", "missing; hint: the links inside a node");
  if (!has_inter && c.nodes > 1)
    return key_error(source, "inter_node", "missing; hint: the network between nodes");
  if (!has_inter) c.inter_node = c.intra_node;
  CANN_RETURN_IF_ERROR(check_precision(c));
  // An fp32 device is the CPU engine's (specs calibrated before the key existed included):
  // its BLAS has no output tiles.
  if (!has_tile && c.device.precision == Precision::kFp32) c.device.gemm_tile = 0;
  // What only the CPU engine's device prices: on another device the key would be read and
  // ignored.
  if (c.device.precision != Precision::kFp32) {
    const DeviceSpec& d = c.device;
    for (const auto& [key, set] :
         {std::pair<const char*, bool>{"bf16_gemm_tflops", d.bf16_gemm_tflops > 0},
          {"bf16_gemm_efficiency_by_min_dim", !d.bf16_gemm_efficiency_by_min_dim.empty()},
          {"huge_pages", d.huge_pages}})
      if (set)
        return key_error(source, std::string("device.") + key,
                         "prices the CPU engine's fp32 device only, and this device trains in " +
                             std::string(precision_name(d.precision)) +
                             "; hint: remove it, or set device.precision: fp32");
  }
  if (!has_attention)
    c.device.attention = c.device.precision == Precision::kFp32 ? AttentionKernel::kMaterialized
                                                                : AttentionKernel::kFused;
  DeviceSpec& d = c.device;
  if (!d.fused_attention.empty() || !d.fused_kernel.empty()) {
    bool known = false;
    for (const AttentionSpeed& a : d.fused_attention) known |= a.kernel == d.fused_kernel;
    if (!known)
      return key_error(source, "device.fused_attention_kernel",
                       "'" + d.fused_kernel +
                           "' is not among device.fused_attention_tflops; hint: name the "
                           "measured kernel the device's frameworks run by default");
  }
  return c;
}

std::vector<std::string> shipped_cluster_names() {
  return embedded_names("configs/clusters", ".yaml");
}

std::string calibrated_cluster_dir() {
  return cann_home() + "/clusters";
}

StatusOr<ClusterSpec> load_cluster_spec(const std::string& name_or_path) {
  const bool looks_like_path = name_or_path.find('/') != std::string::npos ||
                               name_or_path.ends_with(".yaml") || name_or_path.ends_with(".yml");
  if (path_exists(name_or_path) || looks_like_path) {
    CANN_ASSIGN_OR_RETURN(std::string text, read_file(name_or_path));
    return parse_cluster_spec(text, name_or_path);
  }
  const std::string calibrated = calibrated_cluster_dir() + "/" + name_or_path + ".yaml";
  if (path_exists(calibrated)) {
    CANN_ASSIGN_OR_RETURN(std::string text, read_file(calibrated));
    return parse_cluster_spec(text, calibrated);
  }
  if (name_or_path == "local")
    return NotFound("cluster 'local' is not measured yet (no " + calibrated +
                    "); hint: run `cann-train bench calibrate` first");
  const std::string rel = "configs/clusters/" + name_or_path + ".yaml";
  if (auto text = embedded_file(rel)) {
    CANN_ASSIGN_OR_RETURN(ClusterSpec c, parse_cluster_spec(std::string(*text), rel));
    return c;
  }
  std::string names;
  for (const auto& n : shipped_cluster_names()) names += (names.empty() ? "" : ", ") + n;
  return NotFound("unknown cluster '" + name_or_path + "'; hint: use one of " + names +
                  ", or a path to a cluster YAML file");
}

}  // namespace cann::plan
