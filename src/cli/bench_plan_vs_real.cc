// The plan-vs-real benchmark: forecast, train, compare, judge.
#include "cli/bench_plan_vs_real.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/child_run.h"
#include "cli/local_cluster.h"
#include "cli/validators.h"
#include "core/fs.h"
#include "core/host.h"
#include "core/machine_load.h"
#include "core/threads.h"
#include "data/dataset.h"
#include "model/spec.h"
#include "plan/engine_support.h"
#include "plan/plan_input.h"
#include "plan/plan_vs_real.h"
#include "train/config.h"

namespace cann::cli {
namespace {

constexpr double kStepTarget = 15.0;    // percent, median over the rows
constexpr double kMemoryTarget = 10.0;  // percent, median over the rows

struct Flags {
  std::string models = "gpt_tiny,moe_bert_tiny";
  int steps = 20;
  int warmup = 3;
  int batch = 16;
  std::string strategies = plan::kPlanVsRealStrategies;
  bool json = false;
  double run_timeout_s = 600;
  int repeat = 1;
  std::string calibrate = "each";  // each: measure the machine before every run; stored
  std::string precision = "fp32";  // of the runs' GEMMs, and so of the forecasts
};

struct Row {
  std::string model, label;
  int processes = 0;
  std::string skipped;  // why it was not measured; empty when it was
  plan::Forecast predicted;
  double step_s = 0, engine_mib = 0;
  double rss_max_mib = 0, rss_min_mib = 0;  // the largest and smallest worker's peak
  double step_error = 0, memory_error = 0;
  double step_error_min = 0, step_error_max = 0;  // over the repeated pairs
  double rss_error = 0;  // of the two comparisons (largest, smallest), the larger |error|
  std::string command;
};

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::string quoted(const std::vector<std::string>& args) {
  std::string s = "cann-train";
  for (const auto& a : args)
    s +=
        " " +
        (a.find_first_of(",;= ") != std::string::npos && a.rfind("--", 0) != 0 ? "'" + a + "'" : a);
  return s;
}

// The last line of a failed run's output that says what went wrong.
std::string error_line(const std::string& output) {
  std::string last;
  for (const std::string& line : split(output, '\n'))
    if (line.find("error") != std::string::npos) last = line;
  return last.empty() ? "no error line in its output" : last;
}

// Prices, trains and measures one strategy of one model; a row with `skipped` set when the
// engine cannot train it. Errors are failures of the benchmark itself.
StatusOr<Row> measure_once(const Flags& f, const model::ModelSpec& spec, const std::string& model,
                           const plan::BenchStrategy& b, int cores, const std::string& dir,
                           double data_bytes, int index) {
  Row r;
  r.model = model;
  r.label = b.label;
  r.processes = b.processes;
  if (!b.single) {
    plan::EngineShape shape;
    shape.world = b.processes;
    Status can = plan::engine_supports(b.strategy, spec, shape);
    if (!can.ok()) {
      r.skipped = "not trainable in this build: " + can.message();
      return r;
    }
  }
  // The forecast, on the spec calibrated for this many processes.
  const int seq = spec.seq_length;
  plan::EngineBuckets buckets;  // run's default --bucket-size-mb (plan::kBucketMiB)
  plan::ClusterSpec cluster;
  const int devices = b.single ? cores : b.processes;
  const bool quiet = f.json || f.calibrate == "each";
  auto calibrated =
      f.calibrate == "each"
          ? local_cluster_measured_now(devices, cores, dir + "/local.yaml", "plan-vs-real", quiet)
          : local_cluster(devices, cores, "plan-vs-real", quiet);
  if (!calibrated.ok()) return calibrated.status();
  if (b.single) {
    const plan::ClusterSpec& local = *calibrated;
    const double speedup = thread_speedup(cores, std::min(f.batch, 8) * seq, spec.hidden_size,
                                          spec.intermediate_size, 1);
    cluster = threaded_device(local, cores, speedup);
  } else {
    cluster = *calibrated;
  }
  if (f.precision != "fp32")
    CANN_RETURN_IF_ERROR(plan::select_training_precision(&cluster, f.precision));
  auto predicted = plan::forecast(spec, cluster, b, seq, buckets, data_bytes);
  if (!predicted.ok()) {
    r.skipped = "the planner refuses it: " + predicted.status().message();
    return r;
  }
  r.predicted = *predicted;

  // The run.
  const std::string log = dir + "/run" + std::to_string(index) + ".jsonl";
  std::vector<std::string> args = {"run",
                                   "--model",
                                   model,
                                   "--steps",
                                   std::to_string(f.steps),
                                   "--batch-size",
                                   std::to_string(f.batch),
                                   "--monitor",
                                   "off",
                                   "--eval-every",
                                   "0",
                                   "--eval-batches",
                                   "1",
                                   "--sample-tokens",
                                   "0",
                                   "--log-json",
                                   log,
                                   "--nproc-per-node",
                                   std::to_string(b.processes),
                                   "--precision",
                                   f.precision};
  if (!b.single) {
    args.insert(args.end(), {"--threads", "1", "--strategy", b.run_strategy});
    if (!b.schedule.empty()) args.insert(args.end(), {"--pipeline-schedule", b.schedule});
  }
  std::vector<std::string> shown = args;
  for (size_t i = 0; i + 1 < shown.size(); ++i)
    if (shown[i] == "--log-json") shown[i + 1] = "LOG.jsonl";
  r.command = quoted(shown);
  CANN_ASSIGN_OR_RETURN(ChildRun run, run_child(args, dir + "/run" + std::to_string(index) + ".out",
                                                f.run_timeout_s, b.processes > 1));
  if (run.exit_code == 2) {
    r.skipped = "not trainable in this build: " + error_line(run.output);
    return r;
  }
  if (run.exit_code != 0)
    return Internal(r.command + " failed (" +
                    (run.exit_code < 0 ? std::string("killed after the time limit")
                                       : "exit " + std::to_string(run.exit_code)) +
                    "): " + error_line(run.output) + "; hint: run it by hand to see why");
  CANN_ASSIGN_OR_RETURN(std::string text, read_file(log));
  CANN_ASSIGN_OR_RETURN(std::vector<double> times, plan::read_step_times(text, log));
  if (static_cast<int>(times.size()) != f.steps)
    return DataLoss(log + ": " + std::to_string(times.size()) + " step lines for " +
                    std::to_string(f.steps) + " steps; hint: run it by hand to see why");
  CANN_ASSIGN_OR_RETURN(r.step_s, plan::median_step_time(times, f.warmup));
  CANN_ASSIGN_OR_RETURN(r.engine_mib, plan::read_engine_memory_mib(run.output));
  const double mib = 1.0 / (1 << 20);
  r.step_error = plan::error_percent(r.predicted.step_s, r.step_s);
  r.memory_error = plan::error_percent(r.predicted.rank0_bytes * mib, r.engine_mib);
  if (!run.worker_hwm_mib.empty()) {
    r.rss_max_mib = run.worker_hwm_mib.front();
    r.rss_min_mib = run.worker_hwm_mib.back();
    const double hi = plan::error_percent(r.predicted.resident_max_bytes * mib, r.rss_max_mib);
    const double lo = plan::error_percent(r.predicted.resident_min_bytes * mib, r.rss_min_mib);
    r.rss_error = std::fabs(hi) >= std::fabs(lo) ? hi : lo;
  }
  return r;
}

// `repeat` pairs of forecast (each on its own calibration) and run. The row's step figures
// are the medians over the pairs, its error the median of the pairs' errors: on a machine
// whose load changes from second to second, one calibration and the run after it can each
// catch a different load; the median pair is the one least disturbed.
StatusOr<Row> measure(const Flags& f, const model::ModelSpec& spec, const std::string& model,
                      const plan::BenchStrategy& b, int cores, const std::string& dir,
                      double data_bytes, int* index) {
  std::vector<double> predicted, measured, errors;
  Row last;
  for (int rep = 0; rep < f.repeat; ++rep) {
    CANN_ASSIGN_OR_RETURN(last,
                          measure_once(f, spec, model, b, cores, dir, data_bytes, (*index)++));
    if (!last.skipped.empty()) return last;
    predicted.push_back(last.predicted.step_s);
    measured.push_back(last.step_s);
    errors.push_back(last.step_error);
  }
  last.predicted.step_s = median(predicted);
  last.step_s = median(measured);
  last.step_error = median(errors);
  last.step_error_min = *std::min_element(errors.begin(), errors.end());
  last.step_error_max = *std::max_element(errors.begin(), errors.end());
  return last;
}

void print_table(const std::vector<Row>& rows, const plan::Verdict& step,
                 const plan::Verdict& memory, const plan::Verdict& rss) {
  std::printf("%-14s %-26s %5s %9s %9s %7s %13s %9s %9s %7s %15s %15s %7s\n", "model", "strategy",
              "procs", "pred s", "meas s", "err %", "err min..max", "pred MiB", "meas MiB", "err %",
              "pred RSS MiB", "meas RSS MiB", "err %");
  const double mib = 1.0 / (1 << 20);
  for (const Row& r : rows) {
    if (!r.skipped.empty()) {
      std::printf("%-14s %-26s %5d %s\n", r.model.c_str(), r.label.c_str(), r.processes,
                  r.skipped.c_str());
      continue;
    }
    // Resident sets as "largest/smallest" worker (one figure when every worker is alike).
    auto pair = [](double hi, double lo) {
      char buf[48];
      if (std::fabs(hi - lo) < 0.05)
        std::snprintf(buf, sizeof(buf), "%.1f", hi);
      else
        std::snprintf(buf, sizeof(buf), "%.1f/%.1f", hi, lo);
      return std::string(buf);
    };
    char spread[32];
    std::snprintf(spread, sizeof(spread), "%+.0f..%+.0f", r.step_error_min, r.step_error_max);
    std::printf(
        "%-14s %-26s %5d %9.4f %9.4f %+7.1f %13s %9.1f %9.1f %+7.1f %15s %15s %+7.1f\n",
        r.model.c_str(), r.label.c_str(), r.processes, r.predicted.step_s, r.step_s, r.step_error,
        spread, r.predicted.rank0_bytes * mib, r.engine_mib, r.memory_error,
        pair(r.predicted.resident_max_bytes * mib, r.predicted.resident_min_bytes * mib).c_str(),
        pair(r.rss_max_mib, r.rss_min_mib).c_str(), r.rss_error);
  }
  auto verdict = [](const char* what, const plan::Verdict& v) {
    std::printf("%s: median |error| %.1f%%, largest %.1f%%, over %d rows, target <= %.0f%%%s: %s\n",
                what, v.median_abs_error, v.max_abs_error, v.rows, v.target,
                v.per_row ? " on every row" : " median", v.pass ? "PASS" : "FAIL");
  };
  verdict("step time", step);
  verdict("memory (engine accounting)", memory);
  verdict("memory (worker peak RSS)", rss);
}

std::string to_json(const std::vector<Row>& rows, const plan::Verdict& step,
                    const plan::Verdict& memory, const plan::Verdict& rss) {
  nlohmann::json out = nlohmann::json::object();
  nlohmann::json list = nlohmann::json::array();
  const double mib = 1.0 / (1 << 20);
  for (const Row& r : rows) {
    nlohmann::json j = {{"model", r.model}, {"strategy", r.label}, {"processes", r.processes}};
    if (!r.skipped.empty()) {
      j["skipped"] = r.skipped;
    } else {
      const plan::TimeBreakdown& t = r.predicted.time;
      j["predicted_step_s"] = r.predicted.step_s;
      j["measured_step_s"] = r.step_s;
      j["step_error_percent"] = r.step_error;
      j["step_error_percent_min"] = r.step_error_min;
      j["step_error_percent_max"] = r.step_error_max;
      j["predicted_mib"] = r.predicted.rank0_bytes * mib;
      j["measured_mib"] = r.engine_mib;
      j["memory_error_percent"] = r.memory_error;
      j["predicted_rss_max_mib"] = r.predicted.resident_max_bytes * mib;
      j["predicted_rss_min_mib"] = r.predicted.resident_min_bytes * mib;
      j["worker_peak_rss_max_mib"] = r.rss_max_mib;
      j["worker_peak_rss_min_mib"] = r.rss_min_mib;
      j["rss_error_percent"] = r.rss_error;
      j["predicted_breakdown_s"] = {{"gemm", t.gemm_s},       {"stream", t.stream_s},
                                    {"tp_comm", t.tp_comm_s}, {"ep_comm", t.ep_comm_s},
                                    {"p2p", t.p2p_s},         {"dp_comm", t.dp_comm_s},
                                    {"bubble", t.bubble_s},   {"optimizer", t.optimizer_s}};
      j["command"] = r.command;
    }
    list.push_back(j);
  }
  out["rows"] = list;
  auto v = [](const plan::Verdict& x) {
    nlohmann::json j = {{"median_abs_error_percent", x.median_abs_error},
                        {"max_abs_error_percent", x.max_abs_error},
                        {"rows", x.rows},
                        {"target_percent", x.target},
                        {"target_on", x.per_row ? "every row" : "median"}};
    j["verdict"] = x.pass ? "PASS" : "FAIL";
    return j;
  };
  out["step_time"] = v(step);
  out["memory"] = v(memory);
  out["memory_rss"] = v(rss);
  return out.dump(2);
}

int run_plan_vs_real(const Flags& f) {
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "cann-train bench plan-vs-real: error: %s\n", s.message().c_str());
    return s.exit_code();
  };
  if (f.warmup >= f.steps)
    return fail(InvalidArgument("--warmup " + std::to_string(f.warmup) + " leaves none of the " +
                                std::to_string(f.steps) +
                                " steps to time; hint: raise --steps or lower --warmup"));
  auto strategies = plan::parse_bench_strategies(f.strategies, f.batch);
  if (!strategies.ok()) return fail(strategies.status());
  std::vector<std::pair<std::string, model::ModelSpec>> models;
  for (const std::string& name : split(f.models, ',')) {
    auto spec = model::load_model_spec(name);
    if (!spec.ok()) return fail(spec.status());
    models.emplace_back(name, *spec);
  }
  // Every worker loads the runs' data (run's default, 'fortunes') whole, as token ids.
  auto data = data::load_dataset(train::TrainConfig().data);
  if (!data.ok()) return fail(data.status());
  const double data_bytes =
      static_cast<double>(sizeof(data->train[0])) * (data->train.size() + data->val.size());
  const int cores = hardware_threads();
  char dir_template[] = "/tmp/cann-plan-vs-real-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) return fail(IoError("cannot create a directory under /tmp for the runs"));
  std::vector<Row> rows;
  int index = 0;
  Status failed = OkStatus();
  const LoadReading load_before = read_load();
  for (const auto& [name, spec] : models) {
    for (const plan::BenchStrategy& b : *strategies) {
      // Expert parallelism needs experts: a dense model has no ep rows. Context parallelism
      // is trained for dense models only: an MoE model has no cp rows.
      if (b.strategy.ep > 1 && !spec.is_moe()) continue;
      if (b.strategy.cp > 1 && spec.is_moe()) continue;
      if (!f.json) {
        std::printf("plan-vs-real: %s %s (%d process%s)...\n", name.c_str(), b.label.c_str(),
                    b.processes, b.processes == 1 ? "" : "es");
        std::fflush(stdout);
      }
      auto row = measure(f, spec, name, b, cores, dir, data_bytes, &index);
      if (!row.ok()) {
        failed = row.status();
        break;
      }
      rows.push_back(*row);
    }
    if (!failed.ok()) break;
  }
  (void)remove_all(dir);
  if (!failed.ok()) return fail(failed);
  std::vector<double> step_errors, memory_errors, rss_errors;
  for (const Row& r : rows) {
    if (!r.skipped.empty()) continue;
    step_errors.push_back(r.step_error);
    memory_errors.push_back(r.memory_error);
    if (r.rss_max_mib > 0) rss_errors.push_back(r.rss_error);
  }
  const plan::Verdict step = plan::judge(step_errors, kStepTarget);
  const plan::Verdict memory = plan::judge(memory_errors, kMemoryTarget);
  const plan::Verdict rss = plan::judge(rss_errors, kMemoryTarget, /*per_row=*/true);
  if (f.json) {
    std::printf("%s\n", to_json(rows, step, memory, rss).c_str());
  } else {
    std::printf("machine: %s; calibration %s\n", machine_description().c_str(),
                f.calibrate == "each" ? "measured before every run"
                                      : "the stored one (measured first where missing)");
    print_table(rows, step, memory, rss);
    std::printf("1-minute load average %.2f at the start, %.2f at the end (%d cores)\n",
                load_before.load1, read_load().load1, cores);
    std::printf("commands (LOG.jsonl: the step log each run wrote):\n");
    for (const Row& r : rows)
      if (r.skipped.empty()) std::printf("  %s\n", r.command.c_str());
  }
  return step.pass && memory.pass && rss.pass ? 0 : 1;
}

}  // namespace

