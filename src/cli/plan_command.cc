// `cann-train plan diff A B`: two plan files side by side (plan/plan_file.h), every field that
// differs, numbers with their ratio; predicted and measured figures alike, so two recipes, or a
// plan before and after its run, compare at a glance.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "plan/plan_file.h"

namespace cann::cli {

CommandMain add_plan_command(CLI::App& app) {
  auto files = std::make_shared<std::pair<std::string, std::string>>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Plan files written by `search --out` / `simulate --out` and trained by `run --plan`");
  cmd->require_subcommand(1);
  CLI::App* diff = cmd->add_subcommand(
      "diff", "Compare two plans: model, cluster, strategy, predicted and measured figures");
  diff->add_option("A", files->first, "The first plan file")->required();
  diff->add_option("B", files->second, "The second plan file")->required();
  return [files]() {
    auto a = plan::read_plan_file(files->first);
    auto b = a.ok() ? plan::read_plan_file(files->second) : a;
    if (!a.ok() || !b.ok()) {
      std::fprintf(stderr, "cann-train plan diff: error: %s\n",
                   (a.ok() ? b : a).status().message().c_str());
      return (a.ok() ? b : a).status().exit_code();
    }
    std::printf("%s", plan::plan_diff(*a, *b, files->first, files->second).c_str());
    return 0;
  };
}

}  // namespace cann::cli
