// Plan against reality: completing benchmark strategies, reading runs back, judging errors.
#include "plan/plan_vs_real.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/machine_load.h"

namespace cann::plan {

StatusOr<BenchStrategy> parse_bench_strategy(const std::string& text, int global_batch) {
  BenchStrategy b;
  b.label = text;
  if (global_batch <= 0) return InvalidArgument("global batch must be positive");
  if (text == "single") {
    b.single = true;
    b.strategy.dp = 1;
    b.strategy.gbs = global_batch;
    b.strategy.mbs = global_batch;
    return b;
  }
  // Take `schedule=...` out: the strategy grammar does not know it; run takes it as a flag.
  std::string rest;
  bool has_mbs = false;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.rfind("schedule=", 0) == 0) {
      b.schedule = item.substr(9);
      if (b.schedule != "gpipe" && b.schedule != "1f1b" && b.schedule != "interleaved")
        return InvalidArgument("strategy '" + text + "': unknown schedule '" + b.schedule +
                               "'; hint: use schedule=gpipe, 1f1b or interleaved");
      continue;
    }
    if (item.rfind("mbs=", 0) == 0) has_mbs = true;
    rest += rest.empty() ? item : "," + item;
  }
  CANN_ASSIGN_OR_RETURN(Strategy s, parse_strategy(rest));
  if (s.dp == 0) s.dp = 1;
  if (s.gbs == 0) s.gbs = global_batch;
  if (s.gbs % s.dp != 0)
    return InvalidArgument("strategy '" + text + "': global batch " + std::to_string(s.gbs) +
                           " does not divide over dp=" + std::to_string(s.dp) +
                           "; hint: pick a batch that is a multiple of dp");
  const int replica_batch = s.gbs / s.dp;
  if (!has_mbs) s.mbs = s.pp > 1 ? std::max(1, replica_batch / 4) : replica_batch;
  if (replica_batch % s.mbs != 0)
    return InvalidArgument("strategy '" + text + "': mbs=" + std::to_string(s.mbs) +
                           " does not divide the " + std::to_string(replica_batch) +
                           " sequences of each data-parallel replica; hint: pick a divisor");
  if (s.pp > 1 && b.schedule.empty()) b.schedule = s.vpp > 1 ? "interleaved" : "1f1b";
  if (s.pp == 1 && !b.schedule.empty())
    return InvalidArgument("strategy '" + text + "': a schedule needs pp > 1");
  b.strategy = s;
  b.processes = s.devices();
  b.run_strategy = strategy_string(s);
  return b;
}

StatusOr<std::vector<BenchStrategy>> parse_bench_strategies(const std::string& list,
                                                            int global_batch) {
  std::vector<BenchStrategy> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ';')) {
    if (item.empty()) continue;
    CANN_ASSIGN_OR_RETURN(BenchStrategy b, parse_bench_strategy(item, global_batch));
    out.push_back(std::move(b));
  }
  if (out.empty())
    return InvalidArgument("--strategies '" + list +
                           "' names no strategy; hint: e.g. \"tp=2;dp=2,tp=2;single\"");
  return out;
}

