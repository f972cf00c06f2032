// cann-train: the command-line entry point. Parses the subcommand and its flags with CLI11 and
// turns every usage error into one line on stderr and exit status 2.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>
#include <string>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"cann-train: plan, train, survive and show distributed training."};
  app.name("cann-train");
  app.set_version_flag("--version", std::string("cann-train 0.1.0"));
  app.require_subcommand(1);
  std::map<std::string, cann::cli::CommandMain> commands;
  commands["run"] = cann::cli::add_run_command(app, std::vector<std::string>(argv + 1, argv + argc));

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string where = "cann-train";
    for (const CLI::App* sub : app.get_subcommands()) where += " " + sub->get_name();
    std::string msg = e.what();
    if (msg.find("subcommand is required") != std::string::npos) {
      msg = "a subcommand is required (run)";
      if (argc > 1 && argv[1][0] != '-')
        msg = std::string("unknown subcommand '") + argv[1] + "'; the subcommands are: run";
    }
    std::fprintf(stderr, "%s: %s; hint: see '%s --help'\n", where.c_str(), msg.c_str(),
                 where.c_str());
    return 2;
  }
  for (const CLI::App* sub : app.get_subcommands()) return commands.at(sub->get_name())();
  return 2;
}
