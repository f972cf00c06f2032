// Plan against reality: the pieces of `cann-train bench plan-vs-real` that decide its verdict,
// apart from the processes it launches. A benchmark strategy (a strategy string, optionally
// with the pipeline schedule, or "single" for one process with every core as threads) is
// completed into what the planner prices and `run` trains; the run's step log and its memory
// line are read back; predictions and measurements become signed errors, and the medians of
// the absolute errors are judged against the targets.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "model/spec.h"
#include "plan/cluster.h"
#include "plan/engine_memory.h"
#include "plan/predict.h"
#include "plan/strategy.h"

namespace cann::plan {

// The default list: every layout the engine trains, on 2, 4 and 8 processes (more processes
// than cores share them), with one process and plain data parallelism for reference. ep rows
// apply to MoE models only, cp rows to dense ones.
inline constexpr const char* kPlanVsRealStrategies =
    "single;dp=2;tp=2;tp=2,sp=on;pp=2,schedule=gpipe;pp=2,schedule=1f1b;pp=2,vpp=2;dp=2,ep=2;"
    "dp=2,tp=2;dp=2,pp=2;pp=2,tp=2;dp=4,ep=2;cp=2;dp=8;dp=2,tp=2,pp=2;dp=4,tp=2";

struct BenchStrategy {
  std::string label;     // as written in the list, e.g. "pp=2,schedule=gpipe"
  Strategy strategy;     // dp, gbs and mbs filled in
  std::string schedule;  // pp > 1: gpipe, 1f1b or, with vpp > 1, interleaved (the engine's
                         // defaults); empty otherwise
  int processes = 1;
  bool single = false;       // one process, every core as threads
  std::string run_strategy;  // for `run --strategy`; empty when single
};

// "single", or a strategy string with an optional `schedule=gpipe|1f1b` key. Omitted keys: dp 1,
// gbs `global_batch`, mbs the whole per-replica batch without pipelining, else a quarter of it
// per micro-batch (so each stage has 4 micro-batches to overlap), at least 1.
StatusOr<BenchStrategy> parse_bench_strategy(const std::string& text, int global_batch);
// A ';'-separated list of them ("tp=2;dp=2,tp=2;single").
StatusOr<std::vector<BenchStrategy>> parse_bench_strategies(const std::string& list,
                                                            int global_batch);

// The planner's forecast for the run: step time, rank 0's training state (the first pipeline
// stage, the one whose accounting `run` prints) and the resident set of the busiest and of the
// lightest rank: training state, the device's runtime reserve (calibrated: a worker's floor)
// and `data_bytes`, the token arrays every worker loads whole. The planner times and sizes
// 1F1B; under the GPipe schedule every stage holds all micro-batches' activations, which the
// forecast adds.
struct Forecast {
  double step_s = 0;
  double rank0_bytes = 0;
  double resident_max_bytes = 0;
  double resident_min_bytes = 0;
  TimeBreakdown time;
};
StatusOr<Forecast> forecast(const model::ModelSpec& m, const ClusterSpec& c, const BenchStrategy& s,
                            int seq_len, const EngineBuckets& buckets, double data_bytes = 0);

// step_time_s of every step line of a JSONL step log (event lines skipped), in order. A line
// that is not JSON, or a step line without step_time_s, is an error naming `where` and the line.
StatusOr<std::vector<double>> read_step_times(const std::string& jsonl, const std::string& where);
// "memory per rank: ... total 19.9 MiB" in a run's output: 19.9 (MiB). NotFound when absent.
StatusOr<double> read_engine_memory_mib(const std::string& output);
// VmHWM (peak resident set) of a /proc/<pid>/status text, in MiB; 0 when absent.
double read_vm_hwm_mib(const std::string& proc_status);

// The median step time after dropping the first `warmup` steps; an error when none remain.
StatusOr<double> median_step_time(const std::vector<double>& times, int warmup);
// 100 * (predicted - measured) / measured.
double error_percent(double predicted, double measured);

struct Verdict {
  int rows = 0;
  double median_abs_error = 0;  // percent
  double max_abs_error = 0;     // percent
  double target = 0;            // percent
  bool per_row = false;         // the target holds for every row, not for the median
  bool pass = false;            // rows > 0 and (per_row ? max : median) <= target
};
Verdict judge(const std::vector<double>& errors_percent, double target_percent,
              bool per_row = false);

}  // namespace cann::plan