std::pair<CLI::App*, CommandMain> add_plan_vs_real_command(CLI::App* bench) {
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = bench->add_subcommand(
      "plan-vs-real",
      "Price each strategy with the planner on the calibrated local cluster, train it for real, "
      "and compare step time, memory and every worker's peak resident set (targets: median "
      "error <= 15% and <= 10%, resident set within 10% on every row; exit 0 when all are met, "
      "1 when not)");
  cmd->add_option("--model", f->models, "Models, a comma list")->capture_default_str();
  cmd->add_option("--steps", f->steps, "Steps each run trains")
      ->check(kPositive)
      ->capture_default_str();
  cmd->add_option("--warmup", f->warmup, "First steps left out of the median")
      ->check(kNonNegative)
      ->capture_default_str();
  cmd->add_option("--batch-size", f->batch, "Global batch of every run")
      ->check(kPositive)
      ->capture_default_str();
  cmd->add_option("--strategies", f->strategies,
                  "Strategies separated by ';': strategy strings (a `schedule=gpipe|1f1b` key "
                  "picks the pipeline schedule) or 'single' (one process, every core)")
      ->capture_default_str();
  cmd->add_option("--repeat", f->repeat,
                  "Forecast-and-run pairs per strategy; the row shows their medians (on a busy "
                  "machine, 3 or more)")
      ->check(kPositive)
      ->capture_default_str();
  cmd->add_option("--run-timeout", f->run_timeout_s, "Seconds one run may take")
      ->check(kPositive)
      ->capture_default_str();
  cmd->add_option("--calibrate", f->calibrate,
                  "each: measure the machine (bench calibrate) just before every run, so the "
                  "forecast sees the load the run will; stored: the calibrated 'local' specs "
                  "(measured first where missing)")
      ->check(CLI::IsMember({"each", "stored"}))
      ->capture_default_str();
  cmd->add_option("--precision", f->precision,
                  "GEMM precision of every run, and of its forecast (bf16: the bf16 GEMM rate "
                  "bench calibrate measured)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  cmd->add_flag("--json", f->json, "Print the rows and verdicts as JSON");
  return {cmd, [f]() { return run_plan_vs_real(*f); }};
}

}  // namespace cann::cli
