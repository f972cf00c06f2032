// The planner's choice of layout for this machine.
#include "cli/auto_strategy.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/local_cluster.h"
#include "model/spec.h"
#include "plan/cluster.h"
#include "plan/predict.h"
#include "plan/search.h"
#include "plan/strategy.h"
#include "train/engine_search.h"

namespace cann::cli {
namespace {

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

struct Priced {
  plan::Strategy strategy;
  double step_s = 0;
  double memory = 0;
};

// `processes` (per node) of `threads` each; over several nodes the split is always named.
std::string describe(const Priced& p, int processes, int threads, int nodes) {
  char buf[256];
  if (processes == 1 && nodes > 1)
    std::snprintf(buf, sizeof(buf), "1 process x %d threads, %s: %.3f s/step, %.1f MiB", threads,
                  plan::strategy_string(p.strategy).c_str(), p.step_s, p.memory / (1 << 20));
  else if (processes == 1)
    std::snprintf(buf, sizeof(buf), "1 process x %d threads (mbs=%d): %.3f s/step, %.1f MiB",
                  threads, p.strategy.mbs, p.step_s, p.memory / (1 << 20));
  else
    std::snprintf(buf, sizeof(buf), "%d processes, %s: %.3f s/step, %.1f MiB per process",
                  processes, plan::strategy_string(p.strategy).c_str(), p.step_s,
                  p.memory / (1 << 20));
  return buf;
}

}  // namespace

StatusOr<AutoChoice> choose_auto_strategy(const train::TrainConfig& config, int cores, int nodes,
                                          const plan::LinkSpec* inter_node, bool elastic_nodes) {
  if (nodes > 1 && inter_node == nullptr)
    return InvalidArgument("--strategy auto across nodes needs the measured link between them");
  CANN_ASSIGN_OR_RETURN(model::ModelSpec spec, model::load_model_spec(config.model));
  CANN_ASSIGN_OR_RETURN(plan::ClusterSpec cluster, local_cluster(cores, cores, "auto", false));
  if (nodes > 1) {
    cluster.nodes = nodes;
    cluster.inter_node = *inter_node;
  }
  // Once per run: the figures the choice rests on were measured while the machine was busy.
  if (!cluster.measured_under_load.empty())
    std::fprintf(stderr,
                 "auto: warning: the calibrated spec %s was measured under load (%s), so this "
                 "choice may be wrong; hint: rerun `cann-train bench calibrate` on a quiet "
                 "machine\n",
                 cluster.source.c_str(), cluster.measured_under_load.c_str());
  // --precision bf16: the linear layers at the calibrated bf16 GEMM rate.
  if (config.precision == kernels::GemmPrecision::kBf16) {
    if (cluster.device.bf16_gemm_tflops > 0)
      cluster.device.bf16_gemms = true;
    else
      std::fprintf(stderr,
                   "auto: warning: the calibrated spec %s has no bf16 GEMM rate, so this choice "
                   "prices fp32 GEMMs; hint: rerun `cann-train bench calibrate`\n",
                   cluster.source.c_str());
  }
  const int seq = config.seq_len > 0 ? config.seq_len : spec.seq_length;
  const int gbs = config.batch_size;
  const plan::EngineBuckets buckets = plan::EngineBuckets::of_mib(config.bucket_mb);

  auto price = [&](const plan::ClusterSpec& c, const plan::Strategy& s) -> StatusOr<Priced> {
    CANN_ASSIGN_OR_RETURN(plan::PlanInput in, plan::make_plan_input(spec, c, 0));
    in.seq_len = seq;
    in.engine_buckets = buckets;
    CANN_ASSIGN_OR_RETURN(plan::Prediction p, plan::predict(in, s, plan::Fidelity::kExact));
    if (!p.fits) return FailedPrecondition("does not fit");
    return Priced{s, p.step_time_s, p.memory_peak_bytes};
  };

  // One process using every core: one device, its GEMM rate scaled by the threads' speed-up,
  // measured on the model's MLP shape (capped, so a huge model costs no more than a second).
  const double speedup = thread_speedup(cores, std::min(gbs, 8) * seq, spec.hidden_size,
                                        spec.intermediate_size, config.threads);
  plan::ClusterSpec single = threaded_device(cluster, cores, speedup);
  std::vector<Priced> alone, split;
  size_t planned = 0;
  // Every split the engine trains over the cluster's devices, in one search.
  auto search = [&](const plan::ClusterSpec& c, std::vector<Priced>* out) -> Status {
    if (auto found = train::search_engine_layouts(config, spec, c, elastic_nodes, 5); found.ok()) {
      planned += found->feasible.size();
      for (const plan::Prediction& p : found->top)
        if (p.fits) out->push_back({p.strategy, p.step_time_s, p.memory_peak_bytes});
    }
    return OkStatus();
  };
  if (nodes > 1) {
    // One process per node using every core, the nodes joined by the measured link.
    single.nodes = nodes;
    single.inter_node = *inter_node;
    CANN_RETURN_IF_ERROR(search(single, &alone));
  } else {
    for (int mbs : divisors(gbs)) {
      plan::Strategy s;
      s.dp = 1;
      s.mbs = mbs;
      s.gbs = gbs;
      if (auto p = price(single, s); p.ok()) alone.push_back(*p);
    }
    planned += alone.size();
  }
  // One single-threaded process per core.
  if (cores > 1) CANN_RETURN_IF_ERROR(search(cluster, &split));
  auto fastest = [](std::vector<Priced>& v) {
    std::sort(v.begin(), v.end(), [](const Priced& a, const Priced& b) {
      return a.step_s < b.step_s || (a.step_s == b.step_s && a.memory < b.memory);
    });
  };
  fastest(alone);
  fastest(split);
  if (alone.empty() && split.empty())
    return InvalidArgument("--strategy auto: no layout of model '" + spec.name + "' with batch " +
                           std::to_string(gbs) + " x " + std::to_string(seq) +
                           " fits this machine's memory by the planner; hint: a smaller model, or "
                           "a lower --batch-size "
                           "or --seq-len");
  AutoChoice c;
  const bool pick_alone = !alone.empty() && (split.empty() || alone[0].step_s <= split[0].step_s);
  char head[320];
  if (nodes > 1)
    std::snprintf(head, sizeof(head),
                  "auto: planned %zu layouts of %s for %d nodes x %d cores (threads speed one "
                  "GEMM up %.2fx here; between nodes %.3g GB/s, %.3g us measured); per node ",
                  planned, spec.name.c_str(), nodes, cores, speedup, inter_node->bandwidth_GBps,
                  inter_node->latency_us);
  else
    std::snprintf(head, sizeof(head),
                  "auto: planned %zu layouts of %s for %d cores (threads speed one GEMM up "
                  "%.2fx here); ",
                  planned, spec.name.c_str(), cores, speedup);
  c.report = head;
  if (pick_alone) {
    c.processes = 1;
    c.threads = cores;
    if (nodes > 1) c.strategy = alone[0].strategy;
    c.report += "chose " + describe(alone[0], 1, cores, nodes);
    if (!split.empty()) {
      char why[96];
      std::snprintf(why, sizeof(why), "\nauto: best over %d processes, %.0f%% slower: ", cores,
                    100.0 * (split[0].step_s / alone[0].step_s - 1.0));
      c.report += why + describe(split[0], cores, 1, nodes);
    }
  } else {
    c.processes = cores;
    c.threads = 1;
    c.strategy = split[0].strategy;
    c.report += "chose " + describe(split[0], cores, 1, nodes);
    if (!alone.empty()) {
      char why[96];
      std::snprintf(why, sizeof(why), "\nauto: one process with %d threads, %.0f%% slower: ", cores,
                    100.0 * (alone[0].step_s / split[0].step_s - 1.0));
      c.report += why + describe(alone[0], 1, cores, nodes);
    }
  }
  return c;
}

}  // namespace cann::cli
