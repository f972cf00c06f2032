// validation_bench: the planner against the published runs of
// configs/validation/planner_cases.yaml, one row per case (published and predicted seconds per
// iteration, signed error, predicted memory), then the summary the prediction targets are
// judged on: median absolute error, mean signed error, worst row. It then checks the targets
// (median |error| at most 10%, mean signed error within +-5%, no row of the validation set
// beyond 25%, every published layout predicted to fit its device) and exits 1 when any fails,
// naming it.
//
// Usage: validation_bench [--breakdown] [CASES.yaml]   (default: the repository's cases file;
// --breakdown adds where each predicted step goes on its bottleneck stage)
#include <cmath>
#include <cstdio>
#include <string>

#include "core/fs.h"
#include "plan/validation.h"

int main(int argc, char** argv) {
  using namespace cann;
  bool breakdown = false;
  std::string path = std::string(CANN_SOURCE_DIR) + "/configs/validation/planner_cases.yaml";
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--breakdown") {
      breakdown = true;
    } else {
      path = argv[i];
    }
  }
  auto text = read_file(path);
  if (!text.ok()) {
    std::fprintf(stderr, "validation_bench: %s\n", text.status().message().c_str());
    return 2;
  }
  auto cases = plan::parse_validation_cases(*text, path);
  if (!cases.ok()) {
    std::fprintf(stderr, "validation_bench: %s\n", cases.status().message().c_str());
    return 2;
  }
  std::vector<plan::ValidationOutcome> out;
  for (const auto& c : *cases) {
    auto o = plan::run_validation_case(c);
    if (!o.ok()) {
      std::fprintf(stderr, "validation_bench: %s: %s\n", c.id.c_str(),
                   o.status().message().c_str());
      return 1;
    }
    out.push_back(*o);
  }
  std::printf("%s", plan::validation_table(out).c_str());
  if (breakdown) {
    std::printf("\n%-44s %7s %7s %7s %7s %7s %7s %7s %7s %7s %7s\n", "case (bottleneck stage, s)",
                "gemm", "stream", "recomp", "tp", "ep+cp", "p2p", "dp", "optim", "bubble",
                "step");
    for (const auto& o : out) {
      const plan::TimeBreakdown& t = o.prediction.time;
      std::printf("%-44s %7.3f %7.3f %7.3f %7.3f %7.3f %7.3f %7.3f %7.3f %7.3f %7.3f\n",
                  o.c.id.c_str(), t.gemm_s, t.stream_s, t.recompute_s, t.tp_comm_s,
                  t.ep_comm_s + t.cp_comm_s, t.p2p_s, t.dp_comm_s, t.optimizer_s, t.bubble_s,
                  o.prediction.step_time_s);
    }
  }
  const plan::ValidationSummary s = plan::summarize(out);
  std::vector<std::string> missed;
  char buf[160];
  if (s.median_abs > 0.10) {
    std::snprintf(buf, sizeof(buf), "median |error| %.1f%% above 10%%", 100 * s.median_abs);
    missed.push_back(buf);
  }
  if (std::fabs(s.mean_signed) > 0.05) {
    std::snprintf(buf, sizeof(buf), "mean signed error %+.1f%% outside +-5%%", 100 * s.mean_signed);
    missed.push_back(buf);
  }
  for (const auto& o : out) {
    if (!o.c.calibration && std::fabs(o.error) > 0.25) {
      std::snprintf(buf, sizeof(buf), "%s %+.1f%% beyond 25%%", o.c.id.c_str(), 100 * o.error);
      missed.push_back(buf);
    }
    if (!o.fits && o.memory_judged()) {
      std::snprintf(buf, sizeof(buf), "%s needs %.1f of %.1f GiB", o.c.id.c_str(),
                    o.memory_peak_bytes / 1073741824.0, o.memory_limit_bytes / 1073741824.0);
      missed.push_back(buf);
    }
  }
  for (const auto& m : missed) std::printf("target missed: %s\n", m.c_str());
  if (missed.empty()) std::printf("targets met\n");
  return missed.empty() ? 0 : 1;
}
