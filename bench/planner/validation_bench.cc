// validation_bench: the planner against the published runs of
// configs/validation/planner_cases.yaml, one row per case (published and predicted seconds per
// iteration, signed error, predicted memory), then the summary the prediction targets are
// judged on: median absolute error, mean signed error, worst row.
//
// Usage: validation_bench [--breakdown] [CASES.yaml]   (default: the repository's cases file;
// --breakdown adds where each predicted step goes on its bottleneck stage)
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
  return 0;
}
