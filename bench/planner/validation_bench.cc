// validation_bench: the planner against the published runs of
// configs/validation/planner_cases.yaml, one row per case (published and predicted seconds per
// iteration, signed error, predicted memory), then the summary the prediction targets are
// judged on: median absolute error, mean signed error, worst row.
//
// Usage: validation_bench [CASES.yaml]   (default: the repository's cases file)
#include <cstdio>
#include <string>

#include "core/fs.h"
#include "plan/validation.h"

int main(int argc, char** argv) {
  using namespace cann;
  const std::string path =
      argc > 1 ? argv[1] : std::string(CANN_SOURCE_DIR) + "/configs/validation/planner_cases.yaml";
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
  return 0;
}