StatusOr<Forecast> forecast(const model::ModelSpec& m, const ClusterSpec& c, const BenchStrategy& s,
                            int seq_len, const EngineBuckets& buckets, double data_bytes) {
  CANN_ASSIGN_OR_RETURN(PlanInput in, make_plan_input(m, c, 0));
  in.seq_len = seq_len;
  in.engine_buckets = buckets;
  CANN_ASSIGN_OR_RETURN(Prediction p, predict(in, s.strategy, Fidelity::kExact));
  Forecast f;
  f.step_s = p.step_time_s;
  f.time = p.time;
  if (p.stages.empty()) return Internal("the prediction has no pipeline stage");
  // The planner times 1F1B, whose stage i holds min(m, pp - i) micro-batches' activations at its
  // first backward. GPipe runs every forward before any backward: the same bubble,
  // (m + pp - 1) slots of forward plus backward when stages are even, but every stage holds
  // all m. For pp = 2, m = 4: stage 0 holds 4 instead of 2, twice the activations.
  const bool gpipe = s.schedule == "gpipe" && s.strategy.pp > 1 && s.strategy.vpp == 1;
  const int mb = s.strategy.micro_batches(), pp = s.strategy.pp;
  f.resident_min_bytes = -1;
  for (int i = 0; i < static_cast<int>(p.stages.size()); ++i) {
    const StageReport& st = p.stages[i];
    const double extra =
        gpipe ? st.activation_bytes * (static_cast<double>(mb) / std::min(mb, pp - i) - 1) : 0;
    const double resident = st.total_bytes + st.page_slack_bytes + extra + data_bytes;
    if (i == 0) f.rank0_bytes = st.total_bytes - st.reserved_bytes + extra;
    f.resident_max_bytes = std::max(f.resident_max_bytes, resident);
    f.resident_min_bytes =
        f.resident_min_bytes < 0 ? resident : std::min(f.resident_min_bytes, resident);
  }
  return f;
}

StatusOr<std::vector<double>> read_step_times(const std::string& jsonl, const std::string& where) {
  std::vector<double> times;
  std::stringstream in(jsonl);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string at = where + ":" + std::to_string(number);
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object())
      return DataLoss(at + ": not a JSON object; hint: is this a `run --log-json` step log?");
    if (j.contains("event") || !j.contains("step")) continue;
    if (!j.contains("step_time_s") || !j["step_time_s"].is_number())
      return DataLoss(at + ": step line without a numeric step_time_s");
    times.push_back(j["step_time_s"].get<double>());
  }
  return times;
}

StatusOr<double> read_engine_memory_mib(const std::string& output) {
  const size_t at = output.find("memory per rank:");
  if (at == std::string::npos) return NotFound("no 'memory per rank:' line in the run's output");
  const size_t end = output.find('\n', at);
  const std::string line =
      output.substr(at, end == std::string::npos ? std::string::npos : end - at);
  const size_t total = line.find("total ");
  double mib = 0;
  if (total == std::string::npos || std::sscanf(line.c_str() + total, "total %lf MiB", &mib) != 1)
    return DataLoss("the run's memory line has no 'total X MiB': " + line);
  return mib;
}

double read_vm_hwm_mib(const std::string& proc_status) {
  const size_t at = proc_status.find("VmHWM:");
  long long kb = 0;
  if (at == std::string::npos || std::sscanf(proc_status.c_str() + at, "VmHWM: %lld kB", &kb) != 1)
    return 0;
  return static_cast<double>(kb) / 1024.0;
}

StatusOr<double> median_step_time(const std::vector<double>& times, int warmup) {
  if (warmup < 0) warmup = 0;
  if (static_cast<int>(times.size()) <= warmup)
    return FailedPrecondition("the step log has " + std::to_string(times.size()) +
                              " steps, none left after " + std::to_string(warmup) +
                              " warm-up steps; hint: raise --steps");
  return median(std::vector<double>(times.begin() + warmup, times.end()));
}

double error_percent(double predicted, double measured) {
  return 100.0 * (predicted - measured) / measured;
}

Verdict judge(const std::vector<double>& errors_percent, double target_percent, bool per_row) {
  Verdict v;
  v.rows = static_cast<int>(errors_percent.size());
  v.target = target_percent;
  v.per_row = per_row;
  std::vector<double> abs_errors;
  for (double e : errors_percent) {
    abs_errors.push_back(std::fabs(e));
    v.max_abs_error = std::max(v.max_abs_error, std::fabs(e));
  }
  v.median_abs_error = median(abs_errors);
  v.pass = v.rows > 0 && (per_row ? v.max_abs_error : v.median_abs_error) <= target_percent;
  return v;
}

}  // namespace cann::plan
