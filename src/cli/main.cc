// cann-train: the command-line entry point. Parses the subcommand and its flags with CLI11 and
// turns every usage error into one line on stderr and exit status 2.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include "cli/commands.h"

int cann::cli::fail_line(const char* prefix, const Status& s) {
  std::fprintf(stderr, "%s: %s\n", prefix, s.message().c_str());
  return s.exit_code();
}

int main(int argc, char** argv) {
  CLI::App app{"cann-train: plan, train, survive and show distributed training."};
  app.name("cann-train");
  app.set_version_flag("--version", std::string("cann-train 0.1.0"));
  app.require_subcommand(1);
  std::map<std::string, cann::cli::CommandMain> commands;
  const std::vector<std::string> args(argv + 1, argv + argc);
  commands["run"] = cann::cli::add_run_command(app, args);
  commands["bench"] = cann::cli::add_bench_command(app, args);
  commands["debug"] = cann::cli::add_debug_command(app, args);
  commands["scale"] = cann::cli::add_scale_command(app);
  commands["search"] = cann::cli::add_search_command(app);
  commands["simulate"] = cann::cli::add_simulate_command(app);
  commands["plan"] = cann::cli::add_plan_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // The deepest (sub)command that was recognized, e.g. "cann-train bench".
    std::string where = "cann-train";
    CLI::App* deepest = &app;
    while (!deepest->get_subcommands().empty()) {
      deepest = deepest->get_subcommands().back();
      where += " " + deepest->get_name();
    }
    std::string msg = e.what();
    if (msg.find("subcommand is required") != std::string::npos) {
      std::string names;
      for (const CLI::App* sub : deepest->get_subcommands({}))
        names += (names.empty() ? "" : ", ") + sub->get_name();
      msg = "a subcommand is required (" + names + ")";
      const int depth = static_cast<int>(std::count(where.begin(), where.end(), ' '));
      if (argc > depth + 1 && argv[depth + 1][0] != '-')
        msg = std::string("unknown subcommand '") + argv[depth + 1] +
              "'; the subcommands are: " + names;
    }
    std::fprintf(stderr, "%s: %s; hint: see '%s --help'\n", where.c_str(), msg.c_str(),
                 where.c_str());
    return 2;
  }
  for (const CLI::App* sub : app.get_subcommands()) return commands.at(sub->get_name())();
  return 2;
}
