// comm.yaml: writing, strict reading, and applying it to a run.
#include "train/comm_config.h"

#include <cmath>
#include <cstdio>
#include <set>

#include "core/fs.h"
#include "plan/yaml_read.h"

namespace cann::train {
namespace {

constexpr int kFormat = 1;

Status bad(const std::string& path, const std::string& what) {
  return InvalidArgument("comm config " + path + ": " + what +
                         "; hint: write it with `cann-train bench tune --output FILE`");
}

// Every key of map `n` must be one of `known`.
Status only_keys(const YAML::Node& n, const std::set<std::string>& known, const std::string& path,
                 const std::string& where) {
  for (const auto& kv : n) {
    const std::string k = kv.first.as<std::string>();
    if (known.count(k) == 0) {
      std::string list;
      for (const auto& x : known) list += (list.empty() ? "" : ", ") + x;
      return bad(path, "unknown key '" + (where.empty() ? k : where + "." + k) +
                           "' (known: " + list + ")");
    }
  }
  return OkStatus();
}

template <typename T>
StatusOr<T> get(const YAML::Node& n, const std::string& k, const std::string& path,
                const std::string& where) {
  return plan::yaml_get<T>(n, k, where, [&](const std::string& what) { return bad(path, what); });
}

std::string number(double v) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.4g", v);
  return b;
}

// "64 KiB", "4 MiB", "1000 B".
std::string bytes_text(size_t b) {
  if (b >= (size_t{1} << 20) && b % (size_t{1} << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

StatusOr<LinkFigures> read_link(const YAML::Node& n, const std::string& path,
                                const std::string& where) {
  if (!n.IsMap()) return bad(path, "'" + where + "' must be a map");
  CANN_RETURN_IF_ERROR(only_keys(n, {"bandwidth_GBps", "latency_us"}, path, where));
  LinkFigures l;
  CANN_ASSIGN_OR_RETURN(l.bandwidth_GBps, get<double>(n, "bandwidth_GBps", path, where));
  CANN_ASSIGN_OR_RETURN(l.latency_us, get<double>(n, "latency_us", path, where));
  if (!(l.bandwidth_GBps > 0) || !(l.latency_us > 0) || !std::isfinite(l.bandwidth_GBps) ||
      !std::isfinite(l.latency_us))
    return bad(path, where + ": bandwidth_GBps and latency_us must be positive");
  return l;
}

}  // namespace

std::string comm_tuning_text(const CommTuning& t) {
  YAML::Emitter out;
  out << YAML::Comment(
             "Communication tuning measured by `cann-train bench tune`; train with it by "
             "`cann-train run --comm-config FILE` (or CANN_COMM_CONFIG=FILE)")
      << YAML::Newline;
  out << YAML::BeginMap;
  out << YAML::Key << "format" << YAML::Value << kFormat;
  out << YAML::Key << "tuned_for" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "nnodes" << YAML::Value << t.nnodes;
  out << YAML::Key << "nproc_per_node" << YAML::Value << t.nproc_per_node;
  out << YAML::Key << "transport" << YAML::Value << t.transport;
  if (!t.model.empty()) out << YAML::Key << "model" << YAML::Value << t.model;
  out << YAML::EndMap;
  if (!t.measured_at.empty()) out << YAML::Key << "measured_at" << YAML::Value << t.measured_at;
  out << YAML::Key << "backend" << YAML::Value << t.backend;
  out << YAML::Key << "gloo" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "channels" << YAML::Value << t.channels;
  out << YAML::Key << "split_bytes" << YAML::Value << t.split_bytes;
  out << YAML::Key << "allreduce" << YAML::Value << YAML::BeginSeq;
  for (const comm::AllreduceRule& r : t.allreduce) {
    out << YAML::Flow << YAML::BeginMap;
    if (r.below_bytes != SIZE_MAX) out << YAML::Key << "below" << YAML::Value << r.below_bytes;
    out << YAML::Key << "algorithm" << YAML::Value << comm::allreduce_algorithm_name(r.algorithm);
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::EndMap;
  if (t.bucket_size_mb > 0)
    out << YAML::Key << "bucket_size_mb" << YAML::Value << number(t.bucket_size_mb);
  if (t.intra_node || t.inter_node) {
    out << YAML::Key << "links" << YAML::Value << YAML::BeginMap;
    auto link = [&](const char* name, const std::optional<LinkFigures>& l) {
      if (!l) return;
      out << YAML::Key << name << YAML::Value << YAML::Flow << YAML::BeginMap;
      out << YAML::Key << "bandwidth_GBps" << YAML::Value << number(l->bandwidth_GBps);
      out << YAML::Key << "latency_us" << YAML::Value << number(l->latency_us);
      out << YAML::EndMap;
    };
    link("intra_node", t.intra_node);
    link("inter_node", t.inter_node);
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

Status write_comm_tuning(const std::string& path, const CommTuning& t) {
  Status s = write_file_atomic(path, comm_tuning_text(t));
  if (!s.ok())
    return IoError("cannot write comm config " + path + ": " + s.message() +
                   "; hint: check the directory exists and is writable");
  return OkStatus();
}

StatusOr<CommTuning> read_comm_tuning(const std::string& path) {
  CANN_ASSIGN_OR_RETURN(const YAML::Node n,
                        plan::load_yaml_map(path, "comm config", [&](const std::string& what) {
                          return bad(path, what);
                        }));
  CANN_RETURN_IF_ERROR(only_keys(
      n, {"format", "tuned_for", "measured_at", "backend", "gloo", "bucket_size_mb", "links"}, path,
      ""));
  CommTuning t;
  CANN_ASSIGN_OR_RETURN(const int format, get<int>(n, "format", path, ""));
  if (format != kFormat)
    return bad(path, "format " + std::to_string(format) + ", this build reads format " +
                         std::to_string(kFormat));
  const YAML::Node tf = n["tuned_for"];
  if (!tf || !tf.IsMap()) return bad(path, "missing map 'tuned_for'");
  CANN_RETURN_IF_ERROR(
      only_keys(tf, {"nnodes", "nproc_per_node", "transport", "model"}, path, "tuned_for"));
  CANN_ASSIGN_OR_RETURN(t.nnodes, get<int>(tf, "nnodes", path, "tuned_for"));
  CANN_ASSIGN_OR_RETURN(t.nproc_per_node, get<int>(tf, "nproc_per_node", path, "tuned_for"));
  CANN_ASSIGN_OR_RETURN(t.transport, get<std::string>(tf, "transport", path, "tuned_for"));
  if (tf["model"]) {
    CANN_ASSIGN_OR_RETURN(t.model, get<std::string>(tf, "model", path, "tuned_for"));
  }
  if (t.nnodes < 1 || t.nproc_per_node < 1)
    return bad(path, "tuned_for.nnodes and tuned_for.nproc_per_node must be positive");
  if (t.transport != "tcp" && t.transport != "ibverbs")
    return bad(path, "tuned_for.transport '" + t.transport + "' is not tcp or ibverbs");
  if (n["measured_at"]) {
    CANN_ASSIGN_OR_RETURN(t.measured_at, get<std::string>(n, "measured_at", path, ""));
  }
  CANN_ASSIGN_OR_RETURN(t.backend, get<std::string>(n, "backend", path, ""));
  if (t.backend != "shm" && t.backend != "gloo" && t.backend != "hierarchical")
    return bad(path, "backend '" + t.backend + "' is not one of shm, gloo, hierarchical");
  const YAML::Node g = n["gloo"];
  if (!g || !g.IsMap()) return bad(path, "missing map 'gloo'");
  CANN_RETURN_IF_ERROR(only_keys(g, {"channels", "split_bytes", "allreduce"}, path, "gloo"));
  CANN_ASSIGN_OR_RETURN(t.channels, get<int>(g, "channels", path, "gloo"));
  if (t.channels < 1 || t.channels > 16)
    return bad(path, "gloo.channels " + std::to_string(t.channels) + " is outside 1..16");
  CANN_ASSIGN_OR_RETURN(const int64_t split, get<int64_t>(g, "split_bytes", path, "gloo"));
  if (split < 0) return bad(path, "gloo.split_bytes must not be negative");
  t.split_bytes = static_cast<size_t>(split);
  const YAML::Node rules = g["allreduce"];
  if (!rules || !rules.IsSequence()) return bad(path, "missing list 'gloo.allreduce'");
  size_t last_below = 0;
  for (size_t i = 0; i < rules.size(); ++i) {
    const std::string where = "gloo.allreduce[" + std::to_string(i) + "]";
    const YAML::Node r = rules[i];
    if (!r.IsMap()) return bad(path, where + " must be a map {below: BYTES, algorithm: NAME}");
    CANN_RETURN_IF_ERROR(only_keys(r, {"below", "algorithm"}, path, where));
    comm::AllreduceRule rule;
    CANN_ASSIGN_OR_RETURN(const std::string alg, get<std::string>(r, "algorithm", path, where));
    if (alg == "ring") {
      rule.algorithm = comm::AllreduceAlgorithm::kRing;
    } else if (alg == "direct") {
      rule.algorithm = comm::AllreduceAlgorithm::kDirect;
    } else {
      return bad(path, where + ".algorithm '" + alg +
                           "' is not an all-reduce of the gloo backend (it has ring, direct)");
    }
    if (alg == "ring" && t.transport == "ibverbs")
      return bad(path, where + ": the ibverbs transport runs the direct all-reduce only, not ring");
    if (r["below"]) {
      if (i + 1 == rules.size())
        return bad(path, where + ": the last row takes every size left and has no 'below'");
      CANN_ASSIGN_OR_RETURN(const int64_t below, get<int64_t>(r, "below", path, where));
      if (below <= 0 || static_cast<size_t>(below) <= last_below)
        return bad(path, where + ".below " + std::to_string(below) +
                             ": sizes out of order (each row's 'below' must exceed the last)");
      rule.below_bytes = last_below = static_cast<size_t>(below);
    } else if (i + 1 != rules.size()) {
      return bad(path, where + " has no 'below' but is not the last row");
    }
    t.allreduce.push_back(rule);
  }
  if (n["bucket_size_mb"]) {
    CANN_ASSIGN_OR_RETURN(t.bucket_size_mb, get<double>(n, "bucket_size_mb", path, ""));
    if (!(t.bucket_size_mb > 0) || !std::isfinite(t.bucket_size_mb))
      return bad(path, "bucket_size_mb must be positive");
  }
  if (const YAML::Node links = n["links"]) {
    if (!links.IsMap()) return bad(path, "'links' must be a map");
    CANN_RETURN_IF_ERROR(only_keys(links, {"intra_node", "inter_node"}, path, "links"));
    if (links["intra_node"]) {
      CANN_ASSIGN_OR_RETURN(t.intra_node, read_link(links["intra_node"], path, "links.intra_node"));
    }
    if (links["inter_node"]) {
      CANN_ASSIGN_OR_RETURN(t.inter_node, read_link(links["inter_node"], path, "links.inter_node"));
    }
  }
  return t;
}

std::string comm_tuning_summary(const CommTuning& t) {
  std::string s = "backend " + t.backend;
  if (t.backend != "shm" || t.nnodes > 1) {
    s += ", gloo " + std::to_string(t.channels) + " channel" + (t.channels == 1 ? "" : "s");
    if (t.channels > 1) s += " split from " + bytes_text(t.split_bytes);
    s += ", all-reduce";
    if (t.allreduce.empty()) s += " ring";
    for (size_t i = 0; i < t.allreduce.size(); ++i) {
      const auto& r = t.allreduce[i];
      s += std::string(i ? " then " : " ") + comm::allreduce_algorithm_name(r.algorithm);
      if (r.below_bytes != SIZE_MAX) s += " below " + bytes_text(r.below_bytes);
    }
  }
  if (t.bucket_size_mb > 0) s += ", buckets " + number(t.bucket_size_mb) + " MiB";
  return s;
}

StatusOr<std::string> apply_comm_tuning(const CommTuning& t, const std::string& path, int nnodes,
                                        int nproc_per_node, bool backend_given, bool bucket_given,
                                        CommConfig* comm, double* bucket_mb) {
  if (!backend_given && t.backend == "shm" && nnodes > 1)
    return InvalidArgument("comm config " + path + ": backend shm was tuned on " +
                           std::to_string(t.nnodes) + " node(s) and cannot span " +
                           std::to_string(nnodes) +
                           "; hint: tune this job's nodes with "
                           "`cann-train bench tune --nnodes " +
                           std::to_string(nnodes) + " ...`");
  if (t.transport != comm->transport)
    return InvalidArgument("comm config " + path + " was tuned over " + t.transport +
                           ", this run uses --transport " + comm->transport +
                           "; hint: tune with the run's transport");
  std::string line = "comm config " + path + ": " + comm_tuning_summary(t);
  if (backend_given) {
    line += " (backend " + comm->backend + " kept from --backend)";
  } else {
    comm->backend = t.backend;
  }
  comm->channels = t.channels;
  comm->split_bytes = t.split_bytes;
  comm->allreduce_rules = t.allreduce;
  if (t.bucket_size_mb > 0) {
    if (bucket_given)
      line += " (buckets " + number(*bucket_mb) + " MiB kept from --bucket-size-mb)";
    else
      *bucket_mb = t.bucket_size_mb;
  }
  if (t.nnodes != nnodes || t.nproc_per_node != nproc_per_node)
    line += "; tuned on " + std::to_string(t.nnodes) + " node(s) x " +
            std::to_string(t.nproc_per_node) + ", running " + std::to_string(nnodes) + " x " +
            std::to_string(nproc_per_node) + ": tune again for this world";
  return line;
}

}  // namespace cann::train
